#include <llmretry/sim/store.hpp>

#include "llmretry_catch.hpp"

using namespace llmretry;
using namespace llmretry::sim;
using namespace std::chrono_literals;

namespace {
using time_point = std::chrono::steady_clock::time_point;
time_point at(Time t) { return time_point{} + t; }
Limits two_a_second() {
  Limits limits;
  limits[Dimension::requests_per_minute] = Limit::per_minute(120, 2);
  return limits;
}
}  // namespace

TEST_CASE("A modelled store reserves on its limiter, a round trip away", "[store]") {
  Time now{1000};
  ModelledStore store(two_a_second(), now, 5ms);
  const Cost one{1, 0, 0};

  Reservation first = store.reserve(one, at(now), std::nullopt);
  CHECK(first.granted());
  CHECK(first.shared());
  CHECK(first.wait_after(at(now)) == 5ms);  // no wait on the store: the round trip alone
  Reservation second = store.reserve(one, at(now), std::nullopt);
  Reservation third = store.reserve(one, at(now), std::nullopt);
  CHECK(third.wait_after(at(now)) == 500ms + 5ms);  // the burst of 2 is spent: half a second, then the trip back
  CHECK(store.reserve(one, at(now), 100ms).status() == ReservationStatus::too_long);
  CHECK(store.exchanges() == 4);

  SECTION("a finish without news that keeps the estimate is not an exchange") {
    store.finish(first, AttemptEnd{one, nullptr, std::nullopt, false}, at(now));
    CHECK_FALSE(first.open());
    CHECK(store.exchanges() == 4);
  }
  SECTION("a cancel is an exchange and gives the capacity back") {
    store.finish(third, AttemptEnd{}, at(now));
    store.finish(second, AttemptEnd{}, at(now));
    CHECK_FALSE(second.open());
    CHECK(second.shared());
    CHECK(store.exchanges() == 6);
    CHECK(store.reserve(one, at(now), std::nullopt).wait_after(at(now)) == 5ms);
  }
  SECTION("a 429's wait pauses every later reservation") {
    store.finish(first, AttemptEnd{one, nullptr, 2s, false}, at(now));
    CHECK(store.reserve(one, at(now), std::nullopt).wait_after(at(now)) >= 2s + 5ms);
  }
  SECTION("exchanges are counted per second of virtual time") {
    now = 2500ms;
    (void)store.reserve(one, at(now), std::nullopt);
    CHECK(store.exchanges_per_second() == std::vector<std::int64_t>{0, 4, 1});
  }
}
