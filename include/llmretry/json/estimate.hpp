#ifndef LLMRETRY_JSON_ESTIMATE_HPP
#define LLMRETRY_JSON_ESTIMATE_HPP

/// The cost to reserve for an OpenAI-style request body (target llmretry::json), before it is sent.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <string_view>

#include "../admission/tokens.hpp"
#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace json {

/// Returns the cost to reserve for the request `body` whose text is `text`: its tokens as estimate_tokens
/// counts them, plus `max_tokens` (or `max_completion_tokens`, or `max_output_tokens`) times `n`; no
/// output tokens when the body sets no maximum. Counts above 10^9 count as 10^9; a field of the wrong
/// type is ignored.
[[nodiscard]] inline Cost estimate_of(const nlohmann::json& body, std::string_view text) {
  const auto count = [&](const char* name) -> std::int64_t {
    if (!body.is_object()) return -1;
    const auto found = body.find(name);
    if (found == body.end() || !found->is_number_unsigned()) return -1;
    return static_cast<std::int64_t>(std::min<std::uint64_t>(found->get<std::uint64_t>(), 1'000'000'000));
  };
  std::int64_t max_tokens = 0;
  for (const char* name : {"max_tokens", "max_completion_tokens", "max_output_tokens"}) {
    if (const std::int64_t found = count(name); found >= 0) {
      max_tokens = found;
      break;
    }
  }
  const std::int64_t n = count("n");
  return estimate_cost(text, max_tokens, n >= 0 ? n : 1);
}

}  // namespace json
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_JSON_ESTIMATE_HPP
