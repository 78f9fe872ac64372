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
  Failure failure;                   ///< the last failure (kind unknown for an exception that is not a ProviderError)
  int attempts;                      ///< attempts made, the last one included
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

/// What call_with_retry keeps between attempts: the caller's policy, sleep, RNG, hook and options, and the
/// retry state, made from the policy at the first failure so that a success sets up nothing.
template <class Sleep, class Rng, class OnRetry>
class RetryLoop {
 public:
  RetryLoop(const RetryPolicy& policy, Sleep& sleep, Rng& rng, OnRetry& on_retry, const CallOptions& options) noexcept
      : policy_(policy), sleep_(sleep), rng_(rng), on_retry_(on_retry), options_(options) {}

  /// The loop for a call returning a move-assignable result-like R: one result for every attempt, built
  /// where the caller receives it, so that a success copies nothing.
  template <class R, class Call>
  R assign_results(Call& call) {
    R result = std::invoke(call);
    while (!result.has_value() && decide_and_wait(failure_of_result(result))) result = std::invoke(call);
    return result;
  }

  /// The loop for a call returning a result-like R that cannot be assigned.
  template <class R, class Call>
  R construct_results(Call& call) {
    for (;;) {
      R result = std::invoke(call);
      if (result.has_value() || !decide_and_wait(failure_of_result(result))) return result;
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
        failure = (options_.classify ? options_.classify(error) : failure_of(error)).value_or(Failure{});
        decision = decide(failure);
        if (!decision.retry) throw;
      }
      wait(failure, decision);
    }
  }
#endif

 private:
  /// Records a failed attempt and returns what to do next; runs options.on_give_up first when that is to stop.
  Decision decide(const Failure& failure) {
    if (!state_) state_.emplace(policy_, options_.safe_to_repeat);
    const Decision decision = state_->next(failure, rng_, time_left(options_));
    if (!decision.retry && options_.on_give_up)
      options_.on_give_up(GiveUp{decision.reason, failure, state_->attempts(), state_->waited()});
    return decision;
  }

  /// Carries out a decision to retry after `failure`: runs on_retry, then sleeps.
  void wait(const Failure& failure, const Decision& decision) {
    on_retry_(state_->attempts(), failure, decision.wait);
    sleep_(decision.wait);
  }

  /// Decides after `failure`: returns false to stop, or waits and returns true to retry.
  bool decide_and_wait(const Failure& failure) {
    const Decision decision = decide(failure);
    if (decision.retry) wait(failure, decision);
    return decision.retry;
  }

  const RetryPolicy& policy_;
  std::optional<RetryState> state_;
  Sleep& sleep_;
  Rng& rng_;
  OnRetry& on_retry_;
  const CallOptions& options_;
};

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
  policy.validate();
  detail::RetryLoop<Sleep, Rng, OnRetry> attempts{policy, sleep, rng, on_retry, options};
  if constexpr (!is_result_like_v<R>) {
#if LLMRETRY_HAS_EXCEPTIONS
    return attempts.template catch_exceptions<R>(call);
#else
    static_assert(is_result_like_v<R>, "without exceptions, the call must return a result-like value");
#endif
  } else if constexpr (std::is_move_assignable_v<R>) {
    return attempts.template assign_results<R>(call);
  } else {
    return attempts.template construct_results<R>(call);
  }
}

}  // namespace llmretry

#endif  // LLMRETRY_RETRY_HPP
