// redis::RateLimiter against a real redis-server: the semantics of llmretry::RateLimiter (burst, spacing,
// every dimension at once, too_large, too_long, cancel, settle) on the server's clock, shared by name.
// Limits are per hour (one unit every few seconds) so that the time the test itself takes stays small
// beside the waits it checks.
#include <llmretry/admission/deployment.hpp>
#include <llmretry/admission/pressure.hpp>
#include <llmretry/redis/rate_limiter.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "helpers.hpp"
#include "llmretry_catch.hpp"
#include "redis_fixture.hpp"

using namespace std::chrono_literals;
using llmretry::Cost;
using llmretry::Dimension;
using llmretry::Limit;
using llmretry::Limits;
using llmretry::ReservationStatus;
using llmretry_test::tokens;
using std::chrono::milliseconds;

namespace {

using time_point = llmretry::redis::RateLimiter::time_point;
const time_point t0 = time_point{} + 1000s;

/// Returns `count` units per hour, `burst` of them at once.
Limit per_hour(std::int64_t count, std::optional<std::int64_t> burst = {}) { return {count, 1h, burst}; }

Limits only(Dimension dimension, const Limit& limit) {
  Limits limits;
  limits[dimension] = limit;
  return limits;
}

/// True when `wait` is `expected`, give or take the time the test takes (the server's clock runs).
bool about(milliseconds wait, milliseconds expected) { return wait > expected - 500ms && wait < expected + 500ms; }

/// A connection to the runner's server with keys no other test uses.
struct Fixture {
  llmretry::redis::Connection connection{redis_fixture::unique_options()};
};

}  // namespace

TEST_CASE("redis rate limiter: as fast as the burst allows, then evenly spaced", "[redis][rate_limiter]") {
  Fixture f;
  llmretry::redis::RateLimiter limiter(f.connection, "burst", only(Dimension::requests_per_minute, per_hour(360, 10)));
  for (int i = 0; i < 10; ++i) {
    const auto r = limiter.reserve(Cost{}, t0);
    REQUIRE(r.granted());
    CHECK(r.open());
    CHECK(r.wait_after(t0) == 0ms);
    CHECK_FALSE(r.limited_by());
  }
  for (int i = 1; i <= 5; ++i) {
    const auto r = limiter.reserve(Cost{}, t0);
    INFO(i << ": " << r.wait_after(t0).count() << " ms");
    CHECK(about(r.wait_after(t0), 10s * i));  // one every 10 s
    CHECK(r.limited_by() == Dimension::requests_per_minute);
  }
}

TEST_CASE("redis rate limiter: every dimension at once, waiting for the slowest", "[redis][rate_limiter]") {
  Fixture f;
  Limits limits;
  limits[Dimension::requests_per_minute] = per_hour(3600);  // one a second
  limits[Dimension::tokens_per_minute] = per_hour(36000);   // 10 tokens a second
  llmretry::redis::RateLimiter limiter(f.connection, "dimensions", limits);
  CHECK(limiter.reserve(tokens(36000), t0).wait_after(t0) == 0ms);  // the whole token bucket
  const auto second = limiter.reserve(tokens(100), t0);
  INFO(second.wait_after(t0).count() << " ms");
  CHECK(about(second.wait_after(t0), 10s));  // 100 tokens refill in 10 s; requests had room
  CHECK(second.limited_by() == Dimension::tokens_per_minute);
}

TEST_CASE("redis rate limiter: a cost above a limit is refused without the server and holds nothing",
          "[redis][rate_limiter]") {
  Fixture f;
  llmretry::redis::RateLimiter limiter(f.connection, "large", only(Dimension::tokens_per_minute, per_hour(36000)));
  const auto huge = limiter.reserve(tokens(30000, 7000), t0);
  CHECK(huge.status() == ReservationStatus::too_large);
  CHECK(huge.limited_by() == Dimension::tokens_per_minute);
  CHECK_FALSE(huge.open());
  CHECK(limiter.reserve(tokens(36000), t0).wait_after(t0) == 0ms);  // nothing was taken
}

