// Priority classes in admission: a lower class takes only what is free now beyond the share kept for the
// classes above, is held back holding nothing otherwise, and reserves as an interactive call once held back
// PriorityOptions::longest_hold.
#include <llmretry/admission/priority.hpp>

#include <llmretry/admission/deployment.hpp>
#include <llmretry/admission/rate_limiter.hpp>
#include <llmretry/engine.hpp>
#include <llmretry/retry.hpp>
#include <llmretry/testing.hpp>

#include <chrono>
#include <optional>
#include <stdexcept>

#include "helpers.hpp"
#include "llmretry_catch.hpp"

using namespace llmretry;
using namespace std::chrono_literals;
using llmretry::testing::FakeSleep;
using llmretry::testing::ManualClock;
using llmretry_test::no_jitter;
using std::chrono::milliseconds;

namespace {

using time_point = RateLimiter::time_point;
const time_point t0 = time_point{} + 1000s;
const Precedence batch = PriorityOptions{}.precedence(Priority::batch);  // leaves half of each burst

/// 600 requests a minute, 10 at once: one every 100 ms.
Limits ten_at_once() {
  Limits limits;
  limits[Dimension::requests_per_minute] = Limit::per_minute(600, 10);
  return limits;
}

}  // namespace

TEST_CASE("A lower class takes what is free now beyond the share kept for the classes above", "[priority]") {
  RateLimiter limiter(ten_at_once());
  for (int i = 0; i < 5; ++i) {
    const Reservation r = limiter.reserve(Cost{}, t0, std::nullopt, batch);
    REQUIRE(r.granted());
    CHECK(r.start() == t0);
  }
  const Reservation held = limiter.reserve(Cost{}, t0, std::nullopt, batch);
  CHECK(held.status() == ReservationStatus::held_back);
  CHECK_FALSE(held.open());
  CHECK(held.start() == t0 + 100ms);  // once one unit has refilled
  CHECK(held.limited_by() == Dimension::requests_per_minute);
  CHECK(limiter.stats().held_back == 1);
  // The half kept free is the interactive calls': five start at once, the sixth in line.
  for (int i = 0; i < 5; ++i) CHECK(limiter.reserve(Cost{}, t0).start() == t0);
  CHECK(limiter.reserve(Cost{}, t0).start() == t0 + 100ms);
  // Asking again when the held-back one said finds nothing: the interactive calls took it. Eleven units
  // taken by t0 refill by t0 + 1.1 s; half the burst (500 ms) beyond one unit is free from t0 + 700 ms.
  const Reservation again = limiter.reserve(Cost{}, t0 + 100ms, std::nullopt, batch);
  CHECK(again.status() == ReservationStatus::held_back);
  CHECK(again.start() == t0 + 700ms);
  CHECK(limiter.reserve(Cost{}, t0 + 700ms, std::nullopt, batch).start() == t0 + 700ms);
}

TEST_CASE("A held-back reservation holds nothing, and one granted to a lower class starts now", "[priority]") {
  RateLimiter limiter(ten_at_once());
  for (int i = 0; i < 5; ++i) (void)limiter.reserve(Cost{}, t0, std::nullopt, batch);
  for (int i = 0; i < 20; ++i) CHECK_FALSE(limiter.reserve(Cost{}, t0, std::nullopt, batch).granted());
  CHECK(limiter.queue_wait(t0) == 0ms);                                          // the twenty took nothing
  const Precedence standard = PriorityOptions{}.precedence(Priority::standard);  // leaves a quarter
  CHECK(limiter.reserve(Cost{}, t0, std::nullopt, standard).start() == t0);
  CHECK(limiter.reserve(Cost{}, t0, std::nullopt, standard).start() == t0);
  CHECK(limiter.reserve(Cost{}, t0, std::nullopt, standard).status() == ReservationStatus::held_back);
}

TEST_CASE("A cost above what the burst leaves a lower class waits for a full bucket", "[priority]") {
  Limits limits;
  limits[Dimension::tokens_per_minute] = Limit::per_minute(60'000, 1'000);  // 1,000 tokens a second
  RateLimiter limiter(limits);
  CHECK(limiter.reserve(Cost{1, 10, 0}, t0).granted());
  const Reservation held = limiter.reserve(Cost{1, 800, 0}, t0, std::nullopt, batch);  // more than half
  CHECK(held.status() == ReservationStatus::held_back);
  CHECK(held.start() == t0 + 10ms);  // once the ten tokens refilled
  CHECK(limiter.reserve(Cost{1, 800, 0}, t0 + 10ms, std::nullopt, batch).start() == t0 + 10ms);
}

