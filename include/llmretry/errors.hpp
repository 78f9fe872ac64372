#ifndef LLMRETRY_ERRORS_HPP
#define LLMRETRY_ERRORS_HPP

#include <chrono>
#include <cstdlib>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "detail/config.hpp"
#include "failure.hpp"
#include "version.hpp"
#include "vocabulary.hpp"

LLMRETRY_BEGIN_NAMESPACE

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
  /// A 429 classified by the caller: `failure` is kept whole (status, wait, `x-should-retry`).
  /// Requires failure.kind == FailureKind::rate_limited.
  RateLimited(const std::string& message, const Failure& failure) : ProviderError(message, failure) {}

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
  /// A timeout classified by the caller, kept whole. Requires failure.kind == FailureKind::timeout.
  ProviderTimeout(const std::string& message, const Failure& failure) : ProviderError(message, failure) {}
};

/// The connection failed: refused or unreachable before sending (Sent::not_sent, the default), or reset after
/// the request went out (Sent::maybe_processed).
class ConnectionError : public ProviderError {
 public:
  explicit ConnectionError(const std::string& message, Sent sent = Sent::not_sent)
      : ProviderError(message, Failure::connection_failed(sent)) {}
  /// A failed connection classified by the caller, kept whole. Requires failure.kind == FailureKind::connection.
  ConnectionError(const std::string& message, const Failure& failure) : ProviderError(message, failure) {}
};

/// The first attempt of a call was not made: a guard refused it, or the call's deadline had passed.
/// Thrown by call_with_retry when the call reports failures by throwing; a later attempt refused ends
/// the call like any give-up, with the last failure.
class AttemptRefused : public ProviderError {
 public:
  /// `refusal`: why, and the failure to report.
  explicit AttemptRefused(const Refusal& refusal)
      : ProviderError(std::string("attempt refused (") + to_string(refusal.reason) + "): " + describe(refusal.failure),
                      refusal.failure),
        reason_(refusal.reason) {}

  /// Returns why the attempt was refused.
  [[nodiscard]] StopReason reason() const noexcept { return reason_; }

 private:
  StopReason reason_;
};

namespace detail {

/// No payload: throw_provider_error throws the plain exception class.
struct NoPayload {};

/// An exception of class `Exception` that also is a `Payload` (such as the curl adapter's response).
template <class Exception, class Payload>
class ErrorWith final : public Exception, public Payload {
 public:
  ErrorWith(const std::string& message, const Failure& failure, Payload payload)
      : Exception(message, failure), Payload(std::move(payload)) {}
};

#if LLMRETRY_HAS_EXCEPTIONS
template <class Exception, class Payload>
[[noreturn]] void throw_as(const std::string& message, const Failure& failure, Payload&& payload) {
  using Plain = std::decay_t<Payload>;
  if constexpr (std::is_same_v<Plain, NoPayload>) throw Exception(message, failure);
  else throw ErrorWith<Exception, Plain>(message, failure, std::forward<Payload>(payload));
}
#endif

}  // namespace detail

/// Throws the exception class that `failure` calls for, with `message` and the whole `failure`:
/// RateLimited for rate_limited, ProviderTimeout for timeout, ConnectionError for connection,
/// ProviderError for any other kind. With a `payload` (a copyable class that is not an exception, such
/// as curl::WithResponse), the exception thrown derives from the payload's class too and carries it:
/// catch it as the llmretry class and read the payload with dynamic_cast (or catch the payload's class).
/// Every adapter throws through this one mapping. Aborts when exceptions are off.
template <class Payload = detail::NoPayload>
[[noreturn]] void throw_provider_error(const std::string& message, const Failure& failure, Payload payload = {}) {
#if !LLMRETRY_HAS_EXCEPTIONS
  (void)message;
  (void)failure;
  (void)payload;
  std::abort();
#else
  switch (failure.kind) {
    case FailureKind::rate_limited: detail::throw_as<RateLimited>(message, failure, std::move(payload));
    case FailureKind::timeout: detail::throw_as<ProviderTimeout>(message, failure, std::move(payload));
    case FailureKind::connection: detail::throw_as<ConnectionError>(message, failure, std::move(payload));
    default: detail::throw_as<ProviderError>(message, failure, std::move(payload));
  }
#endif
}

/// Returns the failure a ProviderError (or a class derived from it) carries; nullopt for any other
/// exception, which is not the provider's doing and is never retried. (The overloads for a failed
/// result's error are in result.hpp.)
inline std::optional<Failure> failure_of(const std::exception& error) noexcept {
  if (const auto* provider_error = dynamic_cast<const ProviderError*>(&error)) return provider_error->failure();
  return std::nullopt;
}

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_ERRORS_HPP
