// The helpers documented as safe from several threads, used from several threads at once: run under
// ThreadSanitizer (.ci/quality tsan), a data race fails the test. Catch2 assertions stay on the main thread.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <llmretry/llmretry.hpp>
#include <llmretry/metrics/registry.hpp>
#include <llmretry/testing.hpp>
#include <llmretry_catch.hpp>

namespace {

constexpr int thread_count = 4;
constexpr int calls_per_thread = 200;

// Runs body(thread index) on thread_count threads and waits for them.
template <class Body>
void on_threads(Body body) {
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) threads.emplace_back(body, t);
  for (auto& thread : threads) thread.join();
}

}  // namespace

TEST_CASE("call_with_retry shares a SimulatedProvider, a FakeSleep and a ManualClock between threads") {
  using std::chrono::milliseconds;
  llmretry::testing::SimulatedProvider provider{"rate_limit_ms:1*300", "server_error*100", "timeout*100"};
  llmretry::testing::ManualClock clock;
  llmretry::testing::FakeSleep sleep{clock};
  llmretry::RetryPolicy policy;
  policy.base = milliseconds{1};
  policy.cap = milliseconds{4};
  policy.max_attempts = 1000;
  std::atomic<int> answers{0};

  on_threads([&](int) {
    for (int i = 0; i < calls_per_thread; ++i) {
      const int answer = llmretry::call_with_retry([&] { return provider.call([] { return 1; }); }, policy, sleep);
      answers += answer;
      (void)clock.now();
    }
  });

  CHECK(answers == thread_count * calls_per_thread);
  CHECK(provider.calls() == thread_count * calls_per_thread + 500);
  CHECK(sleep.waits().size() == 500);
  CHECK(clock.now().time_since_epoch() == sleep.total());
}

TEST_CASE("ThreadRng draws from one engine per thread") {
  // Every thread seeds its engine the same way, all wait until each has, then draw: each thread's draws
  // are the whole sequence of that seed only if no other thread draws from its engine (or reseeds it).
  constexpr std::size_t draws = 1000;
  std::vector<std::vector<std::uint64_t>> drawn(thread_count);
  std::atomic<int> seeded{0};
  on_threads([&](int t) {
    llmretry::ThreadRng::seed_this_thread(42);
    ++seeded;
    while (seeded < thread_count) std::this_thread::yield();
    llmretry::ThreadRng rng;
    for (std::size_t i = 0; i < draws; ++i) drawn[static_cast<std::size_t>(t)].push_back(rng());
  });
  std::mt19937_64 expected_engine{42};
  std::vector<std::uint64_t> expected;
  for (std::size_t i = 0; i < draws; ++i) expected.push_back(expected_engine());
  for (const auto& one : drawn) CHECK(one == expected);
}

