#ifndef LLMRETRY_STORE_CLOCK_HPP
#define LLMRETRY_STORE_CLOCK_HPP

#include <chrono>
#include <functional>

namespace llmretry::store {

/// The wall clock of the in-memory stores: leases, expiry and timestamps are read from it. Empty:
/// std::chrono::system_clock::now. Tests pass a testing::ManualSystemClock by std::ref.
using StoreClock = std::function<std::chrono::system_clock::time_point()>;

namespace detail {

/// Returns `clock()`, or the system clock's time when `clock` is empty.
[[nodiscard]] inline std::chrono::system_clock::time_point now(const StoreClock& clock) {
  return clock ? clock() : std::chrono::system_clock::now();
}

}  // namespace detail

}  // namespace llmretry::store

#endif  // LLMRETRY_STORE_CLOCK_HPP
