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

/// The options of every call that passes none, built once: such a call constructs no CallOptions.
inline const CallOptions& no_call_options() {
  static const CallOptions options;
  return options;
}

/// What call_with_retry keeps between attempts: the retry state, and the caller's sleep, RNG, hook and options.
template <class Sleep, class Rng, class OnRetry>
struct Attempts {
  RetryState state;
  Sleep& sleep;
  Rng& rng;
  OnRetry& on_retry;
  const CallOptions& options;

  /// Records a failed attempt and returns what to do next; runs options.on_give_up first when that is to stop.
  Decision decide(const Failure& failure) {
    const Decision decision = state.next(failure, rng, time_left(options));
    if (!decision.retry && options.on_give_up)
      options.on_give_up(GiveUp{decision.reason, failure, state.attempts(), state.waited()});
    return decision;
  }

  /// Carries out a decision to retry after `failure`: runs on_retry, then sleeps.
  void wait(const Failure& failure, const Decision& decision) {
    on_retry(state.attempts(), failure, decision.wait);
    sleep(decision.wait);
  }

  /// The loop for a call returning a move-assignable result-like value, after a first attempt that failed:
  /// each new attempt is assigned to `result`.
  template <class R, class Call>
  void retry_failed(R& result, Call& call) {
    do {
      const Failure failure = failure_of_result(result);
      const Decision decision = decide(failure);
      if (!decision.retry) return;
      wait(failure, decision);
      result = std::invoke(call);
    } while (!result.has_value());
  }

  /// The loop for a call returning a result-like R that cannot be assigned.
  template <class R, class Call>
  R construct_results(Call& call) {
    for (;;) {
      R result = std::invoke(call);
      if (result.has_value()) return result;
      const Failure failure = failure_of_result(result);
      const Decision decision = decide(failure);
      if (!decision.retry) return result;
      wait(failure, decision);
    }
  }

#if LLMRETRY_HAS_EXCEPTIONS
  /// The loop for a call that reports failures by throwing.
  template <class R, class Call>
  R catch_exceptions(Call& call) {
    for (;;) {
      Failure failure;
      Decision decision;
      try {
        return std::invoke(call);
      } catch (const std::exception& error) {
        // An exception nobody recognises is an unknown failure, which is never retried.
        failure = (options.classify ? options.classify(error) : failure_of(error)).value_or(Failure{});
        decision = decide(failure);
        if (!decision.retry) throw;
      }
      wait(failure, decision);
    }
  }
#endif
};

/// call_with_retry for a call returning a move-assignable result-like R. The first attempt comes before
/// anything else is set up, and its result is the one returned: a success costs the policy check alone.
template <class R, class Call, class Sleep, class Rng, class OnRetry>
R first_then_retry(Call& call, const RetryPolicy& policy, Sleep& sleep, Rng& rng, OnRetry& on_retry,
                   const CallOptions& options) {
  policy.validate();
  R result = std::invoke(call);
  if (!result.has_value())
    Attempts<Sleep, Rng, OnRetry>{RetryState{policy, options.safe_to_repeat}, sleep, rng, on_retry, options}
        .retry_failed(result, call);
  return result;
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
                                            const CallOptions& options = detail::no_call_options()) {
  using R = std::invoke_result_t<Call&>;
  if constexpr (is_result_like_v<R> && std::is_move_assignable_v<R>) {
    return detail::first_then_retry<R>(call, policy, sleep, rng, on_retry, options);
  } else {
    detail::Attempts<Sleep, Rng, OnRetry> attempts{RetryState{policy, options.safe_to_repeat}, sleep, rng, on_retry,
                                                   options};
    if constexpr (is_result_like_v<R>) {
      return attempts.template construct_results<R>(call);
    } else {
#if LLMRETRY_HAS_EXCEPTIONS
      return attempts.template catch_exceptions<R>(call);
#else
      static_assert(is_result_like_v<R>, "without exceptions, the call must return a result-like value");
#endif
    }
  }
}

}  // namespace llmretry

#endif  // LLMRETRY_RETRY_HPP
