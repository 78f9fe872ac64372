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

void direct_throwing_call(benchmark::State& state) {
  int counter = 0;
  const auto call = [&] { return provider_call(counter); };
  measure(state, [&] { benchmark::DoNotOptimize(call()); });
}

void retried_throwing_call(benchmark::State& state) {
  int counter = 0;
  const auto call = [&] { return provider_call(counter); };
  const auto policy = opaque_policy();
  measure(state, [&] { benchmark::DoNotOptimize(llmretry::call_with_retry(call, policy)); });
}

void retried_default_policy(benchmark::State& state) {
  int counter = 0;
  const auto call = [&] { return provider_call(counter); };
  measure(state, [&] { benchmark::DoNotOptimize(llmretry::call_with_retry(call)); });
}

void direct_result_call(benchmark::State& state) {
  int counter = 0;
  const auto call = [&] { return provider_result_call(counter); };
  measure(state, [&] { benchmark::DoNotOptimize(call()); });
}

void retried_result_call(benchmark::State& state) {
  int counter = 0;
  const auto call = [&] { return provider_result_call(counter); };
  const auto policy = opaque_policy();
  measure(state, [&] { benchmark::DoNotOptimize(llmretry::call_with_retry(call, policy)); });
}

}  // namespace

BENCHMARK(direct_throwing_call)->Name("direct_call/throwing_call");
BENCHMARK(retried_throwing_call)->Name("call_with_retry/throwing_call");
BENCHMARK(retried_default_policy)->Name("call_with_retry/default_policy");
BENCHMARK(direct_result_call)->Name("direct_call/result_call");
BENCHMARK(retried_result_call)->Name("call_with_retry/result_call");
