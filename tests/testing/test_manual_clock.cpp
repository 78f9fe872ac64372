#include <llmretry/testing/manual_clock.hpp>

#include <functional>

#include "llmretry_catch.hpp"

using llmretry::testing::ManualClock;
using llmretry::testing::ManualSystemClock;
using namespace std::chrono_literals;

TEST_CASE("ManualClock moves only when told", "[manual_clock]") {
  ManualClock clock;
  CHECK(clock.now().time_since_epoch() == 0s);
  clock.advance(250ms);
  CHECK(clock.now().time_since_epoch() == 250ms);
  CHECK(clock() == clock.now());
  clock.set(ManualClock::time_point{} + 1h);
  CHECK(clock.now().time_since_epoch() == 1h);
}

TEST_CASE("ManualSystemClock starts where it is told and stands in for system_clock", "[manual_clock]") {
  const auto start = std::chrono::system_clock::time_point{} + std::chrono::seconds{784111777};
  ManualSystemClock clock{start};
  std::function<std::chrono::system_clock::time_point()> now = std::ref(clock);
  clock.advance(2s);
  CHECK(now() == start + 2s);
}

TEST_CASE("ManualClock stops at the last time it can show", "[manual_clock]") {
  ManualClock clock(ManualClock::time_point{} + 1h);
  clock.advance(std::chrono::milliseconds::max());
  CHECK(clock.now() == ManualClock::time_point::max());
  clock.advance(1ms);
  CHECK(clock.now() == ManualClock::time_point::max());
}

TEST_CASE("ManualClock: a negative step moves nothing", "[manual_clock]") {
  ManualClock clock(ManualClock::time_point{} + 1h);
  clock.advance(-5ms);
  clock.advance(std::chrono::milliseconds::min());
  CHECK(clock.now().time_since_epoch() == 1h);
}
