#include <llmretry/decision.hpp>

#include <llmretry/http/classify.hpp>

#include <random>
#include <stdexcept>
#include <vector>

#include "helpers.hpp"
#include "llmretry_catch.hpp"

using namespace llmretry;
using std::chrono::milliseconds;
using namespace std::chrono_literals;
using llmretry_test::no_jitter;

namespace {
Failure rate_limited(std::optional<milliseconds> wait = std::nullopt) {
  Failure failure = classify_status(429);
  failure.provider_wait = wait;
  return failure;
}
Failure timeout(Sent sent = Sent::maybe_processed) { return Failure::timed_out(sent); }

// Feeds `failure` until the state stops; returns the waits and sets `reason`.
std::vector<milliseconds> waits_until_stop(RetryState& state, const Failure& failure, StopReason& reason) {
  std::mt19937_64 rng(7);
  std::vector<milliseconds> waits;
  for (;;) {
    const auto decision = state.next(failure, rng);
    if (!decision.retry) {
      reason = decision.reason;
      return waits;
    }
    waits.push_back(decision.wait);
  }
}
}  // namespace

TEST_CASE("The exact checks of the defaults, jitter off", "[decision]") {
  StopReason reason{};
  SECTION("base 1 s, always 429: waits 1, 2, 4 (7 s), then the 4th attempt fails") {
    RetryState state{no_jitter(1s)};
    CHECK(waits_until_stop(state, rate_limited(), reason) == std::vector<milliseconds>{1s, 2s, 4s});
    CHECK(reason == StopReason::attempts_exhausted);
    CHECK(state.attempts() == 4);
    CHECK(state.waited() == 7s);
  }
  SECTION("base 4 s: waits 4, 8, 8 add up to exactly 20 s, which is within budget") {
    RetryState state{no_jitter(4s)};
    CHECK(waits_until_stop(state, rate_limited(), reason) == std::vector<milliseconds>{4s, 8s, 8s});
    CHECK(reason == StopReason::attempts_exhausted);
    CHECK(state.waited() == 20s);
  }
  SECTION("unlimited attempts, always 503: 0.5, 1, 2, 4, 8 (15.5 s), then another 8 s would pass 20") {
    auto policy = no_jitter();
    policy.max_attempts = 1000;
    RetryState state{policy};
    CHECK(waits_until_stop(state, classify_status(503), reason) == std::vector<milliseconds>{500ms, 1s, 2s, 4s, 8s});
    CHECK(reason == StopReason::wait_budget);
    CHECK(state.waited() == 15500ms);
  }
  SECTION("real Azure 429 with retry-after-ms 511: wait at least 0.511 s") {
    RetryState state{RetryPolicy{}};
    std::mt19937_64 rng(1);
    const auto decision = state.next(rate_limited(511ms), rng);
    REQUIRE(decision.retry);
    CHECK(decision.wait >= 511ms);
    CHECK(decision.wait <= 511ms);  // full jitter on a 0.5 s backoff never exceeds it
  }
  SECTION("retry-after: 30 alone: stop at once") {
    RetryState state{RetryPolicy{}};
    std::mt19937_64 rng(1);
    const auto before = rng;
    const auto decision = state.next(rate_limited(30s), rng);
    CHECK_FALSE(decision.retry);
    CHECK(decision.reason == StopReason::provider_wait_too_long);
    CHECK(rng == before);  // nothing drawn
    CHECK(state.waited() == 0ms);
  }
}

TEST_CASE("The wait is the larger of the backoff and the provider's wait", "[decision]") {
  RetryState state{no_jitter()};
  std::mt19937_64 rng(1);
  CHECK(state.next(rate_limited(100ms), rng).wait == 500ms);
  CHECK(state.next(rate_limited(3s), rng).wait == 3s);
  CHECK(state.waited() == 3500ms);
}

TEST_CASE("A provider wait exactly at the limit is accepted", "[decision]") {
  RetryState state{no_jitter()};
  std::mt19937_64 rng(1);
  CHECK(state.next(rate_limited(8s), rng).wait == 8s);
  RetryState saturated{no_jitter()};
  const auto decision = saturated.next(rate_limited(milliseconds::max()), rng);
  CHECK(decision.reason == StopReason::provider_wait_too_long);
}

