#include <llmretry/admission/hedging.hpp>

#include <llmretry/admission/circuit_breaker.hpp>
#include <llmretry/admission/deployment.hpp>
#include <llmretry/admission/retry_budget.hpp>
#include <llmretry/engine.hpp>
#include <llmretry/fallback.hpp>
#include <llmretry/metrics/observe.hpp>
#include <llmretry/retry.hpp>
#include <llmretry/testing.hpp>

#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "helpers.hpp"
#include "llmretry_catch.hpp"

using namespace llmretry;
using llmretry::testing::ManualClock;
using std::chrono::milliseconds;
using namespace std::chrono_literals;
using Kind = Step::Kind;
using llmretry_test::no_jitter;

namespace {

const Failure unavailable{FailureKind::server_error, 503, std::nullopt, Sent::maybe_processed, std::nullopt};

// A guard that admits every attempt at once (or after `wait`), recording what each ticket heard.
struct RecordingGuard {
  milliseconds wait{0};
  std::vector<std::string> heard;  // "first 1 succeeded", "hedge 1 failed unknown"...
  int given_back = 0;

  struct Ticket {
    RecordingGuard* guard;
    std::string name;
    bool told = false;
    Ticket(RecordingGuard* owner, std::string ticket_name) : guard(owner), name(std::move(ticket_name)) {}
    Ticket(Ticket&& other) noexcept
        : guard(other.guard), name(std::move(other.name)), told(std::exchange(other.told, true)) {}
    Ticket& operator=(Ticket&&) = delete;
    ~Ticket() {
      if (!told) ++guard->given_back;
    }
    void succeeded(const int& /*answer*/) {
      told = true;
      guard->heard.push_back(name + " succeeded");
    }
    void failed(const Failure& failure) {
      told = true;
      guard->heard.push_back(name + " failed " + to_string(failure.kind));
    }
  };

  Admission<Ticket> admit(const Attempt& attempt) {
    return Admission<Ticket>::go(
        Ticket{this, std::string(attempt.hedge ? "hedge " : "first ").append(std::to_string(attempt.number))}, wait);
  }
};

HedgingOptions fixed(milliseconds delay, ManualClock& clock) {
  HedgingOptions options;
  options.delay = delay;
  options.ratio = 1.0;
  options.min_per_second = 100;  // a floor: a test's few calls may hedge every attempt
  options.clock = std::ref(clock);
  return options;
}

/// One hedged call's engine through a RecordingGuard, a hedge after 300 ms on a manual clock.
struct HedgedEngine {
  ManualClock clock;
  Hedging hedging{fixed(300ms, clock)};
  RetryPolicy policy = no_jitter();
  CallStats stats;
  CallOptions options;
  RecordingGuard guard;
  std::minstd_rand rng;
  std::optional<CallEngine<RecordingGuard&>> engine;

  HedgedEngine() {
    options.hedging = &hedging;
    options.stats = &stats;
  }

  /// Returns the engine, once its first attempt is under way.
  CallEngine<RecordingGuard&>& start() {
    engine.emplace(policy, guard, options);
    REQUIRE(engine->start().kind == Kind::attempt);
    return *engine;
  }
};

}  // namespace

TEST_CASE("Hedging: the learned delay is the percentile of the latencies recorded, once there are enough") {
  HedgingOptions options;
  options.percentile = 0.9;
  options.min_samples = 10;
  options.samples = 20;
  options.min_delay = 5ms;
  Hedging hedging(options);
  for (int i = 1; i <= 9; ++i) hedging.record(milliseconds{i * 100});
  CHECK_FALSE(hedging.delay());  // 9 of the 10 needed
  hedging.record(1000ms);
  REQUIRE(hedging.delay());
  CHECK(*hedging.delay() == 1000ms);  // rank 9 of 100..1000
  // Twenty more, all fast: the old ones leave the ring of 20.
  for (int i = 0; i < 20; ++i) hedging.record(milliseconds{i < 18 ? 1 : 50});
  CHECK(*hedging.delay() == 50ms);
  for (int i = 0; i < 20; ++i) hedging.record(1ms);
  CHECK(*hedging.delay() == 5ms);  // raised to min_delay
  hedging.record(-3ms);            // counted as 0
  CHECK(*hedging.delay() == 5ms);
}

