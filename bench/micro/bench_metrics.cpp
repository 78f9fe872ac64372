// The metrics' cost: one event counted by metrics::Registry (a series found under its family's mutex),
// alone and from several threads at once on one series (the worst case: every thread waits on the same
// lock) or on a series each; a successful call_with_retry reporting through metrics::observe, beside the
// bare call; and a scrape of a registry holding a thousand series. Counts allocations too.
#include <benchmark/benchmark.h>

#include <llmretry/metrics/observe.hpp>
#include <llmretry/metrics/registry.hpp>
#include <llmretry/retry.hpp>

#include <string>

#include "support.hpp"

using llmretry_bench::measure;
using llmretry_bench::opaque_policy;
using llmretry_bench::provider_call;

namespace {

// Model names longer than the small-string buffer, as real ones are.
const llmretry::metrics::Target shared_target{"openai", "gpt-4o-mini-2024-07-18"};
llmretry::metrics::Registry shared_registry;

void request_finished_one_series(benchmark::State& state) {
  measure(state, [] { shared_registry.request_finished(shared_target, "success"); });
}

void request_finished_own_series(benchmark::State& state) {
  const llmretry::metrics::Target target{"openai", "gpt-4o-mini-2024-07-18/" + std::to_string(state.thread_index())};
  measure(state, [&] { shared_registry.request_finished(target, "success"); });
}

void queue_left(benchmark::State& state) {
  static const llmretry::metrics::Queue queue{"interactive", "chat"};
  measure(state, [] { shared_registry.queue_left(queue, std::chrono::milliseconds{300}); });
}

void observed_call(benchmark::State& state) {
  llmretry::metrics::Registry registry;
  const auto policy = opaque_policy();
  int counter = 0;
  measure(state, [&] {
    benchmark::DoNotOptimize(llmretry::call_with_retry([&] { return provider_call(counter); }, policy,
                                                       llmretry::metrics::observe(registry, shared_target)));
  });
}

void scrape_1000_series(benchmark::State& state) {
  llmretry::metrics::Registry registry;
  for (int provider = 0; provider < 10; ++provider)
    for (int model = 0; model < 100; ++model)
      registry.request_finished({"provider-" + std::to_string(provider), "model-" + std::to_string(model)}, "success");
  measure(state, [&] { benchmark::DoNotOptimize(registry.prometheus_text()); });
}

}  // namespace

BENCHMARK(request_finished_one_series)->Name("registry/request_finished");
BENCHMARK(request_finished_one_series)->Name("registry/request_finished/one_series")->Threads(2)->Threads(8);
BENCHMARK(request_finished_own_series)->Name("registry/request_finished/own_series")->Threads(2)->Threads(8);
BENCHMARK(queue_left)->Name("registry/queue_left");
BENCHMARK(observed_call)->Name("call_with_retry/observe");
BENCHMARK(scrape_1000_series)->Name("registry/prometheus_text/1000_series");
