// The lines llmretry-batch writes, in the OpenAI Batch API output format.
#ifndef LLMRETRY_BATCH_LINES_HPP
#define LLMRETRY_BATCH_LINES_HPP

#include <llmretry/curl/curl.hpp>
#include <llmretry/decision.hpp>
#include <llmretry/failure.hpp>
#include <llmretry/json/canonical.hpp>
#include <llmretry/json/error_fields.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <utility>

#include "input.hpp"

namespace batch {

/// A JSON object whose members keep the order they were given in (id first, as the Batch API writes).
using Ordered = nlohmann::ordered_json;

/// Returns `value` as one line of JSON; bytes that are not UTF-8 (from the network) become U+FFFD.
inline std::string dump_line(const Ordered& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// Returns the Batch output's `response` member for `response`: its status, the provider's request id
/// (`x-request-id`, empty when absent) and its body, as JSON when it is JSON nested at most most_depth deep,
/// else as a string.
inline Ordered response_member(const llmretry::curl::Response& response) {
  Ordered body = response.body;
  if (!llmretry::json::nested_deeper_than(response.body, most_depth)) {
    auto parsed = Ordered::parse(response.body, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_discarded()) body = std::move(parsed);
  }
  return {{"status_code", response.status},
          {"request_id", std::string(response.header("x-request-id").value_or(""))},
          {"body", std::move(body)}};
}

/// Returns the Batch output's `id` of `request`: "batch_req_" and the start of its Idempotency-Key's digest.
inline std::string line_id(const Request& request) { return "batch_req_" + request.key.substr(6, 24); }

/// Returns the output line of a request answered with `response`.
inline std::string answer_line(const Request& request, const llmretry::curl::Response& response) {
  return dump_line({{"id", line_id(request)},
                    {"custom_id", request.custom_id},
                    {"response", response_member(response)},
                    {"error", nullptr}});
}

/// Returns an errors-file line: `error` holds `code`, `message`, the stop reason and the attempts made;
/// `response` is the last answer, or null when there was none.
inline std::string error_line(const Request& request, const std::string& code, const std::string& message,
                              const char* stop_reason, int attempts, const llmretry::curl::Response* response) {
  return dump_line(
      {{"id", line_id(request)},
       {"custom_id", request.custom_id},
       {"response", response != nullptr ? response_member(*response) : Ordered(nullptr)},
       {"error", {{"code", code}, {"message", message}, {"stop_reason", stop_reason}, {"attempts", attempts}}}});
}

/// Returns the errors-file line of a request that failed for good with `failure` after `attempts` attempts:
/// the code is the provider's (from the last answer's error body), else the failure's kind; the message is
/// `text` (what the failed attempt that ended the call said: "Couldn't resolve host name: Could not resolve
/// host: ...", "HTTP 400 context_length (context_length_exceeded)"), or the failure described when it is empty.
inline std::string failure_line(const Request& request, const llmretry::Failure& failure, llmretry::StopReason reason,
                                int attempts, const llmretry::curl::Response* response, const std::string& text) {
  const llmretry::ErrorFields fields =
      response != nullptr ? llmretry::json::error_fields(response->body) : llmretry::ErrorFields{};
  const std::string code = !fields.code.empty()   ? fields.code
                           : !fields.type.empty() ? fields.type
                                                  : llmretry::to_string(failure.kind);
  return error_line(request, code, text.empty() ? llmretry::describe(failure) : text, llmretry::to_string(reason),
                    attempts, response);
}

}  // namespace batch

#endif  // LLMRETRY_BATCH_LINES_HPP
