#include <llmretry/sim/pacing.hpp>
#include <llmretry/sim/scenarios.hpp>

#include "llmretry_catch.hpp"

using namespace llmretry;
using namespace llmretry::sim;
using namespace std::chrono_literals;

namespace {
PacedTotals run(PacedScenario scenario, AdmissionMode mode) {
  scenario.admission = mode;
  return simulate_paced(scenario);
}
double share_refused(const PacedTotals& t) { return static_cast<double>(t.refused) / static_cast<double>(t.requests); }
}  // namespace

TEST_CASE("Paced by a Deployment, every workload is served without 429s, near the capacity bound", "[pacing]") {
  for (const auto& workload : scenarios::paced_workloads()) {
    INFO(workload.title);
    const PacedTotals paced = run(workload.scenario, AdmissionMode::deployment);
    CHECK(paced.served == workload.scenario.workload.calls);
    CHECK(paced.gave_up == 0);
    CHECK(share_refused(paced) <= 0.005);
    CHECK(paced.makespan.count() <= paced.bound.count() * 103 / 100);
    CHECK(paced.makespan >= paced.bound);  // the bound is a bound

    const PacedTotals learned = run(workload.scenario, AdmissionMode::learned);
    CHECK(learned.served == workload.scenario.workload.calls);
    CHECK(share_refused(learned) <= 0.02);
  }
}

TEST_CASE("Without pacing, retries alone draw 429s and give up", "[pacing]") {
  const auto a = scenarios::paced_workloads().front().scenario;
  const PacedTotals bare = run(a, AdmissionMode::none);
  CHECK(share_refused(bare) > 0.5);
  CHECK(bare.gave_up > 0);
  const PacedTotals buckets = run(a, AdmissionMode::buckets);  // a minute's bucket against per-second enforcement
  CHECK(buckets.refused > 0);
  CHECK(buckets.makespan > run(a, AdmissionMode::deployment).makespan);
}

TEST_CASE("The capacity bound counts arrivals, buckets and workers", "[pacing]") {
  PacedScenario s;
  s.workload = Workload{100, 0ms, 0, 50, 50, 10};
  s.provider.requests = Bucket{10, 1s};
  s.provider.tokens_per_request = 1;
  s.provider.latency = 2s;
  CHECK(capacity_bound(s) == 9s + 2s);  // 90 requests beyond the first 10, at 10 a second
  s.workload.workers = 5;
  CHECK(capacity_bound(s) == 19 * 2s + 2s);  // 20 calls a worker, one after another
  s.workload.workers = 0;
  s.workload.spacing = 1s;
  CHECK(capacity_bound(s) == 99s + 2s);  // the last call is ready at 99 s
}

TEST_CASE("A paced scenario that makes no sense is refused, naming the field", "[pacing]") {
  PacedScenario s;
  s.workload.output_tokens = s.workload.max_tokens + 1;
  CHECK_THROWS_WITH(simulate_paced(s), "Workload::output_tokens must be in [0, max_tokens]");
  s.workload.output_tokens = 0;
  s.admission = AdmissionMode::spacing;
  CHECK_THROWS_WITH(simulate_paced(s), "PacedScenario::limits needs requests_per_minute for spacing and buckets");
}
