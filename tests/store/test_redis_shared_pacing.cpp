// A Deployment paced through a redis::RateLimiter (DeploymentOptions::shared), against a real redis-server:
// what one process learns, all learn; a 429 seen by one pauses all; the server failing closes or opens as
// the deployment says; a flushed server starts afresh. Each "process" is a Deployment on its own connection.
// Waits are on the server's clock, checked give or take the time the test takes.
#include <llmretry/admission/deployment.hpp>
#include <llmretry/redis/rate_limiter.hpp>
#include <llmretry/retry.hpp>
#include <llmretry/testing/fake_sleep.hpp>

#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "helpers.hpp"
#include "llmretry_catch.hpp"
#include "redis_fixture.hpp"

using namespace std::chrono_literals;
using llmretry::Cost;
using llmretry::Deployment;
using llmretry::DeploymentOptions;
using llmretry::Dimension;
using llmretry::Failure;
using llmretry::Limit;
using llmretry::Limits;
using llmretry::RateLimits;
using llmretry::RateLimitWindow;
using llmretry::ReservationStatus;
using llmretry::SharedFailure;
using llmretry::StopReason;
using std::chrono::milliseconds;

namespace {

/// A 429 (refused without work), with the provider's wait when it gave one.
Failure too_many_requests(std::optional<milliseconds> wait = std::nullopt) {
  Failure failure = Failure::of(llmretry::FailureKind::rate_limited, llmretry::Sent::refused);
  failure.provider_wait = wait;
  return failure;
}

/// True when `wait` is `expected`, give or take the time the test takes (the server's clock runs).
bool about(milliseconds wait, milliseconds expected) { return wait > expected - 500ms && wait < expected + 500ms; }

/// One process of the fleet: its connection, and a deployment paced through the limiter `name` there.
struct Process {
  Process(const llmretry::redis::Options& options, const std::string& name, const Limits& limits,
          llmretry::Learning learning = llmretry::Learning::from_headers,
          SharedFailure when_shared_fails = SharedFailure::fail_closed)
      : connection(options), deployment([&] {
          DeploymentOptions deployment_options;
          deployment_options.name = name;
          deployment_options.limits = limits;
          deployment_options.learning = learning;
          deployment_options.shared = std::make_shared<llmretry::redis::RateLimiter>(connection, name, limits);
          deployment_options.when_shared_fails = when_shared_fails;
          return deployment_options;
        }()) {}

  /// Returns the wait of a reservation of `cost` made now, given back at once.
  milliseconds wait(const Cost& cost = Cost{}) {
    const auto now = deployment.now();
    llmretry::Reservation reservation = deployment.reserve(cost, now);
    REQUIRE(reservation.granted());
    CHECK(reservation.shared());
    const milliseconds waited = reservation.wait_after(now);
    deployment.cancel(reservation);
    return waited;
  }

  llmretry::redis::Connection connection;
  Deployment deployment;
};

Limits per_minute(Dimension dimension, std::int64_t limit, std::int64_t burst) {
  Limits limits;
  limits[dimension] = Limit::per_minute(limit, burst);
  return limits;
}

}  // namespace

TEST_CASE("shared pacing: a limit one process learns from the headers paces every process", "[redis][shared_pacing]") {
  const auto options = redis_fixture::unique_options();
  Process a(options, "learn", Limits{});
  Process b(options, "learn", Limits{});
  CHECK(b.wait() == 0ms);  // nothing known yet: nothing paced

  auto reservation = a.deployment.reserve(Cost{}, a.deployment.now());
  REQUIRE(reservation.granted());
  RateLimits reported;
  reported.requests = RateLimitWindow{60, 0, std::nullopt};  // 60 a minute, none left
  a.deployment.succeeded(reservation, std::nullopt, &reported, a.deployment.now());

  // b heard nothing from the provider, yet waits: none free when the provider answered a (1 s to refill
  // one), and a's request charged on top (as the deployment's own limiter does: 1 s more).
  auto first = b.deployment.reserve(Cost{}, b.deployment.now());
  REQUIRE(first.granted());
  CHECK(about(first.wait_after(b.deployment.now()), 2s));
  // The limit itself was learned, not only the level: the next request is spaced by it.
  auto second = b.deployment.reserve(Cost{}, b.deployment.now());
  CHECK(about(second.wait_after(b.deployment.now()), 3s));
  b.deployment.cancel(second);
  b.deployment.cancel(first);
}

