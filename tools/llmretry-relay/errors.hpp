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

/// Returns the OpenAI-style body {"error": {"message": ..., "type": ..., "code": ...}} of `reply`.
inline std::string error_body(const ErrorReply& reply) {
  const nlohmann::json body = {{"error", {{"message", reply.message}, {"type", reply.type}, {"code", reply.code}}}};
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// Returns a 400 invalid_request_error with `code`.
inline ErrorReply bad_request(std::string message, std::string code) {
  return {400, std::move(message), "invalid_request_error", std::move(code)};
}

}  // namespace relay

#endif  // LLMRETRY_RELAY_ERRORS_HPP
