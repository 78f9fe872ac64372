// Whole calls through call_with_retry, with a scripted provider and a recording sleep: the waits, the
// number of attempts and the reason for stopping that the default policy and its variants promise.
#include <llmretry/llmretry.hpp>
#include <llmretry/testing.hpp>

#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "give_up_recorder.hpp"
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

// What one logical call against a scripted provider did.
struct Replay {
  std::vector<milliseconds> waits;
  int calls = 0;
  std::optional<StopReason> stopped;  // empty: it succeeded
  std::optional<Failure> last_failure;
};

Replay replay(const std::vector<std::string>& script, const RetryPolicy& policy, std::uint64_t seed = 8) {
  SimulatedProvider provider{script};
  FakeSleep sleep;
  GiveUpRecorder recorder;
  Replay result;
  try {
    const auto text = call_with_retry([&] { return provider.call([] { return std::string("finish_reason stop"); }); },
                                      policy, sleep, std::mt19937_64{seed}, NoRetryHook{}, recorder.options);
    CHECK(text == "finish_reason stop");
  } catch (const ProviderError& error) {
    result.last_failure = error.failure();
  }
  result.waits = sleep.waits();
  result.calls = provider.calls();
  if (recorder.gave_up) result.stopped = recorder.gave_up->reason;
  CHECK(result.stopped.has_value() == result.last_failure.has_value());  // a give-up is always reported
  return result;
}
}  // namespace

TEST_CASE("rate_limit, timeout, server_error, then success on attempt 4, each wait within its backoff", "[scenario]") {
  const auto run = replay({"rate_limit", "timeout", "server_error"}, RetryPolicy{});
  CHECK(run.calls == 4);
  CHECK_FALSE(run.stopped);
  REQUIRE(run.waits.size() == 3);
  // Each wait is random but never above the backoff: at most 0.5, then 1, then 2 s.
  CHECK(run.waits[0] <= 500ms);
  CHECK(run.waits[1] <= 1s);
  CHECK(run.waits[2] <= 2s);
}

TEST_CASE("rate_limit, timeout, server_error with jitter off: waits 0.5, 1, 2 s (3.5 s in total)", "[scenario]") {
  const auto run = replay({"rate_limit", "timeout", "server_error"}, policy_with(Jitter::none));
  CHECK(run.waits == std::vector<milliseconds>{500ms, 1s, 2s});
  CHECK(run.calls == 4);
}

TEST_CASE("a 429 asking for 0.511 s: waits exactly 0.511 s whatever the jitter draws", "[scenario]") {
  for (std::uint64_t seed = 0; seed < 50; ++seed) {
    const auto run = replay({"rate_limit:0.511"}, RetryPolicy{}, seed);
    CHECK(run.waits == std::vector<milliseconds>{511ms});
    CHECK(run.calls == 2);
  }
}

TEST_CASE("a 429 asking for 30 s (above the cap): throws at once, no sleep", "[scenario]") {
  const auto run = replay({"rate_limit:30"}, RetryPolicy{});
  CHECK(run.calls == 1);
  CHECK(run.waits.empty());
  CHECK(run.stopped == StopReason::provider_wait_too_long);
  CHECK(run.last_failure->kind == FailureKind::rate_limited);
}

TEST_CASE("base 1 s, always 429: waits 1, 2, 4 (7 s), the 4th attempt fails", "[scenario]") {
  const auto run = replay({"rate_limit*100"}, policy_with(Jitter::none, 1s));
  CHECK(run.waits == std::vector<milliseconds>{1s, 2s, 4s});
  CHECK(run.calls == 4);
  CHECK(run.stopped == StopReason::attempts_exhausted);
}

TEST_CASE("base 4 s: waits 4, 8, 8 (exactly 20 s is within budget), the 4th attempt fails", "[scenario]") {
  const auto run = replay({"rate_limit*100"}, policy_with(Jitter::none, 4s));
  CHECK(run.waits == std::vector<milliseconds>{4s, 8s, 8s});
  CHECK(run.calls == 4);
  CHECK(run.stopped == StopReason::attempts_exhausted);
}

TEST_CASE("unlimited attempts, always 503: 0.5, 1, 2, 4, 8 (15.5 s), then stop", "[scenario]") {
  const auto run = replay({"server_error*100"}, policy_with(Jitter::none, 500ms, 1'000'000));
  CHECK(run.waits == std::vector<milliseconds>{500ms, 1s, 2s, 4s, 8s});
  CHECK(run.calls == 6);
  CHECK(run.stopped == StopReason::wait_budget);
}

TEST_CASE("a real Azure 429 waits at least 0.511 s; retry-after: 30 alone stops", "[scenario]") {
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
    call_with_retry(
        [&] {
          if (++calls == 1) throw ProviderError("HTTP 429", classify_response(429, azure, now, "rate_limit_exceeded"));
        },
        RetryPolicy{}, sleep);
    REQUIRE(sleep.waits().size() == 1);
    CHECK(sleep.waits()[0] >= 511ms);
  }
  SECTION("retry-after: 30 alone") {
    CHECK_THROWS_AS(call_with_retry(
                        [&] {
                          ++calls;
                          throw RateLimited("HTTP 429", requested_wait(coarse, now));
                        },
                        RetryPolicy{}, sleep),
                    RateLimited);
    CHECK(calls == 1);
    CHECK(sleep.waits().empty());
  }
}

TEST_CASE("a 400 is never retried", "[scenario]") {
  const auto run = replay({"status:400"}, RetryPolicy{});
  CHECK(run.calls == 1);
  CHECK(run.waits.empty());
  CHECK(run.stopped == StopReason::not_retryable);
}
