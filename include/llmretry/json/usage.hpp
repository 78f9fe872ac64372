#ifndef LLMRETRY_JSON_USAGE_HPP
#define LLMRETRY_JSON_USAGE_HPP

/// Reads the token usage of a provider's JSON answer with nlohmann::json (target llmretry::json), for
/// DeploymentOptions::read_usage: the reservation of a paced call is settled with what it really used.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string_view>

#include "../admission/limits.hpp"
#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace json {

namespace detail {

/// Returns `object[key]` when it is an integer in [0, 10^12] (no model counts more tokens for one call);
/// nullopt when absent, and `malformed` set when present but anything else.
inline std::optional<std::int64_t> count_in(const nlohmann::json& object, const char* key, bool& malformed) {
  const auto found = object.find(key);
  if (found == object.end()) return std::nullopt;
  if (found->is_number_unsigned()) {
    const auto value = found->get<std::uint64_t>();
    if (value <= static_cast<std::uint64_t>(llmretry::detail::most_units)) return static_cast<std::int64_t>(value);
  } else if (found->is_number_integer() && found->get<std::int64_t>() >= 0 &&
             found->get<std::int64_t>() <= llmretry::detail::most_units) {
    return found->get<std::int64_t>();
  }
  malformed = true;
  return std::nullopt;
}

/// Returns the cost read from `object[input]` and `object[output]`: nullopt when the input count is
/// absent or either is malformed; an absent output count is 0 (Gemini leaves out an empty one).
inline std::optional<Cost> cost_in(const nlohmann::json& object, const char* input, const char* output) {
  bool malformed = false;
  const auto in = count_in(object, input, malformed);
  const auto out = count_in(object, output, malformed);
  if (malformed || !in) return std::nullopt;
  return Cost{1, *in, out.value_or(0)};
}

}  // namespace detail

/// Returns the usage a provider's JSON answer reports, as one request and its input and output tokens:
/// - OpenAI / Azure: `{"usage": {"prompt_tokens": P, "completion_tokens": C}}`;
/// - Anthropic: `{"usage": {"input_tokens": I, "output_tokens": O}}`;
/// - Gemini / Vertex: `{"usageMetadata": {"promptTokenCount": P, "candidatesTokenCount": C}}`.
/// The output count may be absent (0). Returns nullopt when the body is not JSON, has no usage, or a count
/// is not an integer in [0, 10^12]. Never throws on malformed input (only std::bad_alloc).
[[nodiscard]] inline std::optional<Cost> usage_of(std::string_view body) {
  const auto root = nlohmann::json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (!root.is_object()) return std::nullopt;
  const auto usage = root.find("usage");
  if (usage != root.end() && usage->is_object()) {
    if (usage->contains("prompt_tokens")) return detail::cost_in(*usage, "prompt_tokens", "completion_tokens");
    return detail::cost_in(*usage, "input_tokens", "output_tokens");
  }
  const auto metadata = root.find("usageMetadata");
  if (metadata != root.end() && metadata->is_object())
    return detail::cost_in(*metadata, "promptTokenCount", "candidatesTokenCount");
  return std::nullopt;
}

}  // namespace json
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_JSON_USAGE_HPP
