// End to end over real sockets: many threads share one Deployment and make their calls with libcurl to the
// rate-limited loopback provider, which enforces its per-minute limits per second as OpenAI does. The
// pacing keeps the provider's 429s rare, whether the deployment is told the limits or learns them.
#include <llmretry/admission/deployment.hpp>
#include <llmretry/admission/tokens.hpp>
#include <llmretry/curl/curl.hpp>
#include <llmretry/json/error_fields.hpp>
#include <llmretry/json/usage.hpp>
#include <llmretry/loopback/provider.hpp>
#include <llmretry/retry.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <llmretry_catch.hpp>

using namespace std::chrono_literals;
using llmretry::Deployment;
using llmretry::DeploymentOptions;
using llmretry::Dimension;
using llmretry::Limit;
using llmretry::testing::LoopbackLimits;
using llmretry::testing::LoopbackProvider;

namespace {

constexpr int call_count = 300;
constexpr int thread_count = 16;
constexpr std::int64_t max_tokens = 20;

/// 6000 requests and 240,000 tokens per minute, enforced as 100 requests and 4000 tokens per second; each
/// answer takes 20 ms.
LoopbackLimits provider_limits() {
  LoopbackLimits limits;
  limits.requests_per_minute = 6000;
  limits.tokens_per_minute = 240'000;
  limits.latency = 20ms;
  return limits;
}

std::string body_of(int call) {
  return R"({"model":"chat-small","max_tokens":)" + std::to_string(max_tokens) +
         R"(,"messages":[{"role":"user","content":"Question )" + std::to_string(call) +
         R"(: how many tokens does this take?"}]})";
}

/// What a run of every call through one deployment gave.
struct Run {
  int succeeded = 0;
  std::vector<std::string> errors;
  std::chrono::duration<double> wall{};
};

/// Makes every call from thread_count threads through `deployment`, each a new curl::Call paced by it.
Run call_all(const LoopbackProvider& provider, Deployment& deployment) {
  llmretry::curl::Options options;
  options.read_error = [](std::string_view body) { return llmretry::json::error_fields(body); };
  options.timeout = 10s;
  const llmretry::RetryPolicy policy;
  llmretry::CallOptions call_options;
  call_options.deadline = std::chrono::steady_clock::now() + 50s;

  std::atomic<int> next{0};
  std::atomic<int> succeeded{0};
  std::mutex errors_mutex;
  Run run;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([&] {
      for (int i = next++; i < call_count; i = next++) {
        const std::string body = body_of(i);
        llmretry::curl::Call call(
            {"POST", provider.base_url() + "/v1/chat/completions", {{"Content-Type", "application/json"}}, body},
            options);
        // The provider counts the whole body's tokens: so does the estimate.
        auto pacing = deployment.pace(llmretry::estimate_cost(body, max_tokens));
        try {
          const auto response = llmretry::call_with_retry(call, policy, pacing, call_options);
          if (response.status == 200) ++succeeded;
        } catch (const std::exception& error) {
          const std::lock_guard<std::mutex> lock(errors_mutex);
          run.errors.emplace_back(error.what());
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  run.wall = std::chrono::steady_clock::now() - start;
  run.succeeded = succeeded.load();
  return run;
}

/// Returns the least time the provider's limits allow for every call: what is beyond the bursts, at the
/// refill rates.
double bound_seconds(const LoopbackLimits& limits) {
  std::int64_t tokens = 0;
  for (int i = 0; i < call_count; ++i) tokens += llmretry::testing::loopback_usage(body_of(i), limits).tokens();
  const double requests = static_cast<double>(call_count - limits.requests_per_minute / 60) /
                          (static_cast<double>(limits.requests_per_minute) / 60.0);
  const double token_seconds = static_cast<double>(tokens - limits.tokens_per_minute / 60) /
                               (static_cast<double>(limits.tokens_per_minute) / 60.0);
  return std::max(requests, token_seconds);
}

// Under a sanitizer every request reaches the provider later after its reservation than in a normal build,
// and the share of 429s is no measure of the pacing: there, only the correctness checks hold.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr bool timing_is_measured = false;
#else
constexpr bool timing_is_measured = true;
#endif

/// Prints and checks a run: every call served once, and at most `max_share` of the requests refused.
void check(const char* name, const LoopbackProvider& provider, const Run& run, double max_share) {
  const std::int64_t requests = provider.served() + provider.refused();
  const double share = static_cast<double>(provider.refused()) / static_cast<double>(requests);
  std::printf(
      "pacing over HTTP, %s: %d calls from %d threads, %lld requests, %lld answered 429 (%.2f %%), %.2f s "
      "(the limits allow %.2f s)\n",
      name, call_count, thread_count, static_cast<long long>(requests), static_cast<long long>(provider.refused()),
      100.0 * share, run.wall.count(), bound_seconds(provider_limits()));
  INFO(name << ": " << requests << " requests, " << provider.refused() << " answered 429, " << run.wall.count()
            << " s");
  for (const auto& error : run.errors) INFO(error);
  CHECK(run.errors.empty());
  CHECK(run.succeeded == call_count);
  CHECK(provider.served() == call_count);
  if (timing_is_measured) CHECK(share <= max_share);
  CHECK(run.wall.count() >= bound_seconds(provider_limits()) * 0.9);  // the provider held its limits
}

}  // namespace

TEST_CASE("16 threads through one Deployment keep the provider's 429s rare") {
  LoopbackProvider provider;
  provider.enforce(provider_limits());
  DeploymentOptions options;
  options.name = "loopback/chat-small";

  SECTION("the limits configured") {
    options.limits[Dimension::requests_per_minute] = Limit::per_minute(6000, 100);
    options.limits[Dimension::tokens_per_minute] = Limit::per_minute(240'000, 4000);
    Deployment deployment(options);
    const Run run = call_all(provider, deployment);
    check("configured", provider, run, 0.01);
  }
  SECTION("the limits learned from the answers' headers") {
    Deployment deployment(options);
    const Run run = call_all(provider, deployment);
    check("learned", provider, run, 0.02);
    REQUIRE(deployment.limiter().limit(Dimension::requests_per_minute));
    CHECK(deployment.limiter().limit(Dimension::requests_per_minute)->limit == 6000);
    REQUIRE(deployment.limiter().limit(Dimension::tokens_per_minute));
    CHECK(deployment.limiter().limit(Dimension::tokens_per_minute)->limit == 240'000);
  }
}
