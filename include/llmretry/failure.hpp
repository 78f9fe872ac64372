#ifndef LLMRETRY_FAILURE_HPP
#define LLMRETRY_FAILURE_HPP

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "detail/text.hpp"
#include "version.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// What went wrong with one attempt, as far as retrying is concerned.
enum class FailureKind {
  rate_limited,        ///< 429: the provider did no work; retry after a wait
  quota_exhausted,     ///< 429 insufficient_quota / billing: waiting does not help
  server_error,        ///< 5xx (529 overloaded included): retry if safe to repeat
  request_timeout,     ///< 408: the server gave up waiting for the request; nothing was processed
  timeout,             ///< no answer in time (the request may have been processed)
  connection,          ///< the connection failed (before or after sending, see Failure::request_sent)
  stream_interrupted,  ///< a streamed answer broke after content reached the caller: never replayed
  unusable_answer,     ///< a successful answer the caller rejected (empty, cut at max tokens, bad JSON):
                       ///< the work was done and billed, so it is retried only when safe to repeat
  invalid_request,     ///< 400 / 422: the same request fails again
  context_length,      ///< the prompt is longer than the model accepts
  content_filter,      ///< the provider refused the content
  authentication,      ///< 401 / 403: key or permission
  not_found,           ///< 404: model or deployment
  client_error,        ///< any other 4xx
  too_large,           ///< the answer passed a size limit of the client: the next one would too; never retried
  unknown,             ///< not recognised: never retried
};

/// Whether the request can have reached the provider, which decides if repeating it is safe.
enum class Sent {
  not_sent,         ///< certainly not sent (connection refused, connect timeout): always safe to repeat
  maybe_processed,  ///< may have been received and processed (read timeout, reset after send, 5xx)
  refused,          ///< received and refused without doing any work (429, 408): safe to repeat
};

/// One failed attempt, classified. Cheap to copy; holds no message text.
struct Failure {
  FailureKind kind = FailureKind::unknown;
  int status = 0;                                          ///< HTTP status, or 0 when there was no response
  std::optional<std::chrono::milliseconds> provider_wait;  ///< the wait the provider asked for, if any (< 0: 0)
  Sent sent = Sent::maybe_processed;
  std::optional<bool> should_retry;  ///< the provider's explicit `x-should-retry`, which wins when set

  /// Returns a failure of `kind` with no HTTP status, no provider wait and no `x-should-retry`.
  [[nodiscard]] static constexpr Failure of(FailureKind kind, Sent sent) noexcept {
    return {kind, 0, std::nullopt, sent, std::nullopt};
  }
  /// Returns a timeout with no response: `sent` says whether the request can have been processed.
  [[nodiscard]] static constexpr Failure timed_out(Sent sent) noexcept { return of(FailureKind::timeout, sent); }
  /// Returns a failed connection with no response: `sent` says whether the request can have been processed.
  [[nodiscard]] static constexpr Failure connection_failed(Sent sent) noexcept {
    return of(FailureKind::connection, sent);
  }
  /// Returns the failure of a successful answer that the caller cannot use: processed, retried when safe
  /// to repeat.
  [[nodiscard]] static constexpr Failure unusable_answer() noexcept {
    return of(FailureKind::unusable_answer, Sent::maybe_processed);
  }

  friend bool operator==(const Failure& a, const Failure& b) noexcept {
    return a.kind == b.kind && a.status == b.status && a.provider_wait == b.provider_wait && a.sent == b.sent &&
           a.should_retry == b.should_retry;
  }
  friend bool operator!=(const Failure& a, const Failure& b) noexcept { return !(a == b); }
};

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

/// Returns true when the kind can succeed on a later attempt (before asking whether repeating is safe).
[[nodiscard]] constexpr bool is_transient(FailureKind kind) noexcept {
  switch (kind) {
    case FailureKind::rate_limited:
    case FailureKind::server_error:
    case FailureKind::request_timeout:
    case FailureKind::timeout:
    case FailureKind::connection:
    case FailureKind::unusable_answer: return true;
    default: return false;
  }
}

/// Returns the snake_case name of a kind, such as "rate_limited".
[[nodiscard]] constexpr const char* to_string(FailureKind kind) noexcept {
  switch (kind) {
    case FailureKind::rate_limited: return "rate_limited";
    case FailureKind::quota_exhausted: return "quota_exhausted";
    case FailureKind::server_error: return "server_error";
    case FailureKind::request_timeout: return "request_timeout";
    case FailureKind::timeout: return "timeout";
    case FailureKind::connection: return "connection";
    case FailureKind::stream_interrupted: return "stream_interrupted";
    case FailureKind::unusable_answer: return "unusable_answer";
    case FailureKind::invalid_request: return "invalid_request";
    case FailureKind::context_length: return "context_length";
    case FailureKind::content_filter: return "content_filter";
    case FailureKind::authentication: return "authentication";
    case FailureKind::not_found: return "not_found";
    case FailureKind::client_error: return "client_error";
    case FailureKind::too_large: return "too_large";
    case FailureKind::unknown: return "unknown";
  }
  return "unknown";
}

/// Returns a one-line description for logs, such as "HTTP 429 rate_limited, retry after 511 ms".
[[nodiscard]] inline std::string describe(const Failure& failure) {
  std::string text;
  if (failure.status != 0) text += "HTTP " + std::to_string(failure.status) + ' ';
  text += to_string(failure.kind);
  if (failure.kind == FailureKind::timeout || failure.kind == FailureKind::connection)
    text += failure.sent == Sent::not_sent ? " (not sent)" : " (may have been processed)";
  if (failure.provider_wait) text += ", retry after " + std::to_string(failure.provider_wait->count()) + " ms";
  return text;
}

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_FAILURE_HPP
