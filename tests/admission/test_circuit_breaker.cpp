#include <llmretry/admission/circuit_breaker.hpp>

#include <llmretry/retry.hpp>
#include <llmretry/testing.hpp>

#include <string>
#include <vector>

#include "give_up_recorder.hpp"
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

struct Fixture {
  ManualClock clock;
  std::vector<std::string> transitions;
  CircuitBreaker breaker{options()};

  CircuitBreakerOptions options() {
    CircuitBreakerOptions o;
    o.name = "primary";
    o.failure_ratio = 0.5;
    o.minimum_throughput = 4;
    o.window = 10s;
    o.break_duration = 5s;
    o.half_open_probes = 1;
    o.clock = std::ref(clock);
    o.on_transition = [this](const CircuitTransition& t) {
      transitions.push_back(t.breaker + ": " + to_string(t.from) + " -> " + to_string(t.to) + " at " +
                            std::to_string(std::chrono::duration_cast<milliseconds>(t.at.time_since_epoch()).count()));
    };
    return o;
  }

  // Passes one attempt and records how it ended; returns false when it was refused.
  bool attempt(bool failed) {
    const auto pass = breaker.try_pass(clock.now());
    if (!pass.allowed) return false;
    breaker.record(pass, failed, clock.now());
    return true;
  }
  CircuitState state() { return breaker.state(clock.now()); }
};

}  // namespace

TEST_CASE("closed -> open: enough attempts and a failure ratio reached", "[circuit_breaker]") {
  Fixture f;
  CHECK(f.attempt(true));
  CHECK(f.attempt(true));
  CHECK(f.attempt(true));
  CHECK(f.state() == CircuitState::closed);  // 3 attempts: below the minimum throughput
  CHECK(f.attempt(false));
  CHECK(f.state() == CircuitState::closed);  // a success does not open it
  CHECK(f.attempt(true));                    // 4 failures of 5
  CHECK(f.state() == CircuitState::open);
  CHECK(f.transitions == std::vector<std::string>{"primary: closed -> open at 0"});
  CHECK(f.breaker.stats().opened == 1);

  SECTION("below the ratio it stays closed") {
    Fixture g;
    for (int i = 0; i < 6; ++i) CHECK(g.attempt(false));
    CHECK(g.attempt(true));
    CHECK(g.attempt(true));
    CHECK(g.attempt(true));  // 3 of 9
    CHECK(g.state() == CircuitState::closed);
  }
  SECTION("failures that left the window do not count") {
    Fixture g;
    CHECK(g.attempt(true));
    CHECK(g.attempt(true));
    CHECK(g.attempt(true));
    g.clock.advance(10s);
    CHECK(g.attempt(true));
    CHECK(g.state() == CircuitState::closed);
  }
}

TEST_CASE("open: refused at once with the time until probes; then half-open", "[circuit_breaker]") {
  Fixture f;
  for (int i = 0; i < 4; ++i) CHECK(f.attempt(true));
  REQUIRE(f.state() == CircuitState::open);
  f.clock.advance(2s);
  const auto refused = f.breaker.try_pass(f.clock.now());
  CHECK_FALSE(refused.allowed);
  CHECK(refused.wait == 3s);
  f.clock.advance(3s);
  CHECK(f.state() == CircuitState::half_open);
  CHECK(f.transitions.back() == "primary: open -> half_open at 5000");
}

TEST_CASE("half-open: one probe at a time; its success closes, its failure opens again", "[circuit_breaker]") {
  Fixture f;
  for (int i = 0; i < 4; ++i) CHECK(f.attempt(true));
  f.clock.advance(5s);
  const auto probe = f.breaker.try_pass(f.clock.now());
  REQUIRE(probe.allowed);
  CHECK(probe.probe);
  const auto second = f.breaker.try_pass(f.clock.now());
  CHECK_FALSE(second.allowed);
  CHECK_FALSE(second.wait);  // closes as soon as the probe succeeds: no wait to promise

  SECTION("success: closed, and the count starts again") {
    f.breaker.record(probe, false, f.clock.now());
    CHECK(f.state() == CircuitState::closed);
    CHECK(f.attempt(true));
    CHECK(f.state() == CircuitState::closed);  // the earlier failures are forgotten
    CHECK(f.transitions.back() == "primary: half_open -> closed at 5000");
  }
  SECTION("failure: open again for the whole break") {
    f.clock.advance(1s);
    f.breaker.record(probe, true, f.clock.now());
    CHECK(f.state() == CircuitState::open);
    CHECK(f.breaker.try_pass(f.clock.now()).wait == 5s);
    CHECK(f.transitions.back() == "primary: half_open -> open at 6000");
    CHECK(f.breaker.stats().opened == 2);
  }
  SECTION("a probe not sent gives its place back") {
    f.breaker.abandon(probe);
    CHECK(f.breaker.try_pass(f.clock.now()).probe);
  }
  SECTION("an outcome of an attempt passed while closed does not close it") {
    CircuitBreaker::Pass old;
    old.allowed = true;
    f.breaker.record(old, false, f.clock.now());
    CHECK(f.state() == CircuitState::half_open);
  }
}