TEST_CASE("What is never retried", "[decision]") {
  std::mt19937_64 rng(1);
  for (int status : {400, 401, 403, 404, 422}) {
    RetryState state{RetryPolicy{}};
    const auto decision = state.next(classify_status(status), rng);
    CHECK_FALSE(decision.retry);
    CHECK(decision.reason == StopReason::not_retryable);
  }
  for (const char* code : {"insufficient_quota", "context_length_exceeded", "content_filter"}) {
    RetryState state{RetryPolicy{}};
    CHECK(state.next(classify_status(code[0] == 'i' ? 429 : 400, code), rng).reason == StopReason::not_retryable);
  }
  RetryState state{RetryPolicy{}};
  CHECK(state.next(Failure{FailureKind::stream_interrupted, 200, std::nullopt, Sent::refused, std::nullopt}, rng)
            .reason == StopReason::not_retryable);
}

TEST_CASE("A broken stream is never replayed, whatever the provider says", "[decision]") {
  std::mt19937_64 rng(1);
  Failure broken = Failure::of(FailureKind::stream_interrupted, Sent::maybe_processed);
  broken.should_retry = true;
  RetryState state{RetryPolicy{}};
  const auto decision = state.next(broken, rng);
  CHECK_FALSE(decision.retry);
  CHECK(decision.reason == StopReason::not_retryable);
}

TEST_CASE("The generator is drawn from only when the call may retry", "[decision]") {
  struct CountingRng {
    using result_type = std::uint64_t;
    static constexpr result_type min() { return 0; }
    static constexpr result_type max() { return ~result_type{0}; }
    result_type operator()() { return static_cast<result_type>(++draws) * 0x9E3779B97F4A7C15ull; }
    int draws = 0;
  } rng;
  RetryPolicy policy;  // full jitter: the shortest wait is zero
  policy.max_total_wait = 1s;

  SECTION("not when it stops before the wait") {
    RetryState state{policy};
    CHECK_FALSE(state.next(classify_status(400), rng).retry);
    CHECK(rng.draws == 0);
  }
  SECTION("not when even the shortest wait breaks the budget") {
    RetryState state{policy};
    CHECK_FALSE(state.next(rate_limited(2s), rng).retry);  // the provider's 2 s is the shortest: past 1 s
    CHECK(rng.draws == 0);
  }
  SECTION("not when even the shortest wait ends after the deadline") {
    RetryState state{policy};
    CHECK(state.next(rate_limited(300ms), rng, 200ms).reason == StopReason::deadline);
    CHECK(rng.draws == 0);
  }
  SECTION("once when it retries") {
    RetryState state{policy};
    CHECK(state.next(classify_status(503), rng).retry);
    CHECK(rng.draws == 1);
  }
}

TEST_CASE("The provider's wait plus provider_wait_jitter: one more draw, never below the provider's wait",
          "[decision]") {
  RetryPolicy policy = no_jitter();
  policy.provider_wait_jitter = 100ms;
  std::mt19937_64 rng(3);
  for (int i = 0; i < 100; ++i) {
    RetryState state{policy};
    const auto decision = state.next(rate_limited(2s), rng);
    REQUIRE(decision.retry);
    CHECK(decision.wait >= 2s);
    CHECK(decision.wait <= 2100ms);
  }
  RetryState state{policy};
  CHECK(state.next(classify_status(503), rng).wait == 500ms);  // no provider wait: nothing to spread
}

TEST_CASE("What is retried", "[decision]") {
  std::mt19937_64 rng(1);
  for (int status : {408, 429, 500, 502, 503, 504, 529}) {
    RetryState state{RetryPolicy{}};
    CHECK(state.next(classify_status(status), rng).retry);
  }
  RetryState state{RetryPolicy{}};
  CHECK(state.next(timeout(), rng).retry);
  CHECK(state.next(Failure::connection_failed(Sent::not_sent), rng).retry);
}

TEST_CASE("A call that is not safe to repeat", "[decision]") {
  std::mt19937_64 rng(1);
  SECTION("is not retried after a failure that may have been processed") {
    RetryState state{RetryPolicy{}, false};
    CHECK(state.next(timeout(Sent::maybe_processed), rng).reason == StopReason::not_safe_to_repeat);
    RetryState again{RetryPolicy{}, false};
    CHECK(again.next(classify_status(503), rng).reason == StopReason::not_safe_to_repeat);
  }
  SECTION("is retried when the request was never sent or was refused") {
    RetryState state{RetryPolicy{}, false};
    CHECK(state.next(timeout(Sent::not_sent), rng).retry);
    CHECK(state.next(Failure::connection_failed(Sent::not_sent), rng).retry);
    CHECK(state.next(rate_limited(), rng).retry);
  }
}

