#ifndef LLMRETRY_DETAIL_SLIDING_WINDOW_HPP
#define LLMRETRY_DETAIL_SLIDING_WINDOW_HPP

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace detail {

/// Two counts over a sliding window of time, kept in ten slices: sum(now) adds up what was counted in
/// the slices that overlap the last `window`. Not thread-safe: its owner holds a lock.
class SlidingCounts {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  /// Two counts, named by the owner.
  struct Counts {
    std::int64_t first = 0;
    std::int64_t second = 0;
  };

  /// Requires a positive `window`.
  explicit SlidingCounts(std::chrono::nanoseconds window) noexcept
      : slice_(std::max<std::int64_t>(1, window.count() / slice_count)) {}

  /// Adds `first` and `second` (negative to take back) to the slice of `at`; nothing when that slice
  /// has already been reused for a later time.
  void add(time_point at, std::int64_t first, std::int64_t second) noexcept {
    const std::int64_t e = epoch(at);
    Slot& slot = slots_[static_cast<std::size_t>(((e % slice_count) + slice_count) % slice_count)];
    if (slot.epoch > e) return;
    if (slot.epoch < e) slot = Slot{e, {}};
    slot.counts.first += first;
    slot.counts.second += second;
  }

  /// Returns the totals of the slices within the window ending at `now`.
  [[nodiscard]] Counts sum(time_point now) const noexcept {
    const std::int64_t e = epoch(now);
    Counts total;
    for (const Slot& slot : slots_) {
      if (slot.epoch > e - slice_count && slot.epoch <= e) {
        total.first += slot.counts.first;
        total.second += slot.counts.second;
      }
    }
    return total;
  }

  /// Forgets everything counted.
  void clear() noexcept { slots_.fill(Slot{}); }

 private:
  static constexpr std::int64_t slice_count = 10;
  static constexpr std::int64_t never = INT64_MIN;
  struct Slot {
    std::int64_t epoch = never;
    Counts counts;
  };

  [[nodiscard]] std::int64_t epoch(time_point t) const noexcept {
    const std::int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
    return ns >= 0 ? ns / slice_ : -((-ns + slice_ - 1) / slice_);
  }

  std::int64_t slice_;  ///< nanoseconds per slice
  std::array<Slot, slice_count> slots_{};
};

}  // namespace detail
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_DETAIL_SLIDING_WINDOW_HPP