TEST_CASE("What counts as a failure: 5xx, timeouts, connections; not 429 nor 4xx", "[circuit_breaker]") {
  CHECK(CircuitBreaker::counts_as_failure(classify_status(503)));
  CHECK(CircuitBreaker::counts_as_failure(classify_status(529)));
  CHECK(CircuitBreaker::counts_as_failure(Failure::timed_out(Sent::maybe_processed)));
  CHECK(CircuitBreaker::counts_as_failure(Failure::connection_failed(Sent::not_sent)));
  CHECK_FALSE(CircuitBreaker::counts_as_failure(classify_status(429)));
  CHECK_FALSE(CircuitBreaker::counts_as_failure(classify_status(400)));
  CHECK_FALSE(CircuitBreaker::counts_as_failure(Failure::of(FailureKind::context_length, Sent::refused)));
}

TEST_CASE("The breaker's guard: calls fail fast while open, without calling", "[circuit_breaker]") {
  Fixture f;
  FakeSleep sleep{f.clock};
  GiveUpRecorder recorder;
  SimulatedProvider down{"server_error*4"};
  RetryPolicy policy = no_jitter();
  CHECK_THROWS_AS(
      call_with_retry([&] { return down.call([] { return 1; }); }, policy, sleep, f.breaker.guard(), recorder.options),
      ProviderError);
  CHECK(down.calls() == 4);  // the 4th failure opened it; the policy had no attempt left
  CHECK(f.state() == CircuitState::open);

  int calls = 0;
  try {
    (void)call_with_retry([&] { return ++calls; }, policy, sleep, f.breaker.guard(), recorder.options);
    FAIL("no exception");
  } catch (const AttemptRefused& refused) {
    CHECK(refused.reason() == StopReason::circuit_open);
    CHECK(refused.failure().sent == Sent::not_sent);
    CHECK(refused.failure().provider_wait == 5s);
  }
  CHECK(calls == 0);

  SECTION("429s and 4xx do not open it") {
    Fixture g;
    SimulatedProvider limited{"rate_limit*3", "status:400"};
    CHECK_THROWS_AS(call_with_retry([&] { return limited.call([] { return 1; }); }, policy, sleep, g.breaker.guard()),
                    ProviderError);
    CHECK(g.state() == CircuitState::closed);
  }
  SECTION("after the break, the probe's success closes it") {
    f.clock.advance(5s);
    CHECK(call_with_retry([&] { return ++calls; }, policy, sleep, f.breaker.guard()) == 1);
    CHECK(f.state() == CircuitState::closed);
  }
}

TEST_CASE("A circuit breaker with options out of range is refused, naming the field", "[circuit_breaker]") {
  CircuitBreakerOptions o;
  o.failure_ratio = 0;
  CHECK_THROWS_WITH(CircuitBreaker{o}, "CircuitBreakerOptions::failure_ratio must be in (0, 1]");
  o.failure_ratio = 0.5;
  o.minimum_throughput = 0;
  CHECK_THROWS_WITH(CircuitBreaker{o}, "CircuitBreakerOptions::minimum_throughput must be at least 1");
  o.minimum_throughput = 1;
  o.break_duration = 0ms;
  CHECK_THROWS_WITH(CircuitBreaker{o}, "CircuitBreakerOptions::break_duration must be in [1 ms, 1 h]");
  o.break_duration = 1s;
  o.half_open_probes = 0;
  CHECK_THROWS_WITH(CircuitBreaker{o}, "CircuitBreakerOptions::half_open_probes must be at least 1");
}
