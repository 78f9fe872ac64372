// The seed's reference behaviour (assistant/retry.py, try_retry.py) and DESIGN.md's exact checks,
// replayed through call_with_retry with a scripted provider and a recording sleep.
#include <llmretry/llmretry.hpp>
#include <llmretry/testing.hpp>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "llmretry_catch.hpp"

using namespace llmretry;
using llmretry::testing::FakeSleep;
using llmretry::testing::SimulatedProvider;
using std::chrono::milliseconds;
using namespace std::chrono_literals;

namespace {
RetryPolicy policy_with(Jitter jitter, milliseconds base = 500ms, int max_attempts = 4) {
  RetryPolicy policy;
  policy.jitter = jitter;
  policy.base = base;
  policy.max_attempts = max_attempts;
  return policy;
}

std::string finish(SimulatedProvider& provider) {
  return provider.call([] { return std::string("finish_reason stop"); });
}
}  // namespace

TEST_CASE("try_retry.py: rate_limit, timeout, server_error, then success on attempt 4", "[seed]") {
  SimulatedProvider provider{"rate_limit", "timeout", "server_error"};
  FakeSleep sleep;
  std::mt19937_64 rng(8);
  CHECK(call_with_retry([&] { return finish(provider); }, RetryPolicy{}, sleep, rng) == "finish_reason stop");
  CHECK(provider.calls() == 4);
  const auto waits = sleep.waits();
  REQUIRE(waits.size() == 3);
  // Each wait is random but never above the backoff: at most 0.5, then 1, then 2 s.
  CHECK(waits[0] <= 500ms);
  CHECK(waits[1] <= 1s);
  CHECK(waits[2] <= 2s);
}

TEST_CASE("try_retry.py with jitter off: waits 0.5, 1, 2 s (3.5 s in total)", "[seed]") {
  SimulatedProvider provider{"rate_limit", "timeout", "server_error"};
  FakeSleep sleep;
  CHECK(call_with_retry([&] { return finish(provider); }, policy_with(Jitter::none), sleep) == "finish_reason stop");
  CHECK(sleep.waits() == std::vector<milliseconds>{500ms, 1s, 2s});
  CHECK(sleep.total() == 3500ms);
}

TEST_CASE("try_retry.py with rate_limit:0.511: waits 0.511 s, as the provider asked", "[seed]") {
  for (std::uint64_t seed = 0; seed < 50; ++seed) {
    SimulatedProvider provider{"rate_limit:0.511"};
    FakeSleep sleep;
    std::mt19937_64 rng(seed);
    call_with_retry([&] { return finish(provider); }, RetryPolicy{}, sleep, rng);
    CHECK(sleep.waits() == std::vector<milliseconds>{511ms});
    CHECK(provider.calls() == 2);
  }
}

TEST_CASE("try_retry.py with rate_limit:30: throws at once, no sleep", "[seed]") {
  SimulatedProvider provider{"rate_limit:30"};
  FakeSleep sleep;
  std::optional<GiveUp> gave_up;
  CallOptions options;
  options.on_give_up = [&](const GiveUp& info) { gave_up = info; };
  CHECK_THROWS_AS(call_with_retry([&] { return finish(provider); }, RetryPolicy{}, sleep, ThreadRng{}, NoRetryHook{},
                                  options),
                  RateLimited);
  CHECK(provider.calls() == 1);
  CHECK(sleep.waits().empty());
  CHECK(gave_up->reason == StopReason::retry_after_too_long);
}

TEST_CASE("DESIGN.md: base 1 s, always 429: waits 1, 2, 4 (7 s), the 4th attempt fails", "[seed]") {
  SimulatedProvider provider{"rate_limit*100"};
  FakeSleep sleep;
  CHECK_THROWS_AS(call_with_retry([&] { return finish(provider); }, policy_with(Jitter::none, 1s), sleep), RateLimited);
  CHECK(sleep.waits() == std::vector<milliseconds>{1s, 2s, 4s});
  CHECK(provider.calls() == 4);
}

TEST_CASE("DESIGN.md: base 4 s: waits 4, 8, 8 (exactly 20 s is within budget), the 4th attempt fails", "[seed]") {
  SimulatedProvider provider{"rate_limit*100"};
  FakeSleep sleep;
  std::optional<GiveUp> gave_up;
  CallOptions options;
  options.on_give_up = [&](const GiveUp& info) { gave_up = info; };
  CHECK_THROWS_AS(call_with_retry([&] { return finish(provider); }, policy_with(Jitter::none, 4s), sleep, ThreadRng{},
                                  NoRetryHook{}, options),
                  RateLimited);
  CHECK(sleep.waits() == std::vector<milliseconds>{4s, 8s, 8s});
  CHECK(provider.calls() == 4);
  CHECK(gave_up->reason == StopReason::attempts_exhausted);
}

TEST_CASE("DESIGN.md: unlimited attempts, always 503: 0.5, 1, 2, 4, 8 (15.5 s), then stop", "[seed]") {
  SimulatedProvider provider{"server_error*100"};
  FakeSleep sleep;
  std::optional<GiveUp> gave_up;
  CallOptions options;
  options.on_give_up = [&](const GiveUp& info) { gave_up = info; };
  CHECK_THROWS_AS(call_with_retry([&] { return finish(provider); }, policy_with(Jitter::none, 500ms, 1'000'000), sleep,
                                  ThreadRng{}, NoRetryHook{}, options),
                  ProviderError);
  CHECK(sleep.waits() == std::vector<milliseconds>{500ms, 1s, 2s, 4s, 8s});
  CHECK(sleep.total() == 15500ms);
  CHECK(provider.calls() == 6);
  CHECK(gave_up->reason == StopReason::wait_budget);
}

TEST_CASE("DESIGN.md: the real Azure 429 waits at least 0.511 s; retry-after: 30 alone stops", "[seed]") {
  const auto now = std::chrono::system_clock::now();
  const std::map<std::string, std::string> azure{{"retry-after", "30"},
                                                 {"retry-after-ms", "511"},
                                                 {"x-ratelimit-limit-tokens", "100000"},
                                                 {"x-ratelimit-remaining-tokens", "-853"},
                                                 {"x-ratelimit-limit-requests", "100"},
                                                 {"x-ratelimit-remaining-requests", "65"}};
  const std::map<std::string, std::string> coarse{{"retry-after", "30"}};
  FakeSleep sleep;
  int calls = 0;
  SECTION("both headers") {
    call_with_retry([&] {
      if (++calls == 1) throw ProviderError("HTTP 429", classify_response(429, azure, now, "rate_limit_exceeded"));
    }, RetryPolicy{}, sleep);
    REQUIRE(sleep.waits().size() == 1);
    CHECK(sleep.waits()[0] >= 511ms);
  }
  SECTION("retry-after: 30 alone") {
    CHECK_THROWS_AS(call_with_retry([&] {
      ++calls;
      throw RateLimited("HTTP 429", retry_after(coarse, now));
    }, RetryPolicy{}, sleep), RateLimited);
    CHECK(calls == 1);
    CHECK(sleep.waits().empty());
  }
}

TEST_CASE("The seed's decision tree: 400 is never retried", "[seed]") {
  SimulatedProvider provider{"status:400"};
  FakeSleep sleep;
  CHECK_THROWS_AS(call_with_retry([&] { return finish(provider); }, RetryPolicy{}, sleep), ProviderError);
  CHECK(provider.calls() == 1);
  CHECK(sleep.waits().empty());
}