TEST_CASE("Many threads share a retry budget, circuit breakers, pacing and a fallback chain") {
  using namespace std::chrono_literals;
  constexpr int threads = 8;
  constexpr int calls = 100;
  llmretry::testing::ManualClock clock;
  llmretry::testing::FakeSleep sleep{clock};
  llmretry::RetryBudgetOptions budget_options;
  budget_options.clock = std::ref(clock);
  llmretry::RetryBudget budget{budget_options};
  llmretry::CircuitBreakerOptions breaker_options;
  breaker_options.minimum_throughput = 20;
  breaker_options.break_duration = 1ms;
  breaker_options.half_open_probes = 2;
  breaker_options.clock = std::ref(clock);
  std::atomic<int> transitions{0};
  breaker_options.on_transition = [&](const llmretry::CircuitTransition&) { ++transitions; };
  llmretry::CircuitBreaker primary_breaker{breaker_options};
  llmretry::CircuitBreaker fallback_breaker{breaker_options};
  llmretry::DeploymentOptions deployment_options;
  deployment_options.limits[llmretry::Dimension::requests_per_minute] = llmretry::Limit::per_minute(6000, 100);
  deployment_options.concurrency = 4;
  deployment_options.clock = std::ref(clock);
  llmretry::Deployment deployment{deployment_options};
  const llmretry::FallbackChain chain{
      {llmretry::Route{"primary", "a", "m", {}, &deployment, &primary_breaker, &budget},
       llmretry::Route{"fallback",
                       "b",
                       "m",
                       {llmretry::FallbackReason::provider_5xx, llmretry::FallbackReason::primary_unavailable,
                        llmretry::FallbackReason::rate_limit_after_retry_budget},
                       nullptr,
                       &fallback_breaker,
                       &budget}}};
  llmretry::testing::SimulatedProvider primary{"server_error*300", "rate_limit_ms:1*100", "timeout*50"};
  llmretry::testing::SimulatedProvider fallback{"ok"};
  llmretry::RetryPolicy policy;
  policy.base = std::chrono::milliseconds{1};
  policy.cap = std::chrono::milliseconds{4};
  std::atomic<int> answered{0};

  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&] {
      for (int i = 0; i < calls; ++i) {
        try {
          const auto routed = llmretry::call_with_fallback(
              chain,
              [&](const llmretry::Route& route) {
                return (route.name == "primary" ? primary : fallback).call([] { return 1; });
              },
              policy, llmretry::FallbackOptions{}, sleep);
          answered += routed.answer;
        } catch (const llmretry::ProviderError&) {
          // the fallback's own breaker may be half-open with its probes out: a refusal, not a race
        }
        (void)llmretry::pressure(deployment, &primary_breaker);
      }
    });
  for (auto& worker : workers) worker.join();

  CHECK(answered > threads * calls * 9 / 10);
  CHECK(primary.calls() + fallback.calls() >= answered);
  CHECK(deployment.concurrency()->in_use() == 0);
  CHECK(budget.stats().first_attempts >= threads * calls);
  const auto opened = primary_breaker.stats().opened + fallback_breaker.stats().opened;
  CHECK(primary_breaker.stats().opened >= 1);  // 300 server errors in a row open it
  CHECK(transitions >= opened);                // each opening was told to on_transition, from whichever thread
}

TEST_CASE("Many threads report calls to one metrics::Registry while it is scraped") {
  llmretry::metrics::Registry registry;
  llmretry::testing::SimulatedProvider provider{"rate_limit_ms:1*200", "server_error*100"};
  llmretry::testing::FakeSleep sleep;
  llmretry::RetryPolicy policy;  // every call retries until the script's failures run out
  policy.max_attempts = 1000;
  policy.base = std::chrono::milliseconds{1};
  policy.cap = std::chrono::milliseconds{1};
  policy.max_total_wait = std::chrono::hours{1};
  std::atomic<std::size_t> scraped{0};
  on_threads([&](int t) {
    const llmretry::metrics::Queue queue{"interactive", t % 2 == 0 ? "chat" : "embeddings"};
    for (int i = 0; i < calls_per_thread; ++i) {
      registry.queue_entered(queue);
      registry.queue_left(queue, std::chrono::milliseconds{i});
      llmretry::call_with_retry([&] { return provider.call([] { return 1; }); }, policy, sleep,
                                llmretry::metrics::observe(registry, {"openai", "gpt-5.5"}));
      if (i % 20 == 0) scraped += registry.prometheus_text().size();
    }
  });
  const std::string text = registry.prometheus_text();
  CHECK(scraped > 0);
  CHECK(text.find("llm_requests_total{provider=\"openai\",model=\"gpt-5.5\",status=\"success\"} 800\n") !=
        std::string::npos);
  CHECK(text.find("error_type=\"rate_limited\"} 200\n") != std::string::npos);
  CHECK(text.find("error_type=\"server_error\"} 100\n") != std::string::npos);
  CHECK(text.find("llm_queue_depth{priority=\"interactive\",task_type=\"chat\"} 0\n") != std::string::npos);
}
