// call_with_retry when the first attempt succeeds, against calling the function directly: the price every
// successful request pays for being retryable. Also counts allocations per call (expected: none).
#include <benchmark/benchmark.h>

#include <llmretry/retry.hpp>

#include "support.hpp"

using llmretry_bench::measure;
using llmretry_bench::opaque_policy;
using llmretry_bench::provider_call;

namespace {

[[gnu::noinline]] llmretry::Result<int> provider_result_call(int& counter) {
  benchmark::ClobberMemory();
  return ++counter;
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