TEST_CASE("Hedging: a fixed delay needs no latency, and the budget allows ratio x calls") {
  ManualClock clock;
  HedgingOptions options;
  options.delay = 200ms;
  options.ratio = 0.1;
  options.clock = std::ref(clock);
  Hedging hedging(options);
  CHECK(*hedging.delay() == 200ms);
  for (int i = 0; i < 20; ++i) hedging.called(clock.now());
  CHECK(hedging.try_hedge(clock.now()));
  CHECK(hedging.try_hedge(clock.now()));
  CHECK_FALSE(hedging.try_hedge(clock.now()));  // 2 of 20 calls
  hedging.give_back(clock.now());
  CHECK(hedging.try_hedge(clock.now()));
  clock.advance(11s);  // the window moved on
  CHECK_FALSE(hedging.try_hedge(clock.now()));
  const HedgingStats stats = hedging.stats();
  CHECK(stats.calls == 20);
  CHECK(stats.hedges == 2);
  CHECK(stats.refused == 2);
}

TEST_CASE("HedgingOptions: a value out of range is refused, naming the field") {
  const auto refused = [](auto change) {
    HedgingOptions options;
    change(options);
    try {
      Hedging hedging(options);
    } catch (const std::invalid_argument& error) {
      return std::string(error.what());
    }
    return std::string("accepted");
  };
  CHECK(refused([](HedgingOptions& o) { o.percentile = 1.0; }).find("percentile") != std::string::npos);
  CHECK(refused([](HedgingOptions& o) { o.delay = 0ms; }).find("delay") != std::string::npos);
  CHECK(refused([](HedgingOptions& o) { o.min_samples = 0; }).find("min_samples") != std::string::npos);
  CHECK(refused([](HedgingOptions& o) { o.samples = 0; }).find("samples") != std::string::npos);
  CHECK(refused([](HedgingOptions& o) { o.ratio = 2; }).find("ratio") != std::string::npos);
  CHECK(refused([](HedgingOptions& o) { o.min_delay = 0ms; }).find("min_delay") != std::string::npos);
  CHECK(refused([](HedgingOptions& o) { o.window = 1ms; }).find("window") != std::string::npos);
  CHECK(refused([](HedgingOptions&) {}) == "accepted");
}

TEST_CASE("CallEngine hedging: the hedge answers first and wins; the first request's ticket hears it lost") {
  HedgedEngine call;
  auto& engine = call.start();
  REQUIRE(engine.hedge_delay() == 300ms);
  call.clock.advance(300ms);
  REQUIRE(engine.hedge());
  CHECK(engine.hedge_attempt().hedge);
  CHECK(engine.hedge_attempt().number == 1);
  CHECK_FALSE(engine.hedge());  // one hedge per attempt
  CHECK(engine.in_flight(false));
  CHECK(engine.in_flight(true));
  call.clock.advance(100ms);
  CHECK(engine.hedge_succeeded(7).kind == Kind::done);
  CHECK_FALSE(engine.in_flight(false));  // lost: cancel it, report nothing of it
  // The loser is told first, so that an observer's last word on the call is the success.
  CHECK(call.guard.heard == std::vector<std::string>{"first 1 failed unknown", "hedge 1 succeeded"});
  CHECK(call.guard.given_back == 0);
  CHECK(engine.gave_up() == nullptr);
  CHECK(engine.hedges() == 1);
  CHECK(call.stats.attempts == 1);
  CHECK(call.stats.hedges == 1);
  CHECK(call.hedging.stats().wins == 1);
  CHECK(call.hedging.stats().hedges == 1);
}

TEST_CASE("CallEngine hedging: the first request answers first; the hedge lost") {
  HedgedEngine call;
  auto& engine = call.start();
  REQUIRE(engine.hedge());
  CHECK(engine.succeeded(7).kind == Kind::done);
  CHECK_FALSE(engine.in_flight(true));
  CHECK(call.guard.heard == std::vector<std::string>{"hedge 1 failed unknown", "first 1 succeeded"});
  CHECK(call.hedging.stats().wins == 0);
}

