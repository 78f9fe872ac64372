#ifndef LLMRETRY_TESTING_MANUAL_CLOCK_HPP
#define LLMRETRY_TESTING_MANUAL_CLOCK_HPP

#include <atomic>
#include <chrono>
#include <limits>

#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace testing {

/// A clock that moves only when told to, for exact tests of deadlines and HTTP dates.
/// Its time points are those of `Clock`, so it stands in wherever a Clock::now is expected:
/// `options.clock = std::ref(manual)`. Safe to read and advance from several threads.
template <class Clock>
class BasicManualClock {
 public:
  using time_point = typename Clock::time_point;
  using duration = typename Clock::duration;

  /// A clock showing `start` (the clock's epoch by default).
  explicit BasicManualClock(time_point start = time_point{}) noexcept : ticks_(start.time_since_epoch().count()) {}

  /// Returns the time now shown.
  [[nodiscard]] time_point now() const noexcept { return time_point{duration{ticks_.load()}}; }
  /// Returns now(): lets the clock be passed where a callable clock is expected.
  [[nodiscard]] time_point operator()() const noexcept { return now(); }
  /// Moves the clock forward by `step`, up to the last time it can show (a negative step moves nothing).
  template <class Rep, class Period>
  void advance(std::chrono::duration<Rep, Period> step) noexcept {
    if (!(step > std::chrono::duration<Rep, Period>::zero())) return;
    using Ticks = typename duration::rep;
    constexpr Ticks most = std::numeric_limits<Ticks>::max();
    // Compared as a floating-point count first: a step beyond what `duration` holds would overflow the cast.
    const Ticks ticks =
        std::chrono::duration<double, typename duration::period>(step).count() >= static_cast<double>(most)
            ? most
            : std::chrono::duration_cast<duration>(step).count();
    if (ticks <= 0) return;  // less than one tick
    Ticks shown = ticks_.load();
    while (!ticks_.compare_exchange_weak(shown, shown > most - ticks ? most : shown + ticks)) {}
  }
  /// Shows `when` from now on.
  void set(time_point when) noexcept { ticks_ = when.time_since_epoch().count(); }

 private:
  std::atomic<typename duration::rep> ticks_;
};

/// A manual steady clock, for CallOptions::deadline.
using ManualClock = BasicManualClock<std::chrono::steady_clock>;
/// A manual wall clock, for requested_wait and parse_http_date.
using ManualSystemClock = BasicManualClock<std::chrono::system_clock>;

}  // namespace testing
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_TESTING_MANUAL_CLOCK_HPP
