#ifndef LLMRETRY_ADMISSION_SHARED_PACING_HPP
#define LLMRETRY_ADMISSION_SHARED_PACING_HPP

#include <algorithm>
#include <chrono>
#include <optional>

#include "../http/rate_limits.hpp"
#include "../version.hpp"
#include "limits.hpp"
#include "rate_limiter.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// What the end of one attempt tells the pacing, all at once.
struct AttemptEnd {
  std::optional<Cost> charge;            ///< what stays charged (the usage, or the estimate); empty: give all back
  const RateLimits* reported = nullptr;  ///< the limits and levels the answer reported; null: none
  std::optional<std::chrono::milliseconds> refused_for;  ///< a 429's wait: every call pauses and is set back by it
  bool slow_down = false;                                ///< a 429 without rate-limit headers (Learning::adaptive)

  /// Returns true when it teaches the pacing something besides the charge: headers, a 429, a slow-down.
  [[nodiscard]] bool has_news() const noexcept { return reported != nullptr || refused_for || slow_down; }
};

/// What an exchange with a shared pacing state said of it, for llmretry::pressure: the fleet's load, not
/// this process's alone.
struct SharedSnapshot {
  std::chrono::steady_clock::time_point as_of;  ///< when, on the caller's clock
  std::chrono::milliseconds queue_wait{0};      ///< how long a new call taking one unit would have waited then
  double headroom = 1.0;                        ///< the share of the burst free on the tightest dimension then
  std::chrono::microseconds refill{0};          ///< how long that dimension takes to refill a whole burst

  /// Returns the snapshot carried to `now` as if nothing was reserved since: the wait shortened and the
  /// burst refilled by the time passed (an estimate, the longer ago the rougher: others may have reserved
  /// meanwhile, and another dimension may refill slower).
  [[nodiscard]] SharedSnapshot at(std::chrono::steady_clock::time_point now) const noexcept {
    SharedSnapshot later = *this;
    if (now <= as_of) return later;
    const auto passed = now - as_of;
    later.as_of = now;
    later.queue_wait =
        std::max(std::chrono::milliseconds::zero(), queue_wait - std::chrono::ceil<std::chrono::milliseconds>(passed));
    if (refill > refill.zero())
      later.headroom = std::min(1.0, headroom + std::chrono::duration<double>(passed) / refill);
    return later;
  }
};

/// What a Deployment does when its shared pacing state cannot be reached (down, too slow, an error reply).
enum class SharedFailure {
  fail_closed,  ///< refuse the attempt (StopReason::pacing_unavailable, nothing sent): never more than the
                ///< shared limits, at the price of no calls while the state is out of reach
  fail_open,    ///< pace the attempt in this process alone, at the configured limits and those learned so far:
                ///< calls go on, and processes that each do so may together exceed the limits
};

/// Returns "fail_closed" or "fail_open".
[[nodiscard]] constexpr const char* to_string(SharedFailure failure) noexcept {
  switch (failure) {
    case SharedFailure::fail_closed: return "fail_closed";
    case SharedFailure::fail_open: return "fail_open";
  }
  return "unknown";
}

/// The pacing state of one deployment shared by every process that paces it (redis::RateLimiter keeps it
/// in Redis): the levels per dimension, the limits learned from rate-limit headers, the pause and set-back
/// after a 429 and the slow-down of adaptive learning. It has RateLimiter's semantics, on its own clock.
/// A Deployment with one (DeploymentOptions::shared) reserves there and tells it every attempt's end, so
/// that what one process learns, all learn, and a 429 seen by one pauses all: two exchanges per attempt
/// at most. Every operation may throw when the state cannot be reached; what a reservation held then stays
/// charged until it refills. An implementation given to a Deployment that threads share must be
/// thread-safe.
class SharedPacing {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  SharedPacing() = default;
  SharedPacing(const SharedPacing&) = delete;
  SharedPacing& operator=(const SharedPacing&) = delete;
  SharedPacing(SharedPacing&&) = delete;
  SharedPacing& operator=(SharedPacing&&) = delete;
  virtual ~SharedPacing() = default;

  /// Reserves `cost` at `now` (the caller's clock) as RateLimiter::reserve does, on the shared state,
  /// yielding as `precedence` says. Returns a reservation whose shared() is true.
  [[nodiscard]] virtual Reservation reserve(const Cost& cost, time_point now,
                                            std::optional<std::chrono::milliseconds> max_wait,
                                            const Precedence& precedence) = 0;

  /// Tells the end of the attempt `reservation` was made for, in one exchange: learns `end.reported`,
  /// pauses and sets back every dimension by `end.refused_for`, slows down on `end.slow_down`, then settles
  /// the reservation with `end.charge` (empty: cancels it). A reservation that is not open is only closed
  /// over; without news, nothing is exchanged.
  virtual void finish(Reservation& reservation, const AttemptEnd& end, time_point now) = 0;

  /// Returns the counters of every process's reservations on the shared state since it was made (state that
  /// expired or was lost starts again from zero): RateLimiter::stats of the whole fleet.
  [[nodiscard]] virtual RateLimiterStats stats() = 0;

  /// Returns what the last reservation made through this object said of the shared state after it, as
  /// RateLimiter::queue_wait and headroom say it (no exchange); nullopt before the first, or when the
  /// implementation cannot tell. An implementation must make it thread-safe.
  [[nodiscard]] virtual std::optional<SharedSnapshot> snapshot() const noexcept { return std::nullopt; }
};

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_ADMISSION_SHARED_PACING_HPP