TEST_CASE("CallEngine hedging: one request fails while the other is in flight: pending, then the other decides") {
  HedgedEngine call;
  auto& engine = call.start();
  REQUIRE(engine.hedge());

  SECTION("the first fails, the hedge succeeds") {
    CHECK(engine.failed(unavailable, call.rng).kind == Kind::pending);
    CHECK(engine.hedge_succeeded(7).kind == Kind::done);
    CHECK(call.guard.heard == std::vector<std::string>{"first 1 failed server_error", "hedge 1 succeeded"});
    CHECK(engine.gave_up() == nullptr);
  }
  SECTION("the hedge fails, then the first: the decision is the last failure's, a retry that may hedge again") {
    CHECK(engine.hedge_failed(unavailable, call.rng).kind == Kind::pending);
    const Step wait = engine.failed(unavailable, call.rng);
    CHECK(wait.kind == Kind::wait);
    CHECK(wait.reason == WaitReason::backoff);
    CHECK(engine.resume().kind == Kind::attempt);
    CHECK(engine.attempt().number == 2);
    REQUIRE(engine.hedge());
    CHECK(engine.hedge_attempt().number == 2);
    CHECK(engine.succeeded(7).kind == Kind::done);
    CHECK(engine.hedges() == 2);
  }
}

TEST_CASE("CallEngine hedging: what keeps a hedge from going") {
  ManualClock clock;
  HedgingOptions hedging_options = fixed(300ms, clock);
  const RetryPolicy policy = no_jitter();
  CallOptions options;
  RecordingGuard guard;

  SECTION("a call not safe to repeat") {
    Hedging hedging(hedging_options);
    options.hedging = &hedging;
    options.safe_to_repeat = false;
    CallEngine engine(policy, guard, options);
    REQUIRE(engine.start().kind == Kind::attempt);
    CHECK_FALSE(engine.hedge_delay());
    CHECK_FALSE(engine.hedge());
  }
  SECTION("a request that began to stream: it claimed the answer") {
    Hedging hedging(hedging_options);
    options.hedging = &hedging;
    CallEngine engine(policy, guard, options);
    REQUIRE(engine.start().kind == Kind::attempt);
    CHECK(engine.claim(false));
    CHECK(engine.claim(false));  // the winner may ask again
    CHECK_FALSE(engine.hedge_delay());
    CHECK_FALSE(engine.hedge());
    CHECK(hedging.stats().hedges == 0);
  }
  SECTION("the budget: a ratio of 0 and no floor never hedge") {
    hedging_options.ratio = 0;
    hedging_options.min_per_second = 0;
    Hedging hedging(hedging_options);
    options.hedging = &hedging;
    CallEngine engine(policy, guard, options);
    REQUIRE(engine.start().kind == Kind::attempt);
    CHECK_FALSE(engine.hedge());
    CHECK(hedging.stats().refused == 1);
  }
  SECTION("a guard that would make the hedge wait: no hedge, its ticket and the budget given back") {
    Hedging hedging(hedging_options);
    options.hedging = &hedging;
    CallEngine engine(policy, guard, options);
    REQUIRE(engine.start().kind == Kind::attempt);
    guard.wait = 10ms;
    CHECK_FALSE(engine.hedge());
    CHECK(guard.given_back == 1);
    CHECK(hedging.stats().hedges == 0);
  }
  SECTION("a learned delay with too few latencies, and a deadline before the delay") {
    hedging_options.delay.reset();
    hedging_options.min_samples = 2;
    Hedging hedging(hedging_options);
    options.hedging = &hedging;
    {
      CallEngine engine(policy, guard, options);
      REQUIRE(engine.start().kind == Kind::attempt);
      CHECK_FALSE(engine.hedge_delay());
      clock.advance(400ms);
      CHECK(engine.succeeded(1).kind == Kind::done);  // a latency of 400 ms
    }
    hedging.record(600ms);
    options.deadline = clock.now() + 500ms;
    options.clock = std::ref(clock);
    CallEngine engine(policy, guard, options);
    REQUIRE(engine.start().kind == Kind::attempt);
    CHECK_FALSE(engine.hedge_delay());  // 600 ms, past the 500 ms left
  }
}

TEST_CASE("CallEngine hedging: the hedge that claims the stream first wins; the other request lost") {
  HedgedEngine call;
  auto& engine = call.start();
  REQUIRE(engine.hedge());
  CHECK(engine.claim(true));
  CHECK_FALSE(engine.claim(false));
  CHECK_FALSE(engine.in_flight(false));
  CHECK(call.guard.heard == std::vector<std::string>{"first 1 failed unknown"});
  // The stream breaks after its first event: a failure decided alone (never replayed: not retried here).
  Failure broken = Failure::of(FailureKind::stream_interrupted, Sent::maybe_processed);
  CHECK(engine.hedge_failed(broken, call.rng).kind == Kind::done);
  REQUIRE(engine.gave_up() != nullptr);
  CHECK(engine.gave_up()->failure.kind == FailureKind::stream_interrupted);
}

