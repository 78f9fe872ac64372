#ifndef LLMRETRY_TESTING_FAKE_SLEEP_HPP
#define LLMRETRY_TESTING_FAKE_SLEEP_HPP

#include <algorithm>
#include <chrono>
#include <mutex>
#include <vector>

#include "../decision.hpp"
#include "../detail/saturate.hpp"
#include "../version.hpp"
#include "manual_clock.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace testing {

/// A `sleep` for call_with_retry that returns at once and records each wait, optionally moving a
/// ManualClock forward by it. Pass it by reference (an lvalue) so the records stay in your object.
/// Safe to use from several threads.
class FakeSleep {
 public:
  /// Marks a sleep that call_with_retry refuses to take as a temporary, whose records would be lost.
  using keeps_records = void;

  /// Records waits only.
  FakeSleep() = default;
  /// Records waits and advances `clock` by each; the clock must outlive this object.
  explicit FakeSleep(ManualClock& clock) noexcept : clock_(&clock) {}

  /// Records `wait` (rounded up to whole milliseconds, a negative one as 0) and advances the clock, if any, by it.
  template <class Rep, class Period>
  void operator()(std::chrono::duration<Rep, Period> wait) {
    (*this)(wait, WaitReason::backoff);
  }
  /// Records `wait` (rounded up to whole milliseconds, a negative one as 0) and its `reason`, and advances
  /// the clock, if any, by it: what call_with_retry calls.
  template <class Rep, class Period>
  void operator()(std::chrono::duration<Rep, Period> wait, WaitReason reason) {
    const auto ms = std::max(std::chrono::ceil<std::chrono::milliseconds>(wait), std::chrono::milliseconds::zero());
    std::lock_guard<std::mutex> lock(mutex_);
    waits_.push_back(ms);
    reasons_.push_back(reason);
    if (clock_ != nullptr) clock_->advance(wait);
  }

  /// Returns true when it advances a clock: it keeps virtual time, so that call_with_retry sleeps a wait for
  /// a concurrency slot through it (in pieces) instead of blocking the thread until the slot comes.
  [[nodiscard]] bool moves_clock() const noexcept { return clock_ != nullptr; }

  /// Returns every wait so far, in order.
  std::vector<std::chrono::milliseconds> waits() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return waits_;
  }
  /// Returns why each wait so far was taken, in order (backoff for one recorded without a reason).
  std::vector<WaitReason> reasons() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return reasons_;
  }
  /// Returns the sum of the waits so far (milliseconds::max() when it would be more).
  std::chrono::milliseconds total() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::chrono::milliseconds sum{0};
    for (auto wait : waits_) sum = ::llmretry::detail::saturating_add(sum, wait);
    return sum;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::chrono::milliseconds> waits_;
  std::vector<WaitReason> reasons_;
  ManualClock* clock_ = nullptr;
};

}  // namespace testing
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_TESTING_FAKE_SLEEP_HPP
