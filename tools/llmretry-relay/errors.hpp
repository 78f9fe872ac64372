// The answers llmretry-relay makes itself: OpenAI-style error bodies.
#ifndef LLMRETRY_RELAY_ERRORS_HPP
#define LLMRETRY_RELAY_ERRORS_HPP

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace relay {

/// The Content-Type of the JSON the relay sends: "application/json; charset=utf-8" (JSON is UTF-8, RFC
/// 8259). Spelt with its charset, it is never compressed by cpp-httplib (which compresses the bare
/// "application/json" for a client that accepts it): between processes of one machine, compressing costs
/// far more CPU than it saves (brotli, as cpp-httplib uses it, takes milliseconds per answer).
inline constexpr const char* json_content_type = "application/json; charset=utf-8";

/// An answer of the relay's own: a status and an OpenAI-style error.
struct ErrorReply {
  int status;
  std::string message;  ///< what went wrong, for a person; never holds a key
  std::string type;     ///< such as "invalid_request_error"
  std::string code;     ///< a snake_case word, such as "invalid_json" or a stop reason
};

/// The API a client and an upstream speak: OpenAI's (POST /v1/chat/completions, /v1/responses,
/// /v1/embeddings; "Authorization: Bearer KEY") or Anthropic's (POST /v1/messages; "x-api-key: KEY",
/// "anthropic-version").
enum class Format { openai, anthropic };

/// Returns "openai" or "anthropic".
inline const char* to_string(Format format) noexcept { return format == Format::anthropic ? "anthropic" : "openai"; }

/// Returns the Anthropic error type of a relay answer with `status`, such as "rate_limit_error".
inline const char* anthropic_error_type(int status) noexcept {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    default: return status < 500 ? "invalid_request_error" : "api_error";
  }
}

/// Returns the error body of `reply` in `format`: OpenAI's {"error": {"message", "type", "code"}}, or
/// Anthropic's {"type": "error", "error": {"type", "message", "code"}} (its type from the status).
inline std::string error_body(const ErrorReply& reply, Format format = Format::openai) {
  const nlohmann::json body =
      format == Format::anthropic
          ? nlohmann::json{{"type", "error"},
                           {"error",
                            {{"type", anthropic_error_type(reply.status)},
                             {"message", reply.message},
                             {"code", reply.code}}}}
          : nlohmann::json{{"error", {{"message", reply.message}, {"type", reply.type}, {"code", reply.code}}}};
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// Returns a 400 invalid_request_error with `code`.
inline ErrorReply bad_request(std::string message, std::string code) {
  return {400, std::move(message), "invalid_request_error", std::move(code)};
}

}  // namespace relay

#endif  // LLMRETRY_RELAY_ERRORS_HPP
