#ifndef LLMRETRY_RETRY_HPP
#define LLMRETRY_RETRY_HPP

#include <chrono>
#include <exception>
#include <functional>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

#include "decision.hpp"
#include "detail/config.hpp"
#include "errors.hpp"
#include "failure.hpp"
#include "policy.hpp"
#include "random.hpp"
#include "result.hpp"

namespace llmretry {

/// What a call that gave up reports: why it stopped, the last failure, and what it had spent.
struct GiveUp {
  StopReason reason;
  Failure failure;  ///< the last failure (kind unknown for an exception that is not a ProviderError)
  int attempts;     ///< attempts made, the last one included
  std::chrono::milliseconds waited;  ///< total time slept between attempts
};

/// Per-call settings beyond the policy. Every member is optional; the defaults cost nothing.
struct CallOptions {
  /// Whether the request may be sent again after it may have been processed (read timeout, 5xx).
  /// True by default: a completion is a read. Set false for a write without an idempotency key.
  bool safe_to_repeat = true;
  /// No wait may end after this point on `clock`. Unset: no deadline, and the clock is never read.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  /// The clock for `deadline`; empty: std::chrono::steady_clock::now.
  std::function<std::chrono::steady_clock::time_point()> clock;
  /// Your own classifier for exceptions: return the Failure, or nullopt to leave the exception to
  /// propagate unretried. Empty: failure_of (ProviderError and its subclasses).
  std::function<std::optional<Failure>(const std::exception&)> classify;
  /// Runs once when the call gives up after a failure, just before the last error is rethrown or the
  /// last result returned.
  std::function<void(const GiveUp&)> on_give_up;
};

/// Sleeps the calling thread for the given duration: the default `sleep` of call_with_retry.
struct RealSleep {
  template <class Rep, class Period>
  void operator()(std::chrono::duration<Rep, Period> wait) const {
    std::this_thread::sleep_for(wait);
  }
};

/// The default `on_retry`: does nothing.
struct NoRetryHook {
  void operator()(int /*attempt*/, const Failure& /*failure*/, std::chrono::milliseconds /*wait*/) const noexcept {}
};

namespace detail {

inline std::optional<std::chrono::milliseconds> time_left(const CallOptions& options) {
  using namespace std::chrono;
  if (!options.deadline) return std::nullopt;
  const auto now = options.clock ? options.clock() : steady_clock::now();
  return *options.deadline > now ? floor<milliseconds>(*options.deadline - now) : milliseconds::zero();
}

inline void report_give_up(const CallOptions& options, const RetryState& state, StopReason reason,
                           const Failure& failure) {
  if (options.on_give_up) options.on_give_up(GiveUp{reason, failure, state.attempts(), state.waited()});
}

}  // namespace detail

/// Calls `call()` until it succeeds or the policy says stop, sleeping between attempts.
///
/// Failures come in one of two ways, chosen by the return type of `call`:
/// - the call throws: a ProviderError (or what `options.classify` recognises) is classified and retried
///   as the policy says; giving up rethrows the last exception unchanged. Any other exception propagates
///   at once.
/// - the call returns a result-like value (has_value() and error(), such as llmretry::Result,
///   std::expected<T, Failure>): a value without has_value() is a failure, read with `to_failure(error())`;
///   giving up returns the last result unchanged. Exceptions thrown by such a call are not retried.
///
/// `sleep(std::chrono::milliseconds)` carries out each wait; `rng` is any UniformRandomBitGenerator, used
/// only for jitter; `on_retry(attempt, failure, wait)` runs before each sleep; `options.on_give_up` says
/// why it stopped. Nothing is allocated, seeded or read from a clock unless an attempt fails (the clock:
/// only with a deadline).
/// Returns what the successful (or last) call returned.
/// Throws std::invalid_argument naming the field, before the first call, when the policy makes no sense.
template <class Call, class Sleep = RealSleep, class Rng = ThreadRng, class OnRetry = NoRetryHook>
std::invoke_result_t<Call&> call_with_retry(Call&& call, const RetryPolicy& policy = {}, Sleep&& sleep = Sleep{},
                                            Rng&& rng = Rng{}, OnRetry&& on_retry = OnRetry{},
                                            const CallOptions& options = {}) {
  using R = std::invoke_result_t<Call&>;
  RetryState state{policy, options.safe_to_repeat};
  for (;;) {
    Failure failure;
    Decision decision;
    if constexpr (is_result_like_v<R>) {
      R result = std::invoke(call);
      if (result.has_value()) return result;
      failure = detail::failure_of_result(result);
      decision = state.next(failure, rng, detail::time_left(options));
      if (!decision.retry) {
        detail::report_give_up(options, state, decision.reason, failure);
        return result;
      }
    } else {
#if LLMRETRY_HAS_EXCEPTIONS
      try {
        return std::invoke(call);
      } catch (const std::exception& error) {
        // An exception nobody recognises is an unknown failure, which is never retried.
        failure = (options.classify ? options.classify(error) : failure_of(error)).value_or(Failure{});
        decision = state.next(failure, rng, detail::time_left(options));
        if (!decision.retry) {
          detail::report_give_up(options, state, decision.reason, failure);
          throw;
        }
      }
#else
      static_assert(is_result_like_v<R>, "without exceptions, the call must return a result-like value");
#endif
    }
    on_retry(state.attempts(), static_cast<const Failure&>(failure), decision.wait);
    sleep(decision.wait);
  }
}

}  // namespace llmretry

#endif  // LLMRETRY_RETRY_HPP
