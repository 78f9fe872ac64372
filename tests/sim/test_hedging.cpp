#include <llmretry/sim/hedging.hpp>

#include <llmretry/sim/report.hpp>

#include <sstream>
#include <stdexcept>
#include <string>

#include "llmretry_catch.hpp"

using namespace llmretry;
using namespace llmretry::sim;
using namespace std::chrono_literals;

TEST_CASE("simulate_hedging: a slow tail cut by hedges, within the hedging budget", "[sim][hedging]") {
  const HedgingScenario scenario;  // 10,000 calls, 3 % of requests 8-8.4 s, the rest 0.8-1.2 s
  const HedgingTotals without = simulate_hedging(scenario, false);
  const HedgingTotals with = simulate_hedging(scenario, true);

  CHECK(without.requests == 10000);
  CHECK(without.hedges == 0);
  CHECK(without.p99 >= 8000ms);  // 3 % of the calls are slow: the P99 is one of them

  CHECK(with.requests == with.calls + with.hedges);
  CHECK(with.hedges > 0);
  CHECK(with.hedges <= with.calls * 5 / 100);  // the budget: at most 5 % more requests
  CHECK(with.hedge_wins > 0);
  CHECK(with.hedge_wins <= with.hedges);
  CHECK(with.p99 < without.p99 / 2);  // the tail cut
  CHECK(with.p50 == without.p50);     // the usual call unchanged: the same latencies, no hedge before P95
  CHECK(with.max <= without.max);

  // Deterministic: the same scenario gives the same totals.
  const HedgingTotals again = simulate_hedging(scenario, true);
  CHECK(again.requests == with.requests);
  CHECK(again.p99 == with.p99);

  std::ostringstream table;
  write_hedging_table(table, without, with);
  CHECK(table.str().find("with hedging") != std::string::npos);
  CHECK(table.str().find("P99.9") != std::string::npos);
}

TEST_CASE("simulate_hedging: a fixed delay, a budget of 0, and a scenario that makes no sense", "[sim][hedging]") {
  HedgingScenario scenario;
  scenario.calls = 2000;
  scenario.hedging.delay = 1500ms;
  const HedgingTotals fixed = simulate_hedging(scenario, true);
  CHECK(fixed.hedges > 0);
  CHECK(fixed.p99 < 1500ms + 1200ms + 1ms);  // a slow request is hedged at 1.5 s by one that takes 1.2 s at most

  scenario.hedging.ratio = 0;
  CHECK(simulate_hedging(scenario, true).hedges == 0);

  scenario.slow_share = 2;
  CHECK_THROWS_AS(simulate_hedging(scenario, true), std::invalid_argument);
}