TEST_CASE("shared pacing: a 429 one process is answered pauses every process", "[redis][shared_pacing]") {
  const auto options = redis_fixture::unique_options();
  const Limits limits = per_minute(Dimension::requests_per_minute, 6000, 100);  // room for all
  Process a(options, "pause", limits);
  Process b(options, "pause", limits);
  CHECK(b.wait() == 0ms);

  auto reservation = a.deployment.reserve(Cost{}, a.deployment.now());
  REQUIRE(reservation.granted());
  a.deployment.failed(reservation, too_many_requests(2s), a.deployment.now());
  // b waits for the pause (2 s) and the set-back by the same wait (2 s more), less the burst's 1 s.
  CHECK(about(b.wait(), 3s));
}

TEST_CASE("shared pacing: an adaptive slow-down after a 429 slows every process", "[redis][shared_pacing]") {
  const auto options = redis_fixture::unique_options();
  const Limits limits = per_minute(Dimension::requests_per_minute, 6, 1);  // one every 10 s
  Process a(options, "slow", limits, llmretry::Learning::adaptive);
  Process b(options, "slow", limits, llmretry::Learning::adaptive);

  auto reservation = a.deployment.reserve(Cost{}, a.deployment.now());  // 10 s taken
  REQUIRE(reservation.granted());
  a.deployment.failed(reservation, too_many_requests(), a.deployment.now());  // no headers: 4 a minute now
  // The request stays charged at the slower rate (15 s), and b's next one waits for it.
  CHECK(about(b.wait(), 15s));
}

TEST_CASE("shared pacing: two processes share one limit, each reservation counted once", "[redis][shared_pacing]") {
  const auto options = redis_fixture::unique_options();
  const Limits limits = per_minute(Dimension::tokens_per_minute, 6000, 1000);  // 100 tokens a second
  Process a(options, "settle", limits);
  Process b(options, "settle", limits);
  auto held = a.deployment.reserve(llmretry_test::tokens(200, 800), a.deployment.now());
  REQUIRE(held.granted());
  a.deployment.succeeded(held, llmretry_test::tokens(200, 300), nullptr, a.deployment.now());  // 500 used
  CHECK(b.wait(llmretry_test::tokens(500)) == 0ms);  // the 500 not used came back for b
  CHECK(about(b.wait(llmretry_test::tokens(600)), 1s));
}

TEST_CASE("shared pacing: the server out of reach fails closed or open, as the deployment says",
          "[redis][shared_pacing]") {
  llmretry::testing::RedisServer server;
  auto options = server.connection_options();
  options.connect_timeout = options.command_timeout = 300ms;
  const Limits limits = per_minute(Dimension::requests_per_minute, 60, 1);  // one a second

  SECTION("fail closed: the attempt is refused, nothing is sent, nothing throws") {
    Process a(options, "down", limits);
    server.kill();
    const auto reservation = a.deployment.reserve(Cost{}, a.deployment.now());
    CHECK(reservation.status() == ReservationStatus::unavailable);
    CHECK_FALSE(reservation.open());
    int calls = 0;
    llmretry::testing::FakeSleep sleep;
    try {
      (void)llmretry::call_with_retry([&] { return ++calls; }, llmretry::RetryPolicy{}, a.deployment.pace(Cost{}),
                                      sleep);
      FAIL("the call was admitted");
    } catch (const llmretry::AttemptRefused& refused) {
      CHECK(refused.reason() == StopReason::pacing_unavailable);
      CHECK(refused.failure().sent == llmretry::Sent::not_sent);
    }
    CHECK(calls == 0);
    CHECK(a.deployment.shared_failures() == 2);
  }
  SECTION("fail open: paced by this process alone at the configured limits, then shared again") {
    Process a(options, "down", limits, llmretry::Learning::from_headers, SharedFailure::fail_open);
    server.kill();
    const auto now = a.deployment.now();  // one instant for both: the wait is exact whatever the reply time
    auto first = a.deployment.reserve(Cost{}, now);
    REQUIRE(first.granted());
    CHECK_FALSE(first.shared());
    auto second = a.deployment.reserve(Cost{}, now);
    CHECK(second.wait_after(now) == 1s);  // this process's limiter, at one a second
    a.deployment.succeeded(first, std::nullopt, nullptr, now);
    a.deployment.cancel(second);
    CHECK(a.deployment.shared_failures() == 2);

    server.restart();
    auto again = a.deployment.reserve(Cost{}, a.deployment.now());
    REQUIRE(again.granted());
    CHECK(again.shared());
    a.deployment.cancel(again);
  }
  SECTION("a ticket whose server went away ends quietly") {
    Process a(options, "down", limits);
    std::optional<Deployment::Pacing> pacing{a.deployment.pace(Cost{})};
    auto admitted = pacing->admit(llmretry::Attempt{});
    REQUIRE(admitted.admitted());
    server.kill();
    CHECK_NOTHROW(admitted.ticket().failed(too_many_requests(1s)));  // a 429 to tell the fleet: it cannot
    CHECK(a.deployment.shared_failures() == 1);
  }
}

