#ifndef LLMRETRY_DECISION_HPP
#define LLMRETRY_DECISION_HPP

#include <algorithm>
#include <chrono>
#include <optional>

#include "backoff.hpp"
#include "detail/saturate.hpp"
#include "failure.hpp"
#include "policy.hpp"

namespace llmretry {

/// Why a call stopped retrying.
enum class StopReason {
  not_retryable,         ///< the failure cannot succeed on another attempt (400, 401, quota...)
  not_safe_to_repeat,    ///< the request may have been processed and the call is not safe to repeat
  provider_declined,     ///< the provider said `x-should-retry: false`
  attempts_exhausted,    ///< max_attempts were made
  wait_budget,           ///< the next wait would take the total past max_total_wait
  provider_wait_too_long,  ///< the provider asked for a wait above max_provider_wait
  deadline,              ///< the next wait would end after the call's deadline
};

/// Returns the snake_case name of a stop reason, such as "attempts_exhausted".
constexpr const char* to_string(StopReason reason) noexcept {
  switch (reason) {
    case StopReason::not_retryable: return "not_retryable";
    case StopReason::not_safe_to_repeat: return "not_safe_to_repeat";
    case StopReason::provider_declined: return "provider_declined";
    case StopReason::attempts_exhausted: return "attempts_exhausted";
    case StopReason::wait_budget: return "wait_budget";
    case StopReason::provider_wait_too_long: return "provider_wait_too_long";
    case StopReason::deadline: return "deadline";
  }
  return "unknown";
}

/// What to do after a failed attempt: retry after `wait`, or stop for `reason`.
struct Decision {
  bool retry = false;
  std::chrono::milliseconds wait{0};              ///< meaningful when retry
  StopReason reason = StopReason::not_retryable;  ///< meaningful when !retry

  /// Returns a decision to retry after `wait`.
  static constexpr Decision retry_in(std::chrono::milliseconds wait) noexcept {
    return {true, wait, StopReason::not_retryable};
  }
  /// Returns a decision to stop for `reason`.
  static constexpr Decision stop(StopReason reason) noexcept { return {false, std::chrono::milliseconds{0}, reason}; }
};

/// The retry brain of one logical call: every driver (call_with_retry, the simulator, your own loop)
/// feeds it each failure and carries out the Decision. It never sleeps and reads no clock.
class RetryState {
 public:
  /// Starts a logical call under `policy`. `safe_to_repeat`: whether a request that may already have been
  /// processed can be sent again (a read, or a write with an idempotency key).
  /// Throws std::invalid_argument naming the field when the policy makes no sense.
  explicit RetryState(const RetryPolicy& policy, bool safe_to_repeat = true)
      : policy_(policy), safe_to_repeat_(safe_to_repeat), previous_wait_(std::min(policy.base, policy.cap)) {
    policy_.validate();
  }

  /// Records failed attempt number attempts() + 1 and returns what to do next. Draws from `rng` only
  /// when it will retry. `time_left`: how long until the call's deadline, when it has one.
  /// The checks, in order: x-should-retry: false; not transient (unless x-should-retry: true); may have
  /// been processed and not safe to repeat; attempts used up; the provider's wait above max_provider_wait;
  /// the waits adding up to more than max_total_wait; the wait ending after the deadline.
  /// The wait is max(jittered backoff, provider's wait).
  template <class Rng>
  Decision next(const Failure& failure, Rng& rng, std::optional<std::chrono::milliseconds> time_left = std::nullopt) {
    ++attempts_;
    if (failure.should_retry == false) return Decision::stop(StopReason::provider_declined);
    const bool provider_says_retry = failure.should_retry == true;
    if (!provider_says_retry && !is_transient(failure.kind)) return Decision::stop(StopReason::not_retryable);
    if (!provider_says_retry && failure.sent == Sent::maybe_processed && !safe_to_repeat_)
      return Decision::stop(StopReason::not_safe_to_repeat);
    if (attempts_ >= policy_.max_attempts) return Decision::stop(StopReason::attempts_exhausted);
    if (failure.provider_wait && *failure.provider_wait > policy_.provider_wait_limit())
      return Decision::stop(StopReason::provider_wait_too_long);
    const auto drawn = jittered(backoff(attempts_, policy_), previous_wait_, policy_, rng);
    const auto wait = std::max(drawn, failure.provider_wait.value_or(std::chrono::milliseconds::zero()));
    const auto total = detail::saturating_add(waited_, wait);
    if (total > policy_.max_total_wait) return Decision::stop(StopReason::wait_budget);
    if (time_left && wait > *time_left) return Decision::stop(StopReason::deadline);
    previous_wait_ = drawn;
    waited_ = total;
    return Decision::retry_in(wait);
  }

  /// Returns how many attempts have failed so far.
  int attempts() const noexcept { return attempts_; }
  /// Returns the total of the waits decided so far.
  std::chrono::milliseconds waited() const noexcept { return waited_; }
  /// Returns the policy in force.
  const RetryPolicy& policy() const noexcept { return policy_; }

 private:
  RetryPolicy policy_;
  bool safe_to_repeat_;
  int attempts_ = 0;
  std::chrono::milliseconds waited_{0};
  std::chrono::milliseconds previous_wait_;
};

}  // namespace llmretry

#endif  // LLMRETRY_DECISION_HPP