TEST_CASE("redis rate limiter: a cost above the burst waits for a full bucket", "[redis][rate_limiter]") {
  Fixture f;
  llmretry::redis::RateLimiter limiter(f.connection, "above burst",
                                       only(Dimension::tokens_per_minute, per_hour(36000, 1000)));
  CHECK(limiter.reserve(tokens(3000), t0).wait_after(t0) == 0ms);  // full: it goes, and owes 200 s more
  const auto next = limiter.reserve(tokens(1000), t0);
  INFO(next.wait_after(t0).count() << " ms");
  CHECK(about(next.wait_after(t0), 300s));
}

TEST_CASE("redis rate limiter: a wait longer than allowed is refused and holds nothing", "[redis][rate_limiter]") {
  Fixture f;
  llmretry::redis::RateLimiter limiter(f.connection, "long", only(Dimension::requests_per_minute, per_hour(360, 1)));
  REQUIRE(limiter.reserve(Cost{}, t0).granted());
  const auto late = limiter.reserve(Cost{}, t0, 5s);
  CHECK(late.status() == ReservationStatus::too_long);
  CHECK(about(late.wait_after(t0), 10s));
  CHECK_FALSE(late.open());
  const auto next = limiter.reserve(Cost{}, t0, 11s);  // the refused one left no trace
  CHECK(next.granted());
  CHECK(about(next.wait_after(t0), 10s));
}

TEST_CASE("redis rate limiter: cancel gives the capacity back; settle charges the actual usage",
          "[redis][rate_limiter]") {
  Fixture f;
  // 10 tokens a second, 10,000 at once.
  llmretry::redis::RateLimiter limiter(f.connection, "settle",
                                       only(Dimension::tokens_per_minute, per_hour(36000, 10000)));
  SECTION("cancel") {
    auto r = limiter.reserve(tokens(10000), t0);
    limiter.cancel(r);
    CHECK_FALSE(r.open());
    CHECK(limiter.reserve(tokens(10000), t0).wait_after(t0) == 0ms);
  }
  SECTION("settle refunds what was not used") {
    auto r = limiter.reserve(tokens(2000, 8000), t0);  // prompt + max_tokens
    limiter.settle(r, tokens(2000, 1000), t0);         // the answer used 1,000 of its 8,000
    CHECK_FALSE(r.open());
    CHECK(limiter.reserve(tokens(7000), t0).wait_after(t0) == 0ms);
    CHECK(about(limiter.reserve(tokens(1000), t0).wait_after(t0), 100s));
  }
  SECTION("settle charges an overrun") {
    auto r = limiter.reserve(tokens(5000), t0);
    limiter.settle(r, tokens(15000), t0);
    CHECK(about(limiter.reserve(tokens(1000), t0).wait_after(t0), 600s));  // 5,000 beyond the burst, then 1,000
  }
  SECTION("a usage above the limit is charged as the limit") {
    auto r = limiter.reserve(tokens(5000), t0);
    limiter.settle(r, Cost{1, 18, std::numeric_limits<std::int64_t>::max()}, t0);
    // 36,000 charged (an hour), 10,000 of them the burst, then 1,000: not the report's billions of hours.
    CHECK(about(limiter.reserve(tokens(1000), t0).wait_after(t0), 2700s));
  }
  SECTION("no refund while a reservation waits to start: that capacity is promised") {
    auto first = limiter.reserve(tokens(10000), t0);
    const auto second = limiter.reserve(tokens(5000), t0);
    REQUIRE(about(second.wait_after(t0), 500s));
    limiter.settle(first, tokens(1000), t0);  // the second has not started: the 9,000 stay charged
    CHECK(about(limiter.reserve(tokens(1000), t0).wait_after(t0), 600s));
  }
  SECTION("a reservation is settled or cancelled once") {
    auto r = limiter.reserve(tokens(10000), t0);
    limiter.settle(r, tokens(10000), t0);
    limiter.cancel(r);
    limiter.settle(r, tokens(0), t0);
    CHECK(about(limiter.reserve(tokens(1000), t0).wait_after(t0), 100s));
  }
  SECTION("only a reservation that waits records its start") {
    const std::string key = f.connection.options().prefix + "limit:{settle}";
    const auto recorded = [&] { return f.connection.command("hexists", {"HEXISTS", key, "s1"}).integer() == 1; };
    REQUIRE(limiter.reserve(tokens(1000), t0).wait_after(t0) == 0ms);
    CHECK_FALSE(recorded());
    REQUIRE(about(limiter.reserve(tokens(10000), t0).wait_after(t0), 100s));
    CHECK(recorded());
  }
}

