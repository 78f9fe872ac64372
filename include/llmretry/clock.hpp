#ifndef LLMRETRY_CLOCK_HPP
#define LLMRETRY_CLOCK_HPP

#include <chrono>
#include <functional>

#include "version.hpp"

/// The clocks every component reads time from. A clock is a callable returning a time point; an empty one
/// is the real clock. Each component that reads time takes one in its options (CallOptions, Deployment,
/// CircuitBreaker, RetryBudget, the stores, the Redis pacer), so that a test or a simulator in virtual time
/// passes testing::ManualClock (by std::ref) and nothing reads the real time behind its back.

LLMRETRY_BEGIN_NAMESPACE

/// A monotonic clock: deadlines, pacing, breakers, budgets. Empty: std::chrono::steady_clock.
using Clock = std::function<std::chrono::steady_clock::time_point()>;
/// A wall clock: HTTP dates, reset times given as dates, leases and timestamps shared with other hosts.
/// Empty: std::chrono::system_clock.
using WallClock = std::function<std::chrono::system_clock::time_point()>;

/// Returns the real monotonic time: what an empty Clock reads.
[[nodiscard]] inline std::chrono::steady_clock::time_point real_now() noexcept {
  return std::chrono::steady_clock::now();
}
/// Returns the real wall time: what an empty WallClock reads.
[[nodiscard]] inline std::chrono::system_clock::time_point real_wall_now() noexcept {
  return std::chrono::system_clock::now();
}

/// Returns the time on `clock`, or the real monotonic time when it is empty.
[[nodiscard]] inline std::chrono::steady_clock::time_point now_on(const Clock& clock) {
  return clock ? clock() : real_now();
}
/// Returns the time on `clock`, or the real wall time when it is empty.
[[nodiscard]] inline std::chrono::system_clock::time_point now_on(const WallClock& clock) {
  return clock ? clock() : real_wall_now();
}

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_CLOCK_HPP
