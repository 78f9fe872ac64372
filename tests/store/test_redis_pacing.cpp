// redis::RateLimiter::pace: the guard of call_with_retry on a limit shared through a real redis-server.
// call_with_retry sleeps through testing::FakeSleep, so the waits it is given are recorded, not slept: the
// server's clock barely moves and each wait is checked against the limit's spacing, give or take the time
// the test takes. Limits are per hour (one unit every few seconds) for that reason.
#include <llmretry/admission/retry_budget.hpp>
#include <llmretry/redis/rate_limiter.hpp>
#include <llmretry/result.hpp>
#include <llmretry/retry.hpp>
#include <llmretry/testing/fake_sleep.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "helpers.hpp"
#include "llmretry_catch.hpp"
#include "redis_fixture.hpp"

using namespace std::chrono_literals;
using llmretry::AttemptRefused;
using llmretry::call_with_retry;
using llmretry::Cost;
using llmretry::Dimension;
using llmretry::Limit;
using llmretry::Limits;
using llmretry::RetryPolicy;
using llmretry::StopReason;
using llmretry::redis::RateLimiter;
using llmretry_test::tokens;
using std::chrono::milliseconds;

namespace {

Limits only(Dimension dimension, std::int64_t per_hour, std::optional<std::int64_t> burst = {}) {
  Limits limits;
  limits[dimension] = Limit{per_hour, 1h, burst};
  return limits;
}

/// An answer with a body, as curl::Response has: its usage is the number of output tokens it holds.
struct Answer {
  std::string body;
};

std::optional<Cost> output_tokens(std::string_view body) { return Cost{1, 0, std::stoll(std::string(body))}; }

/// Returns the wait before now with the limiter's state as it is (reserves and gives back at once).
milliseconds wait_for(RateLimiter& limiter, const Cost& cost) {
  const auto now = std::chrono::steady_clock::now();
  auto reservation = limiter.reserve(cost, now);
  limiter.cancel(reservation);
  return reservation.wait_after(now);
}

struct Fixture {
  llmretry::redis::Connection connection{redis_fixture::unique_options()};
  llmretry::testing::FakeSleep sleep;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();

  /// True when `wait` is `expected` give or take the time the test has taken so far (the server's clock
  /// runs: a wait is shorter by the time since the reservation before it, and longer by at most the round
  /// trip), plus a millisecond of rounding. The bound grows with the test's own time, so that a slow run
  /// (sanitizers, a loaded machine) is not mistaken for a wrong wait.
  [[nodiscard]] bool about(milliseconds wait, milliseconds expected) const {
    const auto taken = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - started) + 1ms;
    return wait >= expected - taken && wait <= expected + taken;
  }
};

}  // namespace

TEST_CASE("redis pacing: call_with_retry waits for the shared limit before each call", "[redis][pacing]") {
  Fixture f;
  RateLimiter limiter(f.connection, "paced", only(Dimension::requests_per_minute, 360, 1));  // one every 10 s
  // The third call waits 20 s, the default policy's whole wait budget: give it room, so that a wait a
  // millisecond longer (the server's clock, the round trip) is not refused with wait_budget.
  RetryPolicy policy;
  policy.max_total_wait = 1min;
  int calls = 0;
  for (int i = 0; i < 2; ++i) {
    const auto waited_before = f.sleep.total();
    CHECK(call_with_retry([&] { return ++calls; }, policy, limiter.pace(Cost{}), f.sleep) == i + 1);
    INFO("call " << i << " waited " << (f.sleep.total() - waited_before).count() << " ms");
    CHECK(f.about(f.sleep.total() - waited_before, 10s * i));  // each reserved after the one before
  }
  // Among other guards (guards() holds the temporary guard for the call).
  llmretry::RetryBudget budget;
  const auto waited_before = f.sleep.total();
  CHECK(call_with_retry([&] { return ++calls; }, policy, llmretry::guards(budget.guard(), limiter.pace(Cost{})),
                        f.sleep) == 3);
  CHECK(f.about(f.sleep.total() - waited_before, 20s));
}

