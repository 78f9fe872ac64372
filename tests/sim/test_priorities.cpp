// Interactive calls and a batch on one quota in virtual time: under priorities the interactive calls wait
// no more during the batch than before it and draw no 429, and the batch uses what they leave.
#include <llmretry/sim/priorities.hpp>

#include <sstream>
#include <stdexcept>

#include "llmretry_catch.hpp"

using namespace llmretry;
using namespace std::chrono_literals;

namespace {

/// The comparison's scenario with a batch of 3,800 calls from the second minute (the full one runs in
/// llmretry-sim --scenario priorities).
sim::PriorityScenario smaller(bool priorities) {
  sim::PriorityScenario s = sim::interactive_and_batch(priorities);
  s.batch_calls = 3'800;
  s.batch_start = 2min;
  return s;
}

}  // namespace

TEST_CASE("Under priorities, interactive calls keep their waits during a batch, which uses what they leave",
          "[sim][priority]") {
  const sim::PriorityTotals first_come = sim::simulate_priorities(smaller(false));
  const sim::PriorityTotals priorities = sim::simulate_priorities(smaller(true));
  std::ostringstream table;
  sim::write_priority_table(table, {{"first come", first_come}, {"priorities", priorities}});
  INFO(table.str());
  CHECK(priorities.batch_served == 3'800);
  CHECK(first_come.batch_served == 3'800);
  CHECK(priorities.before.calls > 600);
  CHECK(priorities.during.calls > 1'000);
  // The targets: P95 during within 1.2x of before, no interactive 429, at least 90 % of the leftover.
  CHECK(priorities.during.p95 <= priorities.before.p95 * 12 / 10);
  CHECK(priorities.during.refused == 0);
  CHECK(priorities.during.gave_up == 0);
  CHECK(priorities.leftover_share() >= 0.9);
  // First come, first served: the batch's workers queue ahead of every interactive call.
  CHECK(first_come.during.p95 > 10 * (priorities.during.p95 + 100ms));
}

TEST_CASE("The priorities scenario repeats exactly and refuses what makes no sense", "[sim][priority]") {
  const auto a = sim::simulate_priorities(smaller(true));
  const auto b = sim::simulate_priorities(smaller(true));
  CHECK(a.during.p95 == b.during.p95);
  CHECK(a.batch_end == b.batch_end);
  sim::PriorityScenario bad = smaller(true);
  bad.batch_workers = 0;
  CHECK_THROWS_AS(sim::simulate_priorities(bad), std::invalid_argument);
  bad = smaller(true);
  bad.interactive_mean_gap = 0ms;
  CHECK_THROWS_AS(sim::simulate_priorities(bad), std::invalid_argument);
}

TEST_CASE("A tenant sending ten times another's rate does not lengthen the other's waits", "[sim][tenant]") {
  const sim::TenantTotals alone = sim::simulate_tenants(sim::two_tenants(false, true));
  const sim::TenantTotals first_come = sim::simulate_tenants(sim::two_tenants(true, false));
  const sim::TenantTotals shared = sim::simulate_tenants(sim::two_tenants(true, true));
  std::ostringstream table;
  sim::write_tenant_table(table, {{"b alone", alone}, {"first come", first_come}, {"tenants", shared}});
  INFO(table.str());
  CHECK(shared.light.calls > 600);
  CHECK(shared.light.p95 <= alone.light.p95 * 15 / 10);  // the target: within 1.5x of alone
  CHECK(shared.light.refused == 0);
  CHECK(first_come.light.p95 > 10 * (alone.light.p95 + 100ms));
  // The heavy tenant still gets what b leaves: the limits' 18.75 a second less b's 2.5, over five minutes.
  CHECK(shared.heavy_served > 4'000);
}