TEST_CASE("A pause after a 429 holds a lower class back until it ends", "[priority]") {
  RateLimiter limiter(ten_at_once());
  limiter.pause_until(t0 + 2s);
  const Reservation held = limiter.reserve(Cost{}, t0, std::nullopt, batch);
  CHECK(held.status() == ReservationStatus::held_back);
  CHECK(held.start() >= t0 + 2s);
}

TEST_CASE("PriorityOptions refuses shares outside [0, 1) and batch leaving less than standard", "[priority]") {
  PriorityOptions options;
  options.standard_kept_free = 1.0;
  CHECK_THROWS_AS(options.validate(), std::invalid_argument);
  options = PriorityOptions{};
  options.batch_kept_free = 0.1;  // below standard's 0.25
  CHECK_THROWS_AS(options.validate(), std::invalid_argument);
  options = PriorityOptions{};
  options.longest_hold = -1ms;
  CHECK_THROWS_AS(options.validate(), std::invalid_argument);
  DeploymentOptions deployment;
  deployment.priorities.batch_kept_free = -0.5;
  CHECK_THROWS_AS(Deployment{deployment}, std::invalid_argument);
  CHECK(std::string(to_string(Priority::batch)) == "batch");
  CHECK(std::string(to_string(ReservationStatus::held_back)) == "held_back");
}

TEST_CASE("A batch call held back lets an interactive call arriving meanwhile go first", "[priority]") {
  ManualClock clock{t0};
  DeploymentOptions options;
  options.limits = ten_at_once();
  options.clock = std::ref(clock);
  Deployment deployment{options};
  for (int i = 0; i < 10; ++i) (void)deployment.limiter().reserve(Cost{}, t0);  // the burst is spent

  const CallOptions call;
  const RetryPolicy policy = no_jitter();
  CallEngine<Deployment::Pacing> held(policy, deployment.pace(Cost{}, Priority::batch), call);
  Step step = held.start();
  REQUIRE(step.kind == Step::Kind::wait);
  CHECK(step.reason == WaitReason::capacity);
  // Enough is free for it once 6 units refilled (5 kept for the classes above, 1 for it): 600 ms.
  CHECK(step.wait == 600ms);
  clock.advance(300ms);
  // An interactive call arriving meanwhile reserves in line at once.
  const Reservation interactive = deployment.reserve(Cost{}, clock.now());
  CHECK(interactive.start() == t0 + 300ms);
  clock.advance(300ms);
  step = held.resume();
  REQUIRE(step.kind == Step::Kind::wait);  // what refilled went to the interactive call first
  CHECK(step.wait == 100ms);
  clock.advance(100ms);
  step = held.resume();
  CHECK(step.kind == Step::Kind::attempt);
  (void)held.succeeded(0);
  CHECK(deployment.limiter().stats().held_back >= 2);
}

TEST_CASE("A batch call is never held back longer than longest_hold: then it reserves in line", "[priority]") {
  ManualClock clock{t0};
  FakeSleep sleep{clock};
  DeploymentOptions options;
  options.limits = ten_at_once();
  options.clock = std::ref(clock);
  options.priorities.longest_hold = 2s;
  Deployment deployment{options};
  // Interactive calls keep the limiter full far ahead: a batch call would never find enough free.
  for (int i = 0; i < 100; ++i) (void)deployment.limiter().reserve(Cost{}, t0);
  auto pacing = deployment.pace(Cost{}, Priority::batch);
  CHECK(call_with_retry([] { return 7; }, no_jitter(), sleep, pacing) == 7);
  // Held back 2 s, then in line behind the hundred: 10 s after t0 (10 at once, then one every 100 ms).
  CHECK(clock.now() == t0 + 9s + 100ms);
}

TEST_CASE("A held-back wait beyond max_queue_wait or the deadline is refused, nothing sent", "[priority]") {
  ManualClock clock{t0};
  FakeSleep sleep{clock};
  DeploymentOptions options;
  options.limits = ten_at_once();
  options.clock = std::ref(clock);
  options.max_queue_wait = 1s;
  Deployment deployment{options};
  for (int i = 0; i < 40; ++i) (void)deployment.limiter().reserve(Cost{}, t0);  // 3 s ahead
  auto pacing = deployment.pace(Cost{}, Priority::batch);
  int sent = 0;
  CallStats stats;
  CallOptions call;
  call.stats = &stats;
  CHECK_THROWS_AS(call_with_retry([&] { return ++sent; }, no_jitter(), sleep, call, pacing), AttemptRefused);
  CHECK(sent == 0);
  CHECK(stats.stopped == StopReason::no_capacity);
}