TEST_CASE("redis pacing: a wait beyond max_wait or the deadline is refused and holds nothing", "[redis][pacing]") {
  Fixture f;
  RateLimiter limiter(f.connection, "refused", only(Dimension::requests_per_minute, 360, 1));
  int calls = 0;
  const auto call = [&] { return ++calls; };
  REQUIRE(call_with_retry(call, RetryPolicy{}, limiter.pace(Cost{}), f.sleep) == 1);
  SECTION("max_wait") {
    try {
      (void)call_with_retry(call, RetryPolicy{}, limiter.pace(Cost{}, 5s), f.sleep);
      FAIL("the call was admitted");
    } catch (const AttemptRefused& refused) {
      CHECK(refused.reason() == StopReason::no_capacity);
      CHECK(refused.failure().kind == llmretry::FailureKind::rate_limited);
      REQUIRE(refused.failure().provider_wait);
      CHECK(f.about(*refused.failure().provider_wait, 10s));
    }
  }
  SECTION("deadline") {
    llmretry::CallOptions options;
    options.deadline = std::chrono::steady_clock::now() + 3s;
    try {
      (void)call_with_retry(call, RetryPolicy{}, limiter.pace(Cost{}, 60s), f.sleep, options);
      FAIL("the call was admitted");
    } catch (const AttemptRefused& refused) {
      CHECK(refused.reason() == StopReason::deadline);
    }
  }
  CHECK(calls == 1);
  CHECK(f.sleep.total() == 0ms);
  CHECK(f.about(wait_for(limiter, Cost{}), 10s));  // the refused call left no trace
}

TEST_CASE("redis pacing: the ticket settles with the answer's usage, or gives back what was not used",
          "[redis][pacing]") {
  Fixture f;
  // 10 tokens a second, 10,000 at once.
  RateLimiter limiter(f.connection, "settle", only(Dimension::tokens_per_minute, 36000, 10000));
  const Cost estimate = tokens(2000, 8000);  // prompt + max_tokens
  SECTION("a success is charged what the answer used") {
    const auto answer = call_with_retry([] { return Answer{"1000"}; }, RetryPolicy{},
                                        limiter.pace(estimate, std::nullopt, output_tokens), f.sleep);
    CHECK(answer.body == "1000");
    CHECK(wait_for(limiter, tokens(9000)) == 0ms);  // 1,000 used of 10,000
    CHECK(f.about(wait_for(limiter, tokens(10000)), 100s));
  }
  SECTION("a usage reader that throws: the success is charged the estimate") {
    const llmretry::UsageReader throwing = [](std::string_view /*body*/) -> std::optional<Cost> {
      throw std::runtime_error("bad usage");
    };
    const auto answer = call_with_retry([] { return Answer{"1000"}; }, RetryPolicy{},
                                        limiter.pace(estimate, std::nullopt, throwing), f.sleep);
    CHECK(answer.body == "1000");
    CHECK(f.about(wait_for(limiter, tokens(1000)), 100s));  // 10,000 charged, not given back
  }
  SECTION("without a usage reader the estimate stays charged") {
    (void)call_with_retry([] { return Answer{"1000"}; }, RetryPolicy{}, limiter.pace(estimate), f.sleep);
    CHECK(f.about(wait_for(limiter, tokens(1000)), 100s));
  }
  SECTION("an attempt admitted but never sent gives everything back") {
    auto pacing = limiter.pace(estimate);
    {
      auto admission = pacing.admit(llmretry::Attempt{});
      REQUIRE(admission.admitted());
    }
    CHECK(wait_for(limiter, tokens(10000)) == 0ms);
  }
  SECTION("a 429 keeps the request, not the tokens") {
    RateLimiter both(f.connection, "both", [] {
      Limits limits = only(Dimension::tokens_per_minute, 36000, 10000);
      limits[Dimension::requests_per_minute] = Limit{360, 1h, 2};
      return limits;
    }());
    int calls = 0;
    const auto answer = call_with_retry(
        [&] {
          if (++calls == 1)
            throw llmretry::ProviderError(
                "429", llmretry::Failure::of(llmretry::FailureKind::rate_limited, llmretry::Sent::refused));
          return Answer{"0"};
        },
        RetryPolicy{}, both.pace(estimate, std::nullopt, output_tokens), f.sleep);
    CHECK(calls == 2);
    CHECK(wait_for(both, Cost{0, 10000, 0}) == 0ms);  // no tokens kept by either attempt
    CHECK(f.about(wait_for(both, Cost{}), 10s));      // both requests kept: the burst of 2 is used
  }
}

