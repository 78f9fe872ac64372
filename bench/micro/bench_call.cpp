// call_with_retry when the first attempt succeeds, against calling the function directly: the price every
// successful request pays for being retryable. Also counts allocations per call (expected: none).
#include <benchmark/benchmark.h>

#include <llmretry/retry.hpp>

#include "allocations.hpp"

namespace {

// Runs `body` in the benchmark loop and reports the allocations per iteration.
template <class Body>
void measure(benchmark::State& state, Body body) {
  const auto before = llmretry_bench::allocations();
  for (auto _ : state) body();
  state.counters["allocs/call"] = benchmark::Counter(static_cast<double>(llmretry_bench::allocations() - before),
                                                     benchmark::Counter::kAvgIterations);
}

// The call being retried: not inlined, as a call into an HTTP client is not.
[[gnu::noinline]] int provider_call(int& counter) {
  benchmark::ClobberMemory();
  return ++counter;
}

[[gnu::noinline]] llmretry::Result<int> provider_result_call(int& counter) {
  benchmark::ClobberMemory();
  return ++counter;
}

// A policy the compiler cannot see through, as when it comes from configuration.
llmretry::RetryPolicy opaque_policy() {
  llmretry::RetryPolicy policy;
  benchmark::DoNotOptimize(policy);
  return policy;
}

// `provider` called directly.
template <auto provider>
void direct(benchmark::State& state) {
  int counter = 0;
  measure(state, [&] { benchmark::DoNotOptimize(provider(counter)); });
}

// `provider` called through call_with_retry, with a policy from configuration.
template <auto provider>
void retried(benchmark::State& state) {
  int counter = 0;
  const auto policy = opaque_policy();
  measure(state,
          [&] { benchmark::DoNotOptimize(llmretry::call_with_retry([&] { return provider(counter); }, policy)); });
}

// `provider` called through call_with_retry with every argument left to its default.
template <auto provider>
void retried_with_defaults(benchmark::State& state) {
  int counter = 0;
  measure(state, [&] { benchmark::DoNotOptimize(llmretry::call_with_retry([&] { return provider(counter); })); });
}

}  // namespace

BENCHMARK_TEMPLATE(direct, provider_call)->Name("direct_call/throwing_call");
BENCHMARK_TEMPLATE(retried, provider_call)->Name("call_with_retry/throwing_call");
BENCHMARK_TEMPLATE(retried_with_defaults, provider_call)->Name("call_with_retry/default_policy");
BENCHMARK_TEMPLATE(direct, provider_result_call)->Name("direct_call/result_call");
BENCHMARK_TEMPLATE(retried, provider_result_call)->Name("call_with_retry/result_call");