TEST_CASE("A tenant past what it is owed uses only what the others leave: its backlog never delays them",
          "[priority][tenant]") {
  RateLimiter limiter(ten_at_once());
  Precedence a;
  a.tenant = "tenant-a";
  int granted = 0;
  for (int i = 0; i < 30; ++i) {
    const Reservation r = limiter.reserve(Cost{}, t0, std::nullopt, a);
    if (r.granted()) ++granted;
    else CHECK(r.status() == ReservationStatus::held_back);
  }
  CHECK(granted == 11);  // up to one burst ahead of what it is owed (10 now, one in line), then held back
  Precedence b;
  b.tenant = "tenant-b";
  CHECK(limiter.reserve(Cost{}, t0, std::nullopt, b).start() == t0 + 200ms);  // not behind nineteen of a's
  // Without tenants, the thirty queue ahead: first come, first served.
  RateLimiter alone(ten_at_once());
  for (int i = 0; i < 30; ++i) (void)alone.reserve(Cost{}, t0);
  CHECK(alone.reserve(Cost{}, t0).start() == t0 + 2100ms);
}

TEST_CASE("A tenant's weight sets its share; past the window it starts afresh", "[priority][tenant]") {
  RateLimiter limiter(ten_at_once());
  Precedence heavy;
  heavy.tenant = "heavy";
  heavy.weight = 3;
  Precedence light;
  light.tenant = "light";
  (void)limiter.reserve(Cost{}, t0, std::nullopt, light);  // both count from now on
  // Owed three quarters: each unit moves it 100 ms x 4/3 ahead: 8 before it passes its one-second allowance.
  int granted = 0;
  for (int i = 0; i < 20; ++i) granted += limiter.reserve(Cost{}, t0, std::nullopt, heavy).granted() ? 1 : 0;
  CHECK(granted == 8);
  // Eleven seconds later both lapsed: heavy reserves in line again.
  for (int i = 0; i < 10; ++i) CHECK(limiter.reserve(Cost{}, t0 + 11s, std::nullopt, heavy).granted());
}

TEST_CASE("Tenants beyond max_tenants share one account", "[priority][tenant]") {
  TenantShares shares;
  shares.max_tenants = 1;
  RateLimiter limiter(ten_at_once(), shares);
  Precedence first;
  first.tenant = "first";
  (void)limiter.reserve(Cost{}, t0, std::nullopt, first);
  Precedence second;
  second.tenant = "second";
  Precedence third;
  third.tenant = "third";
  int granted = 0;  // second and third share "other": one allowance between them
  for (int i = 0; i < 10; ++i) {
    granted += limiter.reserve(Cost{}, t0, std::nullopt, second).granted() ? 1 : 0;
    granted += limiter.reserve(Cost{}, t0, std::nullopt, third).granted() ? 1 : 0;
  }
  CHECK(granted < 10);
  TenantShares bad;
  bad.max_tenants = 0;
  CHECK_THROWS_AS(RateLimiter(Limits{}, bad), std::invalid_argument);
  bad = TenantShares{};
  bad.past_share_kept_free = 1.0;
  CHECK_THROWS_AS(RateLimiter(Limits{}, bad), std::invalid_argument);
}

TEST_CASE("A tenant past its share held back longest_hold is promoted: it reserves in line, no spin",
          "[priority][tenant]") {
  for (const auto longest_hold : {0ms, 2000ms}) {
    ManualClock clock{t0};
    FakeSleep sleep{clock};
    DeploymentOptions options;
    options.limits = ten_at_once();
    options.clock = std::ref(clock);
    options.priorities.longest_hold = longest_hold;
    Deployment deployment{options};
    Precedence a;
    a.tenant = "tenant-a";
    for (int i = 0; i < 30; ++i) (void)deployment.limiter().reserve(Cost{}, t0, std::nullopt, a);  // past its share
    auto pacing = deployment.pace(Cost{}, Priority::interactive, "tenant-a");
    CHECK(call_with_retry([] { return 1; }, no_jitter(), sleep, pacing) == 1);
    INFO(longest_hold.count() << " ms");
    CHECK(sleep.waits().size() <= 3);  // held back until promoted, then in line: no wait of 0 ms over and over
    CHECK(clock.now() <= t0 + 3s);
  }
}