TEST_CASE("CallEngine hedging: a cancel tells both requests' tickets they lost; the record keeps its failure") {
  HedgedEngine call;
  auto& engine = call.start();
  REQUIRE(engine.hedge());
  CHECK(engine.cancelled(Failure::timed_out(Sent::maybe_processed)).kind == Kind::done);
  // RecordingGuard has no lost(): it hears an unknown failure, maybe processed (a breaker records nothing).
  CHECK(call.guard.heard == std::vector<std::string>{"first 1 failed unknown", "hedge 1 failed unknown"});
  CHECK(engine.gave_up()->reason == StopReason::cancelled);
  CHECK(engine.gave_up()->failure.kind == FailureKind::timeout);
}

TEST_CASE("Hedging with the built-in guards: a retry budget records nothing, a Deployment never waits") {
  ManualClock clock;
  Hedging hedging(fixed(300ms, clock));
  const RetryPolicy policy = no_jitter();
  CallOptions options;
  options.hedging = &hedging;

  SECTION("RetryBudget: the hedge neither deposits nor withdraws") {
    RetryBudgetOptions budget_options;
    budget_options.clock = std::ref(clock);
    RetryBudget budget(budget_options);
    auto guard = budget.guard();
    CallEngine engine(policy, guard, options);
    REQUIRE(engine.start().kind == Kind::attempt);
    REQUIRE(engine.hedge());
    CHECK(engine.hedge_succeeded(1).kind == Kind::done);
    CHECK(budget.stats().first_attempts == 1);
    CHECK(budget.stats().retries == 0);
  }
  SECTION("Deployment: a hedge goes while capacity is there, and never reserves into the future") {
    DeploymentOptions deployment_options;
    deployment_options.limits[Dimension::requests_per_minute] = Limit::per_minute(60, 2);  // one a second, 2 at once
    deployment_options.clock = std::ref(clock);
    Deployment deployment(deployment_options);
    {
      CallEngine engine(policy, deployment.pace(Cost{}), options);
      REQUIRE(engine.start().kind == Kind::attempt);
      CHECK(engine.hedge());  // the burst's second request
      CHECK(engine.succeeded(0).kind == Kind::done);
    }
    std::vector<milliseconds> waits;
    for (int call = 0; call < 2; ++call) {
      CallEngine engine(policy, deployment.pace(Cost{}), options);
      const Step first = engine.start();
      REQUIRE(first.kind == Kind::wait);
      waits.push_back(first.wait);
      clock.advance(first.wait);
      REQUIRE(engine.resume().kind == Kind::attempt);
      CHECK_FALSE(engine.hedge());  // no capacity now: no hedge
      CHECK(engine.succeeded(0).kind == Kind::done);
    }
    CHECK(waits == std::vector<milliseconds>{1000ms, 1000ms});  // the refused hedges reserved nothing
  }
}

TEST_CASE("Hedging is for drivers that send requests concurrently: call_with_retry and call_with_fallback refuse it") {
  Hedging hedging;
  CallOptions options;
  options.hedging = &hedging;
  CHECK_THROWS_AS(call_with_retry([] { return 1; }, RetryPolicy{}, options), std::invalid_argument);
  const FallbackChain chain{{Route{"a", "openai", "m", {}}}};
  FallbackOptions fallback_options;
  fallback_options.call.hedging = &hedging;
  CHECK_THROWS_AS(call_with_fallback(
                      chain, [](const Route&) { return 1; }, RetryPolicy{}, fallback_options),
                  std::invalid_argument);
}

TEST_CASE("Hedging with a circuit breaker: the request that lost records nothing") {
  ManualClock clock;
  Hedging hedging(fixed(300ms, clock));
  CircuitBreakerOptions breaker_options;
  breaker_options.minimum_throughput = 4;
  breaker_options.failure_ratio = 0.5;
  breaker_options.clock = std::ref(clock);
  CircuitBreaker breaker(breaker_options);
  for (int i = 0; i < 2; ++i) {  // two failures: 2 of 2
    auto guard = breaker.guard();
    auto admission = guard.admit(Attempt{});
    REQUIRE(admission.admitted());
    admission.ticket().failed(unavailable);
  }
  const RetryPolicy policy = no_jitter();
  CallOptions options;
  options.hedging = &hedging;
  CallEngine engine(policy, breaker.guard(), options);
  REQUIRE(engine.start().kind == Kind::attempt);
  REQUIRE(engine.hedge());
  CHECK(engine.hedge_succeeded(1).kind == Kind::done);
  // Recorded: 2 failures and the hedge's success; the loser counted as a success would make 2 of 4: open.
  CHECK(breaker.state(clock.now()) == CircuitState::closed);
  auto guard = breaker.guard();
  auto admission = guard.admit(Attempt{});
  REQUIRE(admission.admitted());
  admission.ticket().failed(unavailable);  // 3 of 4
  CHECK(breaker.state(clock.now()) == CircuitState::open);
}

