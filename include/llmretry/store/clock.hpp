#ifndef LLMRETRY_STORE_CLOCK_HPP
#define LLMRETRY_STORE_CLOCK_HPP

#include "../clock.hpp"
#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace store {

/// The wall clock of the in-memory stores: leases, expiry and timestamps are read from it. Empty:
/// std::chrono::system_clock. Tests pass a testing::ManualSystemClock by std::ref.
using StoreClock = WallClock;

}  // namespace store
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_STORE_CLOCK_HPP
