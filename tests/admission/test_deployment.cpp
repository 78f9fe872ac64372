#include <llmretry/admission/deployment.hpp>

#include <llmretry/retry.hpp>
#include <llmretry/testing.hpp>

#include <atomic>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "helpers.hpp"
#include "llmretry_catch.hpp"

using namespace llmretry;
using namespace std::chrono_literals;
using llmretry::testing::FakeSleep;
using llmretry::testing::ManualClock;
using llmretry::testing::SimulatedProvider;
using llmretry_test::no_jitter;
using std::chrono::milliseconds;

namespace {

// An answer such as curl::Response: a body with the usage, and rate-limit headers.
struct Answer {
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

std::optional<Cost> usage_in(std::string_view body) {
  if (body.empty()) return std::nullopt;
  return Cost{1, 0, std::stoll(std::string(body))};  // the test's answers carry their output tokens
}

DeploymentOptions options_with(ManualClock& clock, Limits limits) {
  DeploymentOptions options;
  options.name = "test/model";
  options.limits = std::move(limits);
  options.clock = std::ref(clock);
  options.read_usage = usage_in;
  return options;
}

/// Returns the options of a deployment on `clock` with one concurrency slot, waited for at most `max_queue_wait`.
DeploymentOptions one_slot(ManualClock& clock, std::optional<milliseconds> max_queue_wait = std::nullopt) {
  DeploymentOptions options = options_with(clock, Limits{});
  options.concurrency = 1;
  options.max_queue_wait = max_queue_wait;
  return options;
}

}  // namespace

TEST_CASE("A paced call waits for capacity before its first attempt", "[deployment]") {
  ManualClock clock;
  FakeSleep sleep{clock};
  Limits limits;
  limits[Dimension::requests_per_minute] = Limit::per_minute(60, 1);  // one a second
  Deployment deployment{options_with(clock, limits)};
  for (int i = 0; i < 3; ++i) {
    auto pacing = deployment.pace(Cost{});
    CHECK(call_with_retry([] { return 1; }, no_jitter(), sleep, pacing) == 1);
  }
  CHECK(sleep.waits() == std::vector<milliseconds>{1s, 1s});
  CHECK(deployment.limiter().stats().granted == 3);
}

TEST_CASE("The answer's usage settles the reservation, its headers teach the limits", "[deployment]") {
  ManualClock clock;
  FakeSleep sleep{clock};
  Limits limits;
  limits[Dimension::tokens_per_minute] = Limit::per_minute(6000, 1000);  // 100 tokens a second
  Deployment deployment{options_with(clock, limits)};
  auto pacing = deployment.pace(Cost{1, 0, 1000});  // max_tokens 1000
  const Answer answer = call_with_retry(
      [] {
        return Answer{"100", {{"x-ratelimit-limit-requests", "60"}, {"x-ratelimit-remaining-requests", "59"}}};
      },
      no_jitter(), sleep, pacing);
  CHECK(answer.body == "100");
  const auto stats = deployment.limiter().stats();
  CHECK(stats.tokens_reserved == 1000);
  CHECK(stats.tokens_used == 100);
  REQUIRE(deployment.limiter().limit(Dimension::requests_per_minute));  // learned from the headers
  CHECK(deployment.limiter().limit(Dimension::requests_per_minute)->limit == 60);
  auto next = deployment.pace(Cost{1, 0, 900});
  CHECK(call_with_retry([] { return Answer{}; }, no_jitter(), sleep, next).body.empty());
  CHECK(sleep.waits().empty());  // the 900 unused tokens came back: no wait
}

TEST_CASE("A usage reader that throws settles the success with the estimate", "[deployment]") {
  ManualClock clock;
  FakeSleep sleep{clock};
  Limits limits;
  limits[Dimension::tokens_per_minute] = Limit::per_minute(6000, 1000);
  DeploymentOptions options = options_with(clock, limits);
  options.read_usage = [](std::string_view /*body*/) -> std::optional<Cost> { throw std::runtime_error("bad"); };
  Deployment deployment{options};
  auto pacing = deployment.pace(Cost{1, 0, 1000});
  CHECK(call_with_retry([] { return Answer{"100", {}}; }, no_jitter(), sleep, pacing).body == "100");
  const auto stats = deployment.limiter().stats();
  CHECK(stats.tokens_used == 1000);
  CHECK(stats.tokens_released == 0);
}

TEST_CASE("A 429 pauses every call of the deployment for the provider's wait", "[deployment]") {
  ManualClock clock;
  FakeSleep sleep{clock};
  Deployment deployment{options_with(clock, Limits::per_minute(600, 100'000))};
  SimulatedProvider provider{"rate_limit_ms:700"};
  auto pacing = deployment.pace(Cost{1, 100, 100});
  call_with_retry([&] { provider.call(); }, no_jitter(), sleep, pacing);
  CHECK(sleep.waits() == std::vector<milliseconds>{700ms});  // the retry's wait; the pause had ended by then
  CHECK(deployment.limiter().paused_until() == ManualClock::time_point{} + 700ms);

  // Another call at the moment of the refusal would have waited for the pause too.
  clock.set(ManualClock::time_point{});
  FakeSleep other{clock};
  auto second = deployment.pace(Cost{1, 100, 100});
  call_with_retry([] {}, no_jitter(), other, second);
  CHECK(other.waits() == std::vector<milliseconds>{700ms});
}

TEST_CASE("Learning::adaptive slows down on a 429", "[deployment]") {
  ManualClock clock;
  FakeSleep sleep{clock};
  auto options = options_with(clock, Limits::per_minute(1000, 1'000'000));
  options.learning = Learning::adaptive;
  Deployment deployment{options};
  SimulatedProvider provider{"rate_limit"};
  auto pacing = deployment.pace(Cost{});
  call_with_retry([&] { provider.call(); }, no_jitter(), sleep, pacing);
  CHECK(deployment.limiter().limit(Dimension::requests_per_minute)->limit == 700);
}

TEST_CASE("A call the deployment cannot take is refused without being sent", "[deployment]") {
  ManualClock clock;
  FakeSleep sleep{clock};
  CallStats stats;
  CallOptions call_options;
  call_options.stats = &stats;
  int calls = 0;
  const auto call = [&] { return ++calls; };

  SECTION("a cost above a limit") {
    Deployment deployment{options_with(clock, Limits::per_minute(600, 1000))};
    auto pacing = deployment.pace(Cost{1, 800, 800});
    try {
      call_with_retry(call, no_jitter(), sleep, pacing, call_options);
      FAIL("not refused");
    } catch (const AttemptRefused& refused) {
      CHECK(refused.reason() == StopReason::no_capacity);
      CHECK(refused.failure().kind == FailureKind::too_large);
    }
  }
  SECTION("capacity later than max_queue_wait") {
    Limits limits;
    limits[Dimension::requests_per_minute] = Limit::per_minute(6, 1);  // one every 10 s
    auto options = options_with(clock, limits);
    options.max_queue_wait = 5s;
    Deployment deployment{options};
    auto first = deployment.pace(Cost{});
    call_with_retry(call, no_jitter(), sleep, first);
    auto second = deployment.pace(Cost{});
    CHECK_THROWS_AS(call_with_retry(call, no_jitter(), sleep, second, call_options), AttemptRefused);
    CHECK(stats.stopped == StopReason::no_capacity);
  }
  SECTION("capacity later than the deadline") {
    Limits limits;
    limits[Dimension::requests_per_minute] = Limit::per_minute(6, 1);
    Deployment deployment{options_with(clock, limits)};
    auto first = deployment.pace(Cost{});
    call_with_retry(call, no_jitter(), sleep, first);
    call_options.clock = std::ref(clock);
    call_options.deadline = clock.now() + 3s;
    auto second = deployment.pace(Cost{});
    CHECK_THROWS_AS(call_with_retry(call, no_jitter(), sleep, second, call_options), AttemptRefused);
    CHECK(stats.stopped == StopReason::deadline);
  }
  CHECK(calls <= 1);
  CHECK(sleep.waits().empty());
}

TEST_CASE("A concurrency slot is held only while the attempt is in flight", "[deployment]") {
  ManualClock clock;
  FakeSleep sleep{clock};
  Deployment deployment{one_slot(clock, 20ms)};
  ConcurrencyLimit& slots = *deployment.concurrency();
  auto pacing = deployment.pace(Cost{});
  int in_use_during = -1;
  call_with_retry([&] { in_use_during = slots.in_use(); }, no_jitter(), sleep, pacing);
  CHECK(in_use_during == 1);
  CHECK(slots.in_use() == 0);

  REQUIRE(slots.try_acquire());  // someone else holds the only slot
  auto blocked = deployment.pace(Cost{});
  CallStats stats;
  CallOptions call_options;
  call_options.stats = &stats;
  CHECK_THROWS_AS(call_with_retry([] {}, no_jitter(), sleep, blocked, call_options), AttemptRefused);
  CHECK(stats.stopped == StopReason::no_capacity);
  slots.release();
}

TEST_CASE("A wait for a concurrency slot is a step: in virtual time it moves the manual clock", "[deployment]") {
  ManualClock clock;
  FakeSleep sleep{clock};
  Deployment deployment{one_slot(clock, 1500ms)};
  ConcurrencyLimit& slots = *deployment.concurrency();
  REQUIRE(slots.try_acquire());  // someone else holds the only slot, and never gives it back
  auto pacing = deployment.pace(Cost{});
  CallOptions call_options;
  call_options.clock = std::ref(clock);
  int calls = 0;
  try {
    call_with_retry([&] { ++calls; }, no_jitter(), sleep, pacing, call_options);
    FAIL("the call was not refused");
  } catch (const AttemptRefused& refused) {
    CHECK(refused.reason() == StopReason::no_capacity);
  }
  CHECK(calls == 0);
  CHECK(sleep.total() == 1500ms);  // slept in pieces of 10 ms, each on the manual clock
  CHECK(sleep.waits().size() == 150);
  CHECK(sleep.reasons() == std::vector<WaitReason>(150, WaitReason::slot));
  CHECK(clock.now() == ManualClock::time_point{} + 1500ms);
  CHECK(slots.waiting() == 0);  // the call left the line
  CHECK(slots.in_use() == 1);
  slots.release();
}

TEST_CASE("A call waiting in line gets the slot as soon as it is given back", "[deployment]") {
  ManualClock clock;
  Deployment deployment{one_slot(clock)};
  ConcurrencyLimit& slots = *deployment.concurrency();
  REQUIRE(slots.try_acquire());
  // A sleep in virtual time that lets the slot's holder go during its third piece.
  struct ReleasingSleep {
    ManualClock& clock;
    ConcurrencyLimit& slots;
    int pieces = 0;
    bool moves_clock() const noexcept { return true; }
    void operator()(milliseconds wait, WaitReason reason) {
      CHECK(reason == WaitReason::slot);
      CHECK(wait == 10ms);  // no max_queue_wait, no deadline: a wait without bound, looked at every 10 ms
      clock.advance(wait);
      if (++pieces == 3) slots.release();
    }
  } sleep{clock, slots};
  auto pacing = deployment.pace(Cost{});
  int in_use_during = -1;
  call_with_retry([&] { in_use_during = slots.in_use(); }, no_jitter(), sleep, pacing);
  CHECK(sleep.pieces == 3);
  CHECK(in_use_during == 1);
  CHECK(slots.in_use() == 0);
}

TEST_CASE("A slot's wait ends at the call's deadline, refused for the deadline", "[deployment]") {
  ManualClock clock;
  FakeSleep sleep{clock};
  Deployment deployment{one_slot(clock, 10s)};
  REQUIRE(deployment.concurrency()->try_acquire());
  auto pacing = deployment.pace(Cost{});
  CallOptions call_options;
  call_options.clock = std::ref(clock);
  call_options.deadline = clock.now() + 35ms;
  CallStats stats;
  call_options.stats = &stats;
  CHECK_THROWS_AS(call_with_retry([] {}, no_jitter(), sleep, pacing, call_options), AttemptRefused);
  CHECK(stats.stopped == StopReason::deadline);
  CHECK(sleep.total() == 35ms);
  CHECK(deployment.concurrency()->waiting() == 0);
  deployment.concurrency()->release();
}

TEST_CASE("With the default sleep, a call in line is woken when the slot is given back", "[deployment]") {
  DeploymentOptions options;
  options.concurrency = 1;
  Deployment deployment{options};
  ConcurrencyLimit& slots = *deployment.concurrency();
  REQUIRE(slots.try_acquire());
  std::atomic<bool> answered{false};
  std::thread in_line([&] {
    auto pacing = deployment.pace(Cost{});
    call_with_retry([&] { answered = true; }, no_jitter(), pacing);  // no bound: only the release ends its wait
  });
  while (slots.waiting() == 0) std::this_thread::yield();
  CHECK_FALSE(answered);
  slots.release();
  in_line.join();
  CHECK(answered);
  CHECK(slots.in_use() == 0);
}

namespace {

struct CountingWaker final : Waker {
  int woken = 0;
  void wake() noexcept override { ++woken; }
};

}  // namespace

TEST_CASE("CallEngine waits for a slot without blocking, told by its Waker when it comes", "[deployment]") {
  ManualClock clock;
  Deployment deployment{one_slot(clock)};
  ConcurrencyLimit& slots = *deployment.concurrency();
  const RetryPolicy policy = no_jitter();
  const CallOptions call_options;
  CountingWaker waker;
  REQUIRE(slots.try_acquire());

  SECTION("the slot comes: the call goes") {
    CallEngine engine(policy, deployment.pace(Cost{}), call_options);
    engine.wake_with(&waker);
    const Step first = engine.start();
    REQUIRE(first.kind == Step::Kind::wait);
    CHECK(first.reason == WaitReason::slot);
    CHECK(first.wait == milliseconds::max());
    CHECK(slots.waiting() == 1);
    const Step again = engine.resume();  // resumed before the slot came: wait on
    CHECK(again.kind == Step::Kind::wait);
    CHECK(waker.woken == 0);
    slots.release();
    CHECK(waker.woken == 1);
    CHECK(slots.in_use() == 1);  // handed to the call in line
    REQUIRE(engine.resume().kind == Step::Kind::attempt);
    CHECK(engine.attempts() == 1);
    CHECK(engine.succeeded().kind == Step::Kind::done);
    CHECK(slots.in_use() == 0);
  }
  SECTION("a call given up while in line leaves it") {
    {
      CallEngine engine(policy, deployment.pace(Cost{}), call_options);
      engine.wake_with(&waker);
      CHECK(engine.start().kind == Step::Kind::wait);
      CHECK(slots.waiting() == 1);
    }
    CHECK(slots.waiting() == 0);
    slots.release();
    CHECK(waker.woken == 0);
    CHECK(slots.in_use() == 0);
  }
  SECTION("a call given up after the slot came gives it back") {
    {
      CallEngine engine(policy, deployment.pace(Cost{}), call_options);
      engine.wake_with(&waker);
      CHECK(engine.start().kind == Step::Kind::wait);
      slots.release();
      CHECK(waker.woken == 1);
      CHECK(slots.in_use() == 1);
    }
    CHECK(slots.in_use() == 0);
  }
}

TEST_CASE("A slot handed over while its driver looks again never touches a freed place in line", "[deployment]") {
  // Run under ThreadSanitizer or AddressSanitizer: a handover that read its Line after the driver had taken
  // the slot (and freed the Line) is reported.
  DeploymentOptions options;
  options.concurrency = 1;
  Deployment deployment{options};
  ConcurrencyLimit& slots = *deployment.concurrency();
  const RetryPolicy policy = no_jitter();
  const CallOptions call_options;
  CountingWaker waker;
  constexpr int rounds = 2000;
  std::atomic<int> phase{0};
  std::thread releaser([&] {
    for (int i = 0; i < rounds; ++i) {
      while (phase.load() != 2 * i + 1) std::this_thread::yield();
      slots.release();
    }
  });
  for (int i = 0; i < rounds; ++i) {
    REQUIRE(slots.try_acquire());
    CallEngine engine(policy, deployment.pace(Cost{}), call_options);
    engine.wake_with(&waker);
    Step step = engine.start();
    REQUIRE(step.kind == Step::Kind::wait);
    phase.store(2 * i + 1);
    while ((step = engine.resume()).kind == Step::Kind::wait) std::this_thread::yield();
    REQUIRE(step.kind == Step::Kind::attempt);
    (void)engine.succeeded();
    phase.store(2 * i + 2);
  }
  releaser.join();
  CHECK(slots.in_use() == 0);
}

TEST_CASE("A clock that throws while a ticket gets in line gives back no slot it never had", "[deployment]") {
  int reads = 0;
  DeploymentOptions options;
  options.concurrency = 1;
  options.max_queue_wait = 1s;
  options.clock = [&reads] {
    if (++reads == 2) throw std::runtime_error("clock unavailable");  // the read as the ticket gets in line
    return std::chrono::steady_clock::time_point{};
  };
  Deployment deployment{options};
  ConcurrencyLimit& slots = *deployment.concurrency();
  REQUIRE(slots.try_acquire());  // someone else holds the only slot
  auto pacing = deployment.pace(Cost{});
  CHECK_THROWS_AS(call_with_retry([] {}, no_jitter(), pacing), std::runtime_error);
  CHECK(slots.in_use() == 1);
  CHECK_FALSE(slots.try_acquire());
  slots.release();
}

TEST_CASE("A sleep that keeps no virtual time leaves a wait for a slot to the waker", "[deployment]") {
  DeploymentOptions options;  // the real clock
  options.concurrency = 1;
  options.max_queue_wait = 100ms;
  Deployment deployment{options};
  REQUIRE(deployment.concurrency()->try_acquire());
  FakeSleep sleep;  // records, moves no clock: polling through it would spin
  auto pacing = deployment.pace(Cost{});
  CHECK_THROWS_AS(call_with_retry([] {}, no_jitter(), sleep, pacing), AttemptRefused);
  CHECK(sleep.waits().empty());
  deployment.concurrency()->release();
}

TEST_CASE("guards() begins each ticket once across a wait for a slot", "[deployment]") {
  struct CountingGuard {
    int* begun;
    struct Ticket {
      int* begun;
      std::optional<Refusal> begin(const Attempt& /*attempt*/) {
        ++*begun;
        return std::nullopt;
      }
      void succeeded() const noexcept {}
      void failed(const Failure& /*failure*/) const noexcept {}
    };
    Admission<Ticket> admit(const Attempt& /*attempt*/) { return Admission<Ticket>::go(Ticket{begun}); }
  };
  ManualClock clock;
  FakeSleep sleep{clock};
  Deployment deployment{one_slot(clock, 50ms)};
  REQUIRE(deployment.concurrency()->try_acquire());
  int begun = 0;
  CHECK_THROWS_AS(call_with_retry([] {}, no_jitter(), sleep, guards(CountingGuard{&begun}, deployment.pace(Cost{}))),
                  AttemptRefused);
  CHECK(sleep.waits().size() == 5);
  CHECK(begun == 1);
  deployment.concurrency()->release();
}

TEST_CASE("A max_queue_wait beyond what a clock holds bounds nothing", "[deployment]") {
  ManualClock clock;
  FakeSleep sleep{clock};
  auto options = options_with(clock, Limits::per_minute(60, 100'000));
  options.max_queue_wait = milliseconds::max();
  Deployment deployment{options};
  for (int i = 0; i < 3; ++i) {
    auto pacing = deployment.pace(Cost{});
    CHECK(call_with_retry([] { return 1; }, no_jitter(), sleep, pacing) == 1);
  }
  CHECK(deployment.limiter().stats().refused == 0);
}

TEST_CASE("A 429 asking for an absurd wait pauses a day at most", "[deployment]") {
  ManualClock clock;
  Deployment deployment{options_with(clock, Limits::per_minute(600, 100'000))};
  Reservation reservation = deployment.reserve(Cost{}, clock.now());
  Failure refused = classify_status(429);
  refused.provider_wait = milliseconds::max();
  deployment.failed(reservation, refused, clock.now());
  CHECK(deployment.limiter().paused_until() == clock.now() + std::chrono::hours{24});
}
