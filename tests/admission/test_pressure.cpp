#include <llmretry/admission/pressure.hpp>

#include <llmretry/testing.hpp>

#include "llmretry_catch.hpp"

using namespace llmretry;
using namespace std::chrono_literals;
using llmretry::testing::ManualClock;

TEST_CASE("pressure_of: the queue wait decides, then the headroom", "[pressure]") {
  CHECK(pressure_of(0ms, 1.0) == Pressure::normal);
  CHECK(pressure_of(0ms, 0.2) == Pressure::light);
  CHECK(pressure_of(1s, 0.0) == Pressure::moderate);
  CHECK(pressure_of(10s, 0.0) == Pressure::high);
  CHECK(pressure_of(60s, 0.0) == Pressure::extreme);
  CHECK(std::string(to_string(Pressure::moderate)) == "moderate");
}

TEST_CASE("pressure(deployment): rises as calls queue, extreme while the breaker is open", "[pressure]") {
  ManualClock clock;
  DeploymentOptions options;
  options.limits[Dimension::requests_per_minute] = Limit::per_minute(60, 4);  // one a second, 4 at once
  options.clock = std::ref(clock);
  Deployment deployment{options};
  CHECK(pressure(deployment) == Pressure::normal);
  for (int i = 0; i < 4; ++i) (void)deployment.reserve(Cost{}, clock.now());
  CHECK(deployment.limiter().queue_wait(clock.now()) == 1s);
  CHECK(pressure(deployment) == Pressure::moderate);
  for (int i = 0; i < 10; ++i) (void)deployment.reserve(Cost{}, clock.now());
  CHECK(pressure(deployment) == Pressure::high);  // 11 s of queue
  clock.advance(10500ms);
  CHECK(deployment.limiter().queue_wait(clock.now()) == 500ms);
  CHECK(pressure(deployment) == Pressure::light);  // a short queue, an eighth of the burst free
  clock.advance(10s);
  CHECK(pressure(deployment) == Pressure::normal);

  CircuitBreakerOptions breaker_options;
  breaker_options.minimum_throughput = 1;
  breaker_options.break_duration = 5s;
  breaker_options.clock = std::ref(clock);
  CircuitBreaker breaker{breaker_options};
  const auto pass = breaker.try_pass(clock.now());
  breaker.record(pass, true, clock.now());
  CHECK(pressure(deployment, &breaker) == Pressure::extreme);
  clock.advance(5s);
  CHECK(pressure(deployment, &breaker) == Pressure::high);  // half-open: being probed

  PressureThresholds bad;
  bad.high_wait = bad.moderate_wait;
  CHECK_THROWS_WITH(pressure(deployment, nullptr, bad), "PressureThresholds::high_wait must exceed moderate_wait");
}

TEST_CASE("A 429's pause is queue wait", "[pressure]") {
  ManualClock clock;
  DeploymentOptions options;
  options.clock = std::ref(clock);
  Deployment deployment{options};
  deployment.limiter().pause_until(clock.now() + 30s);
  CHECK(deployment.limiter().queue_wait(clock.now()) == 30s);
  CHECK(pressure(deployment) == Pressure::high);
}
