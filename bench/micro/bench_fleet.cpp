// call_with_retry when the first attempt succeeds, with a retry budget, a circuit breaker and pacing
// attached (each shared, as by the calls to one deployment), against the same call without them: what
// the mechanisms for many calls at once cost a request that needs none of them.
#include <benchmark/benchmark.h>

#include <llmretry/admission.hpp>
#include <llmretry/retry.hpp>

#include "support.hpp"

using llmretry_bench::measure;
using llmretry_bench::provider_call;

namespace {

void guarded(benchmark::State& state) {
  llmretry::RetryBudget budget;
  llmretry::CircuitBreaker breaker{llmretry::CircuitBreakerOptions{}};
  llmretry::DeploymentOptions options;
  options.limits[llmretry::Dimension::requests_per_minute] =
      llmretry::Limit::per_minute(1'000'000'000, 1'000'000'000);  // never waits: the bookkeeping alone
  llmretry::Deployment deployment{options};
  const llmretry::RetryPolicy policy;
  int counter = 0;
  measure(state, [&] {
    benchmark::DoNotOptimize(llmretry::call_with_retry(
        [&] { return provider_call(counter); }, policy,
        llmretry::guards(breaker.guard(), budget.guard(), deployment.pace(llmretry::Cost{}))));
  });
}

}  // namespace

BENCHMARK(guarded)->Name("call_with_retry/budget_breaker_pacing");
