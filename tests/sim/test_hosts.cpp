#include <llmretry/sim/hosts.hpp>

#include "llmretry_catch.hpp"

using namespace llmretry;
using namespace llmretry::sim;
using namespace std::chrono_literals;

namespace {
/// 4 hosts x 10 workers, 2,000 tickets; answers in 0.5 s, so that the quota, not the workers, sets the pace.
HostsScenario small(HostPacing pacing) {
  HostsScenario s = scenarios::hosts(4, 10);
  s.paced.workload.calls = 2000;
  s.paced.provider.latency = 500ms;
  s.pacing = pacing;
  return s;
}
double share_refused(const HostsTotals& t) {
  return static_cast<double>(t.all.refused) / static_cast<double>(t.all.requests);
}
}  // namespace

TEST_CASE("Hosts pacing through one store stay within the quota, near the bound", "[hosts]") {
  const HostsTotals shared = simulate_hosts(small(HostPacing::shared));
  CHECK(shared.all.served == 2000);
  CHECK(shared.all.gave_up == 0);
  CHECK(share_refused(shared) <= 0.02);
  CHECK(shared.all.makespan >= shared.all.bound);  // the bound is a bound
  CHECK(shared.all.makespan.count() <= shared.all.bound.count() * 115 / 100);
  CHECK(shared.exchanges == 2 * shared.all.requests);  // a reserve and a finish per attempt
  CHECK(static_cast<double>(shared.peak_exchanges_per_second) >= shared.mean_exchanges_per_second());
  REQUIRE(shared.by_host.size() == 4);
  for (const PacedTotals& host : shared.by_host) CHECK(host.served == 500);
}

TEST_CASE("Hosts pacing alone with the whole limits each draw far more 429s", "[hosts]") {
  const HostsTotals shared = simulate_hosts(small(HostPacing::shared));
  const HostsTotals alone = simulate_hosts(small(HostPacing::alone));
  CHECK(share_refused(alone) > 0.2);
  CHECK(alone.all.refused > 10 * (shared.all.refused + 10));
  CHECK(alone.exchanges == 0);
  const HostsTotals split = simulate_hosts(small(HostPacing::alone_split));
  CHECK(split.all.served == 2000);
}

TEST_CASE("The store's round trip delays every attempt, and a run repeats", "[hosts]") {
  HostsScenario far = small(HostPacing::shared);
  far.paced.workload.calls = 40;  // one ticket per worker: every reservation is made at 0
  const HostsTotals near = simulate_hosts(far);
  far.store_round_trip = 100ms;
  const HostsTotals slow = simulate_hosts(far);
  CHECK(slow.all.makespan == near.all.makespan + 99ms);
  CHECK(simulate_hosts(far).all.makespan == slow.all.makespan);
}

TEST_CASE("Limits split among hosts keep room for one call", "[hosts]") {
  Limits limits;
  limits[Dimension::requests_per_minute] = Limit::per_minute(1800, 30);
  limits[Dimension::tokens_per_minute] = Limit::per_minute(900'000, 15'000);
  const Limits share = split_limits(limits, 20, Cost{1, 500, 300});
  CHECK(share[Dimension::requests_per_minute]->limit == 90);
  CHECK(share[Dimension::requests_per_minute]->burst == 2);  // 30 / 20, rounded up
  CHECK(share[Dimension::tokens_per_minute]->burst == 800);  // 750 would never admit a call of 800
  CHECK_THROWS_WITH(simulate_hosts([] {
                      HostsScenario s;
                      s.hosts = 0;
                      return s;
                    }()),
                    "HostsScenario::hosts must be in [1, 100000]");
}