TEST_CASE("redis rate limiter: one name is one limit for every connection, whatever their clocks say",
          "[redis][rate_limiter]") {
  const auto options = redis_fixture::unique_options();
  llmretry::redis::Connection first_connection(options), second_connection(options);
  const Limits limits = only(Dimension::requests_per_minute, per_hour(360, 1));
  llmretry::redis::RateLimiter first(first_connection, "shared", limits);
  llmretry::redis::RateLimiter second(second_connection, "shared", limits);
  llmretry::redis::RateLimiter other(second_connection, "other", limits);
  CHECK(first.reserve(Cost{}, t0).wait_after(t0) == 0ms);
  const time_point an_hour_ahead = t0 + 1h;  // the second process's clock: the server's decides
  CHECK(about(second.reserve(Cost{}, an_hour_ahead).wait_after(an_hour_ahead), 10s));
  CHECK(about(first.reserve(Cost{}, t0).wait_after(t0), 20s));
  CHECK(other.reserve(Cost{}, t0).wait_after(t0) == 0ms);
}

TEST_CASE("redis rate limiter: the state expires once every limit is full again", "[redis][rate_limiter]") {
  Fixture f;
  llmretry::redis::RateLimiter limiter(f.connection, "idle",
                                       only(Dimension::requests_per_minute, Limit{10, 1s, std::nullopt}));
  REQUIRE(limiter.reserve(Cost{}, t0).granted());  // 100 ms to refill, then a period
  const std::string key = f.connection.options().prefix + "limit:{idle}";
  const auto ttl = f.connection.command("pttl", {"PTTL", key}).integer();
  CHECK(ttl > 0);
  CHECK(ttl <= 1100);
  std::this_thread::sleep_for(1300ms);
  CHECK(f.connection.command("exists", {"EXISTS", key}).integer() == 0);
  CHECK(limiter.reserve(Cost{}, t0).wait_after(t0) == 0ms);
}

TEST_CASE("redis rate limiter: limits that make no sense are refused as by the local limiter",
          "[redis][rate_limiter]") {
  Fixture f;
  CHECK_THROWS_WITH(
      llmretry::redis::RateLimiter(f.connection, "bad", only(Dimension::tokens_per_day, Limit{10, 24h, 11})),
      "Limits: tokens_per_day.burst must be in [1, limit]");
}

TEST_CASE("redis rate limiter: a lower class takes what is free beyond the share kept, else is held back",
          "[redis][rate_limiter][priority]") {
  Fixture f;
  llmretry::redis::RateLimiter limiter(f.connection, "priority",
                                       only(Dimension::requests_per_minute, per_hour(360, 10)));
  const llmretry::Precedence batch = llmretry::PriorityOptions{}.precedence(llmretry::Priority::batch);
  for (int i = 0; i < 5; ++i) {
    const auto r = limiter.reserve(Cost{}, t0, std::nullopt, batch);
    REQUIRE(r.granted());
    CHECK(r.wait_after(t0) == 0ms);
  }
  const auto held = limiter.reserve(Cost{}, t0, std::nullopt, batch);
  CHECK(held.status() == ReservationStatus::held_back);
  CHECK_FALSE(held.open());
  INFO(held.wait_after(t0).count() << " ms");
  CHECK(about(held.wait_after(t0), 10s));  // once one unit refilled
  CHECK(held.limited_by() == Dimension::requests_per_minute);
  for (int i = 0; i < 5; ++i) CHECK(limiter.reserve(Cost{}, t0).wait_after(t0) == 0ms);  // the half kept free
  CHECK(about(limiter.reserve(Cost{}, t0).wait_after(t0), 10s));
  const auto stats = limiter.stats();
  CHECK(stats.held_back == 1);
  CHECK(stats.granted == 11);
}

