#ifndef LLMRETRY_HTTP_STATUS_HPP
#define LLMRETRY_HTTP_STATUS_HPP

#include <string_view>

#include "../detail/text.hpp"
#include "../failure.hpp"

namespace llmretry {

/// Returns the failure an HTTP error status means, refined by the provider's machine-readable error code
/// or type when given (never its message): "insufficient_quota" and "billing_hard_limit_reached" make a
/// 429 quota_exhausted; "context_length_exceeded" gives context_length; "content_filter" and
/// "content_policy_violation" give content_filter. 429, 408 and 529 (overloaded: the provider turned the
/// request away) were answered without doing any work (Sent::refused); any other 5xx may have been
/// processed (Sent::maybe_processed). Statuses below 400 give FailureKind::unknown.
[[nodiscard]] constexpr Failure classify_status(int status, std::string_view error_code = {}) noexcept {
  using detail::iequals;
  Failure failure;
  failure.status = status;
  failure.sent = status >= 500 && status != 529 ? Sent::maybe_processed : Sent::refused;
  if (iequals(error_code, "insufficient_quota") || iequals(error_code, "billing_hard_limit_reached")) {
    failure.kind = FailureKind::quota_exhausted;
  } else if (iequals(error_code, "context_length_exceeded")) {
    failure.kind = FailureKind::context_length;
  } else if (iequals(error_code, "content_filter") || iequals(error_code, "content_policy_violation")) {
    failure.kind = FailureKind::content_filter;
  } else if (status == 429) {
    failure.kind = FailureKind::rate_limited;
  } else if (status == 408) {
    failure.kind = FailureKind::request_timeout;
  } else if (status == 400 || status == 422) {
    failure.kind = FailureKind::invalid_request;
  } else if (status == 401 || status == 403) {
    failure.kind = FailureKind::authentication;
  } else if (status == 404) {
    failure.kind = FailureKind::not_found;
  } else if (status >= 500 && status <= 599) {
    failure.kind = FailureKind::server_error;
  } else if (status >= 400 && status <= 499) {
    failure.kind = FailureKind::client_error;
  } else {
    failure.kind = FailureKind::unknown;
    failure.sent = Sent::maybe_processed;
  }
  return failure;
}

}  // namespace llmretry

#endif  // LLMRETRY_HTTP_STATUS_HPP