namespace {

/// The events an Observer hears about hedges, resends and the end of a call, in order.
struct SeenEvents : metrics::Observer {
  std::vector<std::string> events;
  void hedged(const metrics::Target& /*target*/, int resend_count) override {
    events.push_back(std::string("hedged ").append(std::to_string(resend_count)));
  }
  void hedge_won(const metrics::Target& /*target*/) override { events.emplace_back("hedge_won"); }
  void retried(const metrics::Target& /*target*/, const Failure& failure, int resend_count) override {
    events.push_back(
        std::string("retried ").append(std::to_string(resend_count)).append(" after ").append(to_string(failure.kind)));
  }
  void request_finished(const metrics::Target& /*target*/, std::string_view status) override {
    events.push_back(std::string("finished ").append(status));
  }
};

/// Runs `steps` on the engine of a hedged call observed by `seen`, then ends the call's report.
template <class Steps>
void observed(SeenEvents& seen, Steps steps) {
  ManualClock clock;
  Hedging hedging(fixed(300ms, clock));
  const RetryPolicy policy = no_jitter();
  CallOptions options;
  options.hedging = &hedging;
  std::minstd_rand rng;
  CallEngine engine(policy, metrics::observe(seen, {"openai", "m"}), options);
  REQUIRE(engine.start().kind == Kind::attempt);
  steps(engine, rng);
}

}  // namespace

TEST_CASE("metrics::observe: the resend counts do not depend on the order the outcomes are known in") {
  SeenEvents seen;
  observed(seen, [](auto& engine, auto& rng) {
    CHECK(engine.failed(unavailable, rng).kind == Kind::wait);  // attempt 1, not hedged
    REQUIRE(engine.resume().kind == Kind::attempt);
    REQUIRE(engine.hedge());
    // The hedge's outcome comes first, a failure of its own: attempt 2's resend still follows attempt 1's.
    CHECK(engine.hedge_failed(Failure::timed_out(Sent::maybe_processed), rng).kind == Kind::pending);
    CHECK(engine.succeeded(std::string("ok")).kind == Kind::done);
  });
  // Request 1, request 2 (resend 1), then its hedge (resend 2), whatever was known first.
  CHECK(seen.events == std::vector<std::string>{"hedged 2", "retried 1 after server_error", "finished success"});
}

TEST_CASE("metrics::observe counts hedges, their wins, and the resend count after them") {
  SeenEvents seen;
  observed(seen, [](auto& engine, auto& rng) {
    REQUIRE(engine.hedge());
    CHECK(engine.failed(unavailable, rng).kind == Kind::pending);
    CHECK(engine.hedge_failed(unavailable, rng).kind == Kind::wait);
    REQUIRE(engine.resume().kind == Kind::attempt);
    REQUIRE(engine.hedge());
    CHECK(engine.hedge_succeeded(std::string("ok")).kind == Kind::done);
  });
  // Requests: 1, its hedge (resend 1), attempt 2 (resend 2), its hedge (resend 3), which won.
  CHECK(seen.events == std::vector<std::string>{"hedged 1", "retried 2 after server_error", "hedged 3", "hedge_won",
                                                "finished success"});
}

TEST_CASE("metrics::observe: the request that lost is sent, not a failure: the next resend names the real one") {
  SeenEvents seen;
  observed(seen, [](auto& engine, auto& rng) {
    CHECK(engine.failed(unavailable, rng).kind == Kind::wait);
    REQUIRE(engine.resume().kind == Kind::attempt);
    REQUIRE(engine.hedge());
    CHECK(engine.succeeded(std::string("ok")).kind == Kind::done);  // the hedge lost
  });
  CHECK(seen.events == std::vector<std::string>{"hedged 2", "retried 1 after server_error", "finished success"});
}
