#ifndef LLMRETRY_DECISION_HPP
#define LLMRETRY_DECISION_HPP

#include <algorithm>
#include <chrono>
#include <optional>

#include "backoff.hpp"
#include "detail/config.hpp"
#include "detail/saturate.hpp"
#include "failure.hpp"
#include "policy.hpp"
#include "version.hpp"
#include "vocabulary.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// What to do after a failed attempt: retry after `wait`, or stop for `reason`.
struct Decision {
  bool retry = false;
  std::chrono::milliseconds wait{0};              ///< meaningful when retry
  StopReason reason = StopReason::not_retryable;  ///< meaningful when !retry
  WaitReason why = WaitReason::backoff;           ///< meaningful when retry: backoff, or provider when its wait won

  /// Returns a decision to retry after `wait`, for `why` (backoff or provider).
  [[nodiscard]] static constexpr Decision retry_in(std::chrono::milliseconds wait,
                                                   WaitReason why = WaitReason::backoff) noexcept {
    return {true, wait, StopReason::not_retryable, why};
  }
  /// Returns a decision to stop for `reason`.
  [[nodiscard]] static constexpr Decision stop(StopReason reason) noexcept {
    return {false, std::chrono::milliseconds{0}, reason, WaitReason::backoff};
  }
};

/// The retry brain of one logical call: every driver (call_with_retry, the simulator, your own loop)
/// feeds it each failure and carries out the Decision. It never sleeps and reads no clock.
class RetryState {
 public:
  /// Starts a logical call under `policy`. `safe_to_repeat`: whether a request that may already have been
  /// processed can be sent again (a read, or a write with an idempotency key).
  /// Throws std::invalid_argument naming the field when the policy makes no sense.
  explicit RetryState(const RetryPolicy& policy, bool safe_to_repeat = true)
      : policy_((policy.validate(), policy)),
        safe_to_repeat_(safe_to_repeat),
        previous_wait_(std::min(policy.base, policy.cap)) {}

  /// Records failed attempt number attempts() + 1 and returns what to do next. `time_left`: how long
  /// until the call's deadline, when it has one.
  /// The checks, in order: a broken stream (never replayed, whatever the provider says); x-should-retry:
  /// false; not transient (unless x-should-retry: true); may have been processed and not safe to repeat;
  /// attempts used up; the deadline passed; the provider's wait above max_provider_wait; then the wait,
  /// max(jittered backoff, provider's wait plus up to provider_wait_jitter), adding up to more than
  /// max_total_wait or ending after the deadline.
  /// Draws from `rng` only when every check before the wait passed and even the shortest wait it could
  /// draw fits the budget and the deadline: so it never draws when it is bound to stop, and stops after a
  /// draw only when the wait drawn is too long.
  template <class Rng>
  [[nodiscard]] Decision next(const Failure& failure, Rng& rng,
                              std::optional<std::chrono::milliseconds> time_left = std::nullopt) {
    using std::chrono::milliseconds;
    ++attempts_;
    if (failure.kind == FailureKind::stream_interrupted) return Decision::stop(StopReason::not_retryable);
    if (failure.should_retry == false) return Decision::stop(StopReason::provider_declined);
    const bool provider_says_retry = failure.should_retry == true;
    if (!provider_says_retry && !is_transient(failure.kind)) return Decision::stop(StopReason::not_retryable);
    if (!provider_says_retry && failure.sent == Sent::maybe_processed && !safe_to_repeat_)
      return Decision::stop(StopReason::not_safe_to_repeat);
    if (attempts_ >= policy_.max_attempts) return Decision::stop(StopReason::attempts_exhausted);
    if (time_left && *time_left <= milliseconds::zero()) return Decision::stop(StopReason::deadline);
    if (failure.provider_wait && *failure.provider_wait > policy_.provider_wait_limit())
      return Decision::stop(StopReason::provider_wait_too_long);

    const JitterRange backoff_range = jitter_range(backoff(attempts_, policy_), previous_wait_, policy_);
    const JitterRange spread_range = provider_wait_range(failure);
    if (const auto stop = exceeds(std::max(backoff_range.low, spread_range.low), time_left))
      return Decision::stop(*stop);
    const auto drawn = draw(backoff_range, rng);
    const auto provider = spread_range.low == spread_range.high ? spread_range.low : draw(spread_range, rng);
    const auto wait = std::max(drawn, provider);
    if (const auto stop = exceeds(wait, time_left)) return Decision::stop(*stop);
    previous_wait_ = drawn;
    waited_ = detail::saturating_add(waited_, wait);
    return Decision::retry_in(wait, provider > drawn ? WaitReason::provider : WaitReason::backoff);
  }

  /// Records a wait that a guard asked for before an attempt, so that it counts toward max_total_wait.
  /// Returns the reason to stop instead when the wait would take the total past max_total_wait
  /// (wait_budget) or end after the deadline (`time_left`, when the call has one: deadline).
  [[nodiscard]] std::optional<StopReason> add_guard_wait(std::chrono::milliseconds wait,
                                                         std::optional<std::chrono::milliseconds> time_left) noexcept {
    if (const auto stop = exceeds(wait, time_left)) return stop;
    waited_ = detail::saturating_add(waited_, wait);
    return std::nullopt;
  }

  /// Returns how many attempts have failed so far.
  [[nodiscard]] int attempts() const noexcept { return attempts_; }
  /// Returns the total of the waits decided so far.
  [[nodiscard]] std::chrono::milliseconds waited() const noexcept { return waited_; }
  /// Returns the policy in force.
  [[nodiscard]] const RetryPolicy& policy() const noexcept { return policy_; }

 private:
  /// Returns the range of the provider's wait (a negative one counts as 0) plus its spread; [0, 0] when the
  /// provider asked for none.
  [[nodiscard]] JitterRange provider_wait_range(const Failure& failure) const noexcept {
    if (!failure.provider_wait) return {std::chrono::milliseconds::zero(), std::chrono::milliseconds::zero()};
    const auto wait = std::max(*failure.provider_wait, std::chrono::milliseconds::zero());
    return {wait, detail::saturating_add(wait, policy_.provider_wait_jitter)};
  }

  /// Returns why a further `wait` cannot be taken: wait_budget or deadline; nullopt when it can.
  [[nodiscard]] std::optional<StopReason> exceeds(std::chrono::milliseconds wait,
                                                  std::optional<std::chrono::milliseconds> time_left) const noexcept {
    if (detail::saturating_add(waited_, wait) > policy_.max_total_wait) return StopReason::wait_budget;
    if (time_left && wait > *time_left) return StopReason::deadline;
    return std::nullopt;
  }

  RetryPolicy policy_;
  bool safe_to_repeat_;
  int attempts_ = 0;
  std::chrono::milliseconds waited_{0};
  std::chrono::milliseconds previous_wait_;
};

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_DECISION_HPP
