#ifndef LLMRETRY_STORE_CLOCK_HPP
#define LLMRETRY_STORE_CLOCK_HPP

#include "../clock.hpp"

namespace llmretry::store {

/// The wall clock of the in-memory stores: leases, expiry and timestamps are read from it. Empty:
/// std::chrono::system_clock. Tests pass a testing::ManualSystemClock by std::ref.
using StoreClock = WallClock;

}  // namespace llmretry::store

#endif  // LLMRETRY_STORE_CLOCK_HPP
