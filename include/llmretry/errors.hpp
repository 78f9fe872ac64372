#ifndef LLMRETRY_ERRORS_HPP
#define LLMRETRY_ERRORS_HPP

#include <chrono>
#include <cstdlib>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>

#include "detail/config.hpp"
#include "failure.hpp"
#include "status.hpp"

namespace llmretry {

/// A provider call failed. Carries the classified Failure that decides whether to retry.
class ProviderError : public std::runtime_error {
 public:
  /// An error for an HTTP status (0 when there was no response), classified by classify_status.
  ProviderError(const std::string& message, int status) : ProviderError(message, classify_status(status)) {}
  /// An error with a failure classified by the caller.
  ProviderError(const std::string& message, const Failure& failure) : std::runtime_error(message), failure_(failure) {}

  /// Returns the HTTP status, or 0 when there was no response.
  int status() const noexcept { return failure_.status; }
  /// Returns the classified failure.
  const Failure& failure() const noexcept { return failure_; }

 private:
  Failure failure_;
};

/// HTTP 429: the provider did no work and asks the caller to slow down.
class RateLimited : public ProviderError {
 public:
  /// `provider_wait`: the wait the provider asked for, if it said.
  explicit RateLimited(const std::string& message, std::optional<std::chrono::milliseconds> provider_wait = {})
      : ProviderError(message, with_provider_wait(provider_wait)) {}

  /// Returns the wait the provider asked for, if any.
  std::optional<std::chrono::milliseconds> provider_wait() const noexcept { return failure().provider_wait; }

 private:
  static Failure with_provider_wait(std::optional<std::chrono::milliseconds> wait) {
    Failure failure = classify_status(429);
    failure.provider_wait = wait;
    return failure;
  }
};

/// No answer arrived in time. `sent` says whether the request can have reached the provider:
/// Sent::maybe_processed (the default: a read timeout, the work may have been done and billed) or Sent::not_sent
/// (a connect timeout: nothing was sent, always safe to repeat).
class ProviderTimeout : public ProviderError {
 public:
  explicit ProviderTimeout(const std::string& message, Sent sent = Sent::maybe_processed)
      : ProviderError(message, Failure::timed_out(sent)) {}
};

/// The connection failed: refused or unreachable before sending (Sent::not_sent, the default), or reset after
/// the request went out (Sent::maybe_processed).
class ConnectionError : public ProviderError {
 public:
  explicit ConnectionError(const std::string& message, Sent sent = Sent::not_sent)
      : ProviderError(message, Failure::connection_failed(sent)) {}
};

/// Throws the exception class that `failure` calls for, with `message`: RateLimited (with the failure's
/// provider_wait) for rate_limited, ProviderTimeout for timeout and ConnectionError for connection (each
/// with the failure's Sent), ProviderError with the whole failure for any other kind. Aborts when
/// exceptions are off.
[[noreturn]] inline void throw_provider_error(const std::string& message, const Failure& failure) {
#if !LLMRETRY_HAS_EXCEPTIONS
  (void)message;
  (void)failure;
  std::abort();
#else
  switch (failure.kind) {
    case FailureKind::rate_limited: throw RateLimited(message, failure.provider_wait);
    case FailureKind::timeout: throw ProviderTimeout(message, failure.sent);
    case FailureKind::connection: throw ConnectionError(message, failure.sent);
    default: throw ProviderError(message, failure);
  }
#endif
}

/// Returns the failure a ProviderError (or a class derived from it) carries; nullopt for any other
/// exception, which is not the provider's doing and is never retried.
inline std::optional<Failure> failure_of(const std::exception& error) noexcept {
  if (const auto* provider_error = dynamic_cast<const ProviderError*>(&error)) return provider_error->failure();
  return std::nullopt;
}

}  // namespace llmretry

#endif  // LLMRETRY_ERRORS_HPP
