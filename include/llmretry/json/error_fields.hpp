#ifndef LLMRETRY_JSON_ERROR_FIELDS_HPP
#define LLMRETRY_JSON_ERROR_FIELDS_HPP

/// Reads the machine-readable strings of a provider's JSON error body with nlohmann::json
/// (target llmretry::json), for classify_provider_response and llmretry::curl::Options::read_error.

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <type_traits>

#include "../http/providers.hpp"
#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace json {

namespace detail {

/// Copies `object[key]` into `into` when it is a string; anything else is left alone.
inline void copy_string(const nlohmann::json& object, const char* key, std::string& into) {
  const auto found = object.find(key);
  if (found != object.end() && found->is_string()) into = found->get<std::string>();
}

}  // namespace detail

/// Returns the error strings of a parsed error body, in any of the providers' shapes:
/// - OpenAI / Azure: `{"error": {"code": ..., "type": ...}}`;
/// - Anthropic: `{"type": "error", "error": {"type": "overloaded_error"}}`;
/// - Gemini / Vertex: `{"error": {"status": "RESOURCE_EXHAUSTED", "details": [{"@type":
///   "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "30s"}, {"@type":
///   "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{"quotaId": ..., "quotaMetric": ...}]}]}}`,
///   also inside a one-element array;
/// - OpenAI's Responses API stream event `response.failed`: `{"type": "response.failed", "response":
///   {"error": {"code": "server_error", "message": ...}}}`.
/// `error.message` is read too (into ErrorFields::message).
/// Fields that are absent or not strings stay empty; never throws on the document's shape.
/// (A template only so that a string argument picks the overload below.)
template <class Json, std::enable_if_t<std::is_same_v<Json, nlohmann::json>, int> = 0>
ErrorFields error_fields(const Json& body) {
  ErrorFields fields;
  const nlohmann::json& root = body.is_array() && !body.empty() ? body.front() : body;
  if (!root.is_object()) return fields;
  const auto response = root.find("response");
  const nlohmann::json& holder =
      !root.contains("error") && response != root.end() && response->is_object() ? *response : root;
  const auto error = holder.find("error");
  if (error == holder.end() || !error->is_object()) return fields;
  detail::copy_string(*error, "code", fields.code);
  detail::copy_string(*error, "type", fields.type);
  detail::copy_string(*error, "status", fields.status);
  detail::copy_string(*error, "message", fields.message);
  const auto details = error->find("details");
  if (details == error->end() || !details->is_array()) return fields;
  for (const auto& entry : *details) {
    if (!entry.is_object()) continue;
    const auto type = entry.find("@type");
    if (type == entry.end() || !type->is_string()) continue;
    const auto& name = type->get_ref<const std::string&>();
    if (name == "type.googleapis.com/google.rpc.RetryInfo")
      detail::copy_string(entry, "retryDelay", fields.retry_delay);
    if (name != "type.googleapis.com/google.rpc.QuotaFailure") continue;
    const auto violations = entry.find("violations");
    if (violations == entry.end() || !violations->is_array()) continue;
    for (const auto& violation : *violations) {
      if (!violation.is_object()) continue;
      for (const char* key : {"quotaId", "quotaMetric"}) {
        std::string value;
        detail::copy_string(violation, key, value);
        if (value.empty()) continue;
        if (!fields.quota.empty()) fields.quota += ' ';
        fields.quota += value;
      }
    }
  }
  return fields;
}

/// Returns the error strings of a JSON error body given as text; empty fields when the text is not
/// JSON. Never throws on malformed input (only std::bad_alloc).
inline ErrorFields error_fields(std::string_view body) {
  const auto parsed = nlohmann::json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return {};
  return error_fields<nlohmann::json>(parsed);
}

}  // namespace json
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_JSON_ERROR_FIELDS_HPP