TEST_CASE("redis rate limiter: a tenant past what it is owed is held back, another one's call is not queued behind",
          "[redis][rate_limiter][tenant]") {
  Fixture f;
  llmretry::redis::RateLimiter limiter(f.connection, "tenants",
                                       only(Dimension::requests_per_minute, per_hour(360, 10)));
  llmretry::Precedence a;
  a.tenant = "tenant-a";
  int granted = 0;
  for (int i = 0; i < 30; ++i) granted += limiter.reserve(Cost{}, t0, std::nullopt, a).granted() ? 1 : 0;
  CHECK(granted == 11);  // up to one burst ahead of what it is owed, then held back
  llmretry::Precedence b;
  b.tenant = "tenant-b";
  const auto r = limiter.reserve(Cost{}, t0, std::nullopt, b);
  REQUIRE(r.granted());
  INFO(r.wait_after(t0).count() << " ms");
  CHECK(about(r.wait_after(t0), 20s));  // behind a's one in line, not nineteen more
  CHECK(limiter.stats().held_back == 19);
}

TEST_CASE("redis rate limiter: a reservation's snapshot tells the fleet's load, and pressure() reads it",
          "[redis][rate_limiter]") {
  const auto options = redis_fixture::unique_options();
  llmretry::redis::Connection first_connection(options), second_connection(options);
  const Limits limits = only(Dimension::requests_per_minute, per_hour(360, 10));  // a unit every 10 s, 10 at once
  llmretry::redis::RateLimiter other_process(first_connection, "snapshot", limits);
  auto shared = std::make_shared<llmretry::redis::RateLimiter>(second_connection, "snapshot", limits);
  CHECK_FALSE(shared->snapshot());
  llmretry::DeploymentOptions deployment_options;
  deployment_options.limits = limits;
  deployment_options.shared = shared;
  llmretry::Deployment deployment(deployment_options);
  CHECK_FALSE(deployment.shared_snapshot());
  CHECK(llmretry::pressure(deployment) == llmretry::Pressure::normal);

  // Another process takes 8 of the 10: this one's reservations see what is left, then the line they make.
  for (int i = 0; i < 8; ++i) REQUIRE(other_process.reserve(Cost{}, t0).granted());
  CHECK(llmretry::pressure(deployment) == llmretry::Pressure::normal);  // nothing seen yet: its own limiter
  auto first = deployment.reserve(Cost{}, deployment.now());
  REQUIRE(first.granted());
  REQUIRE(deployment.shared_snapshot());
  CHECK(deployment.shared_snapshot()->headroom > 0.09);  // one of 10 left, and what refilled since (0.01 a second)
  CHECK(deployment.shared_snapshot()->headroom < 0.15);
  CHECK(deployment.shared_snapshot()->queue_wait == 0ms);
  CHECK(deployment.shared_snapshot()->refill == std::chrono::microseconds{100s});
  CHECK(llmretry::pressure(deployment) == llmretry::Pressure::light);  // under a quarter of the burst free

  auto second = deployment.reserve(Cost{}, deployment.now());
  REQUIRE(second.granted());
  CHECK(deployment.shared_snapshot()->headroom < 0.01);
  CHECK(about(deployment.shared_snapshot()->queue_wait, 10s));  // a new call's wait for the next unit
  auto third = deployment.reserve(Cost{}, deployment.now());
  REQUIRE(third.granted());
  const llmretry::SharedSnapshot seen = *deployment.shared_snapshot();
  CHECK(about(seen.queue_wait, 20s));
  CHECK(llmretry::pressure(deployment) == llmretry::Pressure::high);  // a new call waits 10 s or more
  // Carried forward: the wait shortens and the burst refills with the time passed.
  const llmretry::SharedSnapshot later = seen.at(seen.as_of + 5s);
  CHECK(about(later.queue_wait, 15s));
  CHECK(std::abs(later.headroom - (seen.headroom + 0.05)) < 1e-9);
  CHECK(seen.at(seen.as_of + 1h).headroom == 1.0);
  CHECK(seen.at(seen.as_of + 1h).queue_wait == 0ms);
  CHECK(seen.at(seen.as_of - 1s).queue_wait == seen.queue_wait);  // not carried backwards
  for (auto* reservation : {&first, &second, &third}) shared->cancel(*reservation);
}
