// What several microbenchmarks share: the loop that counts allocations, a call that is not inlined, and a
// policy the compiler cannot see through.
#ifndef LLMRETRY_BENCH_SUPPORT_HPP
#define LLMRETRY_BENCH_SUPPORT_HPP

#include <benchmark/benchmark.h>

#include <llmretry/policy.hpp>

#include <thread>

#include "allocations.hpp"

namespace llmretry_bench {

/// Runs `body` in the benchmark loop and reports the allocations per iteration (counter "allocs/call").
template <class Body>
void measure(benchmark::State& state, Body body) {
  const auto before = allocations();
  for (auto _ : state) body();
  state.counters["allocs/call"] =
      benchmark::Counter(static_cast<double>(allocations() - before), benchmark::Counter::kAvgIterations);
}

/// The call being retried: returns the incremented `counter`. Not inlined, as a call into an HTTP client is not.
[[gnu::noinline]] inline int provider_call(int& counter) {
  benchmark::ClobberMemory();
  return ++counter;
}

/// Starts and joins a thread once, so that what follows runs as in a process where threads share the
/// limiter: until a process starts its first thread, glibc locks a std::mutex without an atomic instruction.
inline void as_in_a_threaded_process() {
  static const bool started = [] {
    std::thread([] {}).join();
    return true;
  }();
  (void)started;
}

/// Returns the default policy, hidden from the optimiser, as a policy that comes from configuration is.
inline llmretry::RetryPolicy opaque_policy() {
  llmretry::RetryPolicy policy;
  benchmark::DoNotOptimize(policy);
  return policy;
}

}  // namespace llmretry_bench

#endif  // LLMRETRY_BENCH_SUPPORT_HPP