TEST_CASE("shared pacing: a flushed server starts afresh, nothing hangs", "[redis][shared_pacing]") {
  llmretry::testing::RedisServer server;  // its own: everything on it is flushed
  Process a(server.connection_options(), "flushed", per_minute(Dimension::requests_per_minute, 60, 1));
  auto first = a.deployment.reserve(Cost{}, a.deployment.now());
  CHECK(about(a.wait(), 1s));
  (void)a.connection.command("flush", {"FLUSHALL"});                 // the state is gone
  (void)a.connection.command("flush scripts", {"SCRIPT", "FLUSH"});  // and the script loaded
  CHECK(a.wait() == 0ms);
  a.deployment.succeeded(first, Cost{2, 0, 0}, nullptr, a.deployment.now());  // settled on the new state
  CHECK(a.deployment.shared_failures() == 0);
  CHECK(about(a.wait(), 1s));  // the second request the settle charged
}

TEST_CASE("shared pacing: a usage out of range from the provider is charged as the limit, never wraps",
          "[redis][shared_pacing]") {
  const auto options = redis_fixture::unique_options();
  Limits limits;
  limits[Dimension::tokens_per_day] = Limit{1000, std::chrono::hours{24}, std::nullopt};
  Process a(options, "huge", limits);
  auto reservation = a.deployment.reserve(llmretry_test::tokens(10), a.deployment.now());
  REQUIRE(reservation.granted());
  const Cost huge{1, std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::max()};
  a.deployment.succeeded(reservation, huge, nullptr, a.deployment.now());
  CHECK(a.deployment.shared_failures() == 0);
  // The day's 1,000 tokens charged (not the report, nor a credit wrapped to the past): the next call of 10 waits
  // for its 10 to refill, 864 s.
  const auto next = a.deployment.reserve(llmretry_test::tokens(10), a.deployment.now(), std::chrono::hours{24});
  CHECK(next.granted());
  CHECK(about(next.wait_after(a.deployment.now()), 864s));
}

TEST_CASE("shared pacing: limits and resets out of range in the headers are bounded, never wrap",
          "[redis][shared_pacing]") {
  const auto options = redis_fixture::unique_options();
  Process a(options, "huge headers", Limits{});
  auto reservation = a.deployment.reserve(Cost{}, a.deployment.now());
  RateLimits reported;  // as parse_rate_limits saturates them
  reported.requests =
      RateLimitWindow{std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::max(), std::nullopt};
  reported.tokens = RateLimitWindow{1'000'000, std::nullopt, milliseconds::max()};  // full again in a day, at most
  a.deployment.succeeded(reservation, std::nullopt, &reported, a.deployment.now());
  CHECK(a.deployment.shared_failures() == 0);
  CHECK(a.wait() == 0ms);  // a huge limit with as much left: no wait, and not refused as too large
  const auto tokens = a.deployment.reserve(llmretry_test::tokens(10), a.deployment.now(), std::chrono::hours{1});
  CHECK(tokens.status() == ReservationStatus::too_long);  // the reset is a day away, not wrapped to the past
}

TEST_CASE("shared pacing: the counters are every process's", "[redis][shared_pacing]") {
  const auto options = redis_fixture::unique_options();
  const Limits limits = per_minute(Dimension::requests_per_minute, 60, 1);  // one a second
  Process a(options, "counted", limits);
  Process b(options, "counted", limits);
  auto first = a.deployment.reserve(llmretry_test::tokens(100, 50), a.deployment.now());
  auto second = b.deployment.reserve(llmretry_test::tokens(10), b.deployment.now());
  REQUIRE(first.granted());
  REQUIRE(second.granted());
  const auto refused = b.deployment.reserve(Cost{}, b.deployment.now(), 100ms);  // 2 s away: too long
  CHECK(refused.status() == ReservationStatus::too_long);
  a.deployment.succeeded(first, llmretry_test::tokens(100, 20), nullptr, a.deployment.now());  // 30 not used
  b.deployment.cancel(second);
  const llmretry::RateLimiterStats stats = a.deployment.options().shared->stats();
  CHECK(stats.granted == 2);
  CHECK(stats.refused == 1);
  CHECK(stats.tokens_reserved == 160);
  CHECK(stats.tokens_used == 120);
  CHECK(stats.tokens_released == 10);
}
