#include <llmretry/sim/fleet.hpp>

#include <string>

#include "llmretry_catch.hpp"

using namespace llmretry;
using namespace llmretry::sim;
using namespace std::chrono_literals;

namespace {

const scenarios::FleetComparison& comparison(std::size_t index) {
  static const auto all = scenarios::fleet();
  return all.at(index);
}

FleetTotals run(std::size_t index, Mechanisms use) {
  FleetScenario scenario = comparison(index).scenario;
  scenario.use = use;
  return simulate_fleet(scenario);
}

constexpr Mechanisms none{};
constexpr Mechanisms budget{true, false, false};
constexpr Mechanisms breaker{false, true, false};
constexpr Mechanisms fallback{false, false, true};
constexpr Mechanisms all{true, true, true};

}  // namespace

TEST_CASE("Outage: the retry budget keeps the load on the failing primary near the calls", "[fleet]") {
  const FleetTotals bare = run(0, none);
  CHECK(bare.primary_amplification() > 3.9);  // the default policy's 4 attempts, for nearly every call
  CHECK(bare.gave_up.at("attempts_exhausted") > 2800);

  const FleetTotals budgeted = run(0, budget);
  CHECK(budgeted.primary_amplification() < 1.11);
  CHECK(budgeted.gave_up.at("retry_budget") > 2900);

  const FleetTotals broken = run(0, breaker);
  CHECK(broken.attempts[0] < 30);  // the breaker opened after a few failures, then only probes
  CHECK(broken.gave_up.at("circuit_open") == 3000);
  CHECK(broken.opened >= 2);

  const FleetTotals everything = run(0, all);
  CHECK(everything.served() == 3000);
  CHECK(everything.served_by[1] == 3000);
  CHECK(everything.attempts[0] < 30);
}

TEST_CASE("Brownout: the breaker opens and the fallback serves", "[fleet]") {
  const FleetTotals bare = run(1, none);
  CHECK(bare.served() < 3000);
  CHECK(bare.primary_amplification() > 1.8);

  const FleetTotals moved = run(1, fallback);
  CHECK(moved.served() == 3000);
  CHECK(moved.attempts[0] == bare.attempts[0]);  // without a breaker the primary still takes every retry

  const FleetTotals everything = run(1, all);
  CHECK(everything.served() == 3000);
  CHECK(everything.opened >= 1);
  CHECK(everything.served_by[1] > 2500);
  CHECK(everything.attempts[0] < 200);
}

TEST_CASE("Rate-limited primary: calls move to the fallback after their retries", "[fleet]") {
  const FleetTotals bare = run(2, none);
  CHECK(bare.gave_up.at("attempts_exhausted") > 1500);
  const FleetTotals moved = run(2, all);
  CHECK(moved.served() == 3000);
  CHECK(moved.served_by[0] > 1000);  // the primary serves what its limit allows
  CHECK(moved.primary_amplification() < 1.11);
}

TEST_CASE("A fleet run repeats exactly, and a bad scenario is refused naming the field", "[fleet]") {
  const FleetTotals a = run(1, all);
  const FleetTotals b = run(1, all);
  CHECK(a.attempts == b.attempts);
  CHECK(a.served_by == b.served_by);
  CHECK(a.gave_up == b.gave_up);

  FleetScenario bad = comparison(0).scenario;
  bad.primary.trouble_rate = 2;
  CHECK_THROWS_WITH(simulate_fleet(bad), "FleetProvider::trouble_rate must be in [0, 1]");
  bad = comparison(0).scenario;
  bad.calls = 0;
  CHECK_THROWS_WITH(simulate_fleet(bad), "FleetScenario::calls must be in [1, 10000000]");
  CHECK(to_string(all) == "budget + breaker + fallback");
  CHECK(to_string(none) == "retries only");
}