TEST_CASE("The provider's x-should-retry wins", "[decision]") {
  std::mt19937_64 rng(1);
  SECTION("false stops a transient failure") {
    auto failure = classify_status(503);
    failure.should_retry = false;
    RetryState state{RetryPolicy{}};
    CHECK(state.next(failure, rng).reason == StopReason::provider_declined);
  }
  SECTION("true retries a failure that would not be, even for a call not safe to repeat") {
    auto failure = classify_status(409);
    failure.should_retry = true;
    RetryState state{RetryPolicy{}, false};
    CHECK(state.next(failure, rng).retry);
  }
  SECTION("true does not lift the attempt limit") {
    auto failure = classify_status(400);
    failure.should_retry = true;
    auto policy = no_jitter();
    policy.max_attempts = 1;
    RetryState state{policy};
    CHECK(state.next(failure, rng).reason == StopReason::attempts_exhausted);
  }
}

TEST_CASE("The deadline stops a wait that would end after it", "[decision]") {
  std::mt19937_64 rng(1);
  RetryState state{no_jitter()};
  CHECK(state.next(rate_limited(), rng, 500ms).retry);  // ends exactly at the deadline
  const auto decision = state.next(rate_limited(), rng, 999ms);
  CHECK(decision.reason == StopReason::deadline);
  CHECK(state.waited() == 500ms);
}

TEST_CASE("One attempt means no retry", "[decision]") {
  auto policy = no_jitter();
  policy.max_attempts = 1;
  RetryState state{policy};
  std::mt19937_64 rng(1);
  CHECK(state.next(rate_limited(), rng).reason == StopReason::attempts_exhausted);
}

TEST_CASE("A zero wait budget allows zero waits only", "[decision]") {
  auto policy = no_jitter(0ms);
  policy.cap = 0ms;
  policy.max_total_wait = 0ms;
  RetryState state{policy};
  std::mt19937_64 rng(1);
  CHECK(state.next(rate_limited(), rng).wait == 0ms);
  CHECK(state.next(rate_limited(1ms), rng).reason == StopReason::provider_wait_too_long);
}

TEST_CASE("Decorrelated jitter grows from the previous draw and stays within [base, cap]", "[decision]") {
  RetryPolicy policy;
  policy.jitter = Jitter::decorrelated;
  policy.max_attempts = 1000;
  policy.max_total_wait = milliseconds::max();
  RetryState state{policy};
  std::mt19937_64 rng(5);
  milliseconds previous = policy.base;
  for (int i = 0; i < 500; ++i) {
    const auto decision = state.next(classify_status(503), rng);
    REQUIRE(decision.retry);
    CHECK(decision.wait >= policy.base);
    CHECK(decision.wait <= std::min(policy.cap, previous * 3));
    previous = decision.wait;
  }
}

TEST_CASE("RetryState refuses a policy that makes no sense", "[decision]") {
  RetryPolicy policy;
  policy.cap = 1ms;
  CHECK_THROWS_AS(RetryState{policy}, std::invalid_argument);
}

TEST_CASE("Stop reason names", "[decision]") {
  CHECK(std::string(to_string(StopReason::not_retryable)) == "not_retryable");
  CHECK(std::string(to_string(StopReason::not_safe_to_repeat)) == "not_safe_to_repeat");
  CHECK(std::string(to_string(StopReason::provider_declined)) == "provider_declined");
  CHECK(std::string(to_string(StopReason::attempts_exhausted)) == "attempts_exhausted");
  CHECK(std::string(to_string(StopReason::wait_budget)) == "wait_budget");
  CHECK(std::string(to_string(StopReason::provider_wait_too_long)) == "provider_wait_too_long");
  CHECK(std::string(to_string(StopReason::deadline)) == "deadline");
  CHECK(std::string(to_string(StopReason::refused)) == "refused");
  CHECK(std::string(to_string(StopReason::no_capacity)) == "no_capacity");
  CHECK(std::string(to_string(StopReason::retry_budget)) == "retry_budget");
  CHECK(std::string(to_string(StopReason::circuit_open)) == "circuit_open");
  CHECK(std::string(to_string(static_cast<StopReason>(77))) == "unknown");
}
