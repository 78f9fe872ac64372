// One retry decision: classify a failed response and decide the next wait, as every driver does after a
// failed attempt.
#include <benchmark/benchmark.h>

#include <chrono>
#include <random>
#include <string_view>

#include <llmretry/decision.hpp>
#include <llmretry/http/classify.hpp>

namespace {

const std::chrono::system_clock::time_point now{std::chrono::seconds{1'795'910'400}};

// 503 without headers: classify_status, then the jittered backoff.
void decide_server_error(benchmark::State& state) {
  const llmretry::RetryPolicy policy;
  std::mt19937_64 rng{42};
  int status = 503;
  for (auto _ : state) {
    benchmark::DoNotOptimize(status);
    llmretry::RetryState retry{policy};
    benchmark::DoNotOptimize(retry.next(llmretry::classify_status(status), rng));
  }
}

// Azure's 429 (retry-after: 30, retry-after-ms: 511): classify_response reads the headers, then the decision.
void decide_rate_limited(benchmark::State& state) {
  const llmretry::RetryPolicy policy;
  std::mt19937_64 rng{42};
  const auto headers = [](std::string_view name) {
    return name == "retry-after-ms" ? std::string_view{"511"}
           : name == "retry-after"  ? std::string_view{"30"}
                                    : std::string_view{};
  };
  int status = 429;
  for (auto _ : state) {
    benchmark::DoNotOptimize(status);
    llmretry::RetryState retry{policy};
    benchmark::DoNotOptimize(retry.next(llmretry::classify_response(status, headers, now), rng));
  }
}

}  // namespace

BENCHMARK(decide_server_error)->Name("decision/server_error");
BENCHMARK(decide_rate_limited)->Name("decision/rate_limited_with_headers");