TEST_CASE("redis pacing: Redis gone, attempts are refused (fail closed) and nothing throws", "[redis][pacing]") {
  llmretry::testing::RedisServer server;
  auto options = server.connection_options();
  options.connect_timeout = options.command_timeout = 300ms;
  llmretry::redis::Connection connection(options);
  RateLimiter limiter(connection, "gone", only(Dimension::tokens_per_minute, 36000));
  llmretry::testing::FakeSleep sleep;
  int calls = 0;
  const auto call = [&] {
    ++calls;
    return Answer{"10"};
  };
  for (int i = 0; i < 3; ++i)
    (void)call_with_retry(call, RetryPolicy{}, limiter.pace(tokens(10), std::nullopt, output_tokens), sleep);

  auto pacing = limiter.pace(tokens(10), std::nullopt, output_tokens);
  std::optional<llmretry::Admission<RateLimiter::Pacing::Ticket>> admitted;
  admitted.emplace(pacing.admit(llmretry::Attempt{}));
  REQUIRE(admitted->admitted());
  server.kill();

  SECTION("admit refuses") {
    for (int i = 0; i < 3; ++i) {
      auto refused_pacing = limiter.pace(tokens(10));
      try {
        (void)call_with_retry(call, RetryPolicy{}, refused_pacing, sleep);
        FAIL("the call was admitted");
      } catch (const AttemptRefused& refused) {
        CHECK(refused.reason() == StopReason::pacing_unavailable);
        CHECK(refused.failure().sent == llmretry::Sent::not_sent);
        CHECK(refused.failure().kind == llmretry::FailureKind::connection);
      }
      REQUIRE(refused_pacing.error());
      CHECK(refused_pacing.error()->operation() == "rate limiter reserve");
    }
    CHECK(calls == 3);
  }
  SECTION("a call that returns a result gets a refused result, not an exception") {
    const auto result = call_with_retry([&]() -> llmretry::Result<int> { return ++calls; }, RetryPolicy{},
                                        limiter.pace(tokens(10)), sleep);
    REQUIRE_FALSE(result.has_value());
    CHECK(result.error().failure.kind == llmretry::FailureKind::connection);
    CHECK_THAT(result.error().message, llmretry_catch::contains("refused"));
    CHECK(calls == 3);
  }
  SECTION("a ticket that cannot settle keeps the error and does not throw") {
    CHECK_NOTHROW(admitted->ticket().succeeded(Answer{"5"}));
    REQUIRE(pacing.error());
    CHECK(pacing.error()->operation() == "rate limiter settle");
  }
  SECTION("a ticket that cannot give back is destroyed quietly") {
    static_assert(std::is_nothrow_destructible_v<RateLimiter::Pacing::Ticket>);
    admitted.reset();
    REQUIRE(pacing.error());
    CHECK(pacing.error()->operation() == "rate limiter cancel");
  }
}

TEST_CASE("redis pacing: a hedge is admitted only while capacity is there, and reserves nothing otherwise",
          "[redis][pacing][hedging]") {
  Fixture f;
  RateLimiter limiter(f.connection, "hedged", only(Dimension::requests_per_minute, 360, 2));  // 2 at once
  auto pacing = limiter.pace(Cost{});
  llmretry::Attempt hedge;
  hedge.hedge = true;
  {
    auto first = pacing.admit(llmretry::Attempt{});
    REQUIRE(first.admitted());
    auto admitted = pacing.admit(hedge);  // the second of the burst: there now
    REQUIRE(admitted.admitted());
    CHECK(admitted.wait() == 0ms);
    admitted.ticket().succeeded();
    first.ticket().succeeded();
  }
  const auto refused = pacing.admit(hedge);  // none left now: refused, not queued
  CHECK_FALSE(refused.admitted());
  CHECK(f.about(wait_for(limiter, Cost{}), 10s));  // the next one every 10 s: the refusal reserved nothing
}
