#include <llmretry/admission/retry_budget.hpp>

#include <llmretry/admission/deployment.hpp>
#include <llmretry/retry.hpp>
#include <llmretry/testing.hpp>

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

namespace {

RetryBudgetOptions options_with(ManualClock& clock, double ratio, double min_per_second) {
  RetryBudgetOptions options;
  options.ratio = ratio;
  options.min_per_second = min_per_second;
  options.window = 10s;
  options.clock = std::ref(clock);
  return options;
}

}  // namespace

TEST_CASE("Retries are allowed up to the ratio of first attempts in the window", "[retry_budget]") {
  ManualClock clock;
  RetryBudget budget{options_with(clock, 0.1, 0.0)};
  CHECK(budget.available(clock.now()) == 0);
  CHECK_FALSE(budget.try_withdraw(clock.now()));
  for (int i = 0; i < 30; ++i) budget.deposit(clock.now());
  CHECK(budget.available(clock.now()) == 3);
  CHECK(budget.try_withdraw(clock.now()));
  CHECK(budget.try_withdraw(clock.now()));
  CHECK(budget.try_withdraw(clock.now()));
  CHECK_FALSE(budget.try_withdraw(clock.now()));
  CHECK(budget.stats().first_attempts == 30);
  CHECK(budget.stats().retries == 3);
  CHECK(budget.stats().refused == 2);

  SECTION("what leaves the window no longer counts") {
    clock.advance(9s);
    CHECK_FALSE(budget.try_withdraw(clock.now()));  // the deposits and withdrawals are still in the window
    clock.advance(1s);
    CHECK(budget.available(clock.now()) == 0);  // both left: no deposits, no floor
    budget.deposit(clock.now());
    for (int i = 0; i < 9; ++i) budget.deposit(clock.now());
    CHECK(budget.try_withdraw(clock.now()));
  }
}

TEST_CASE("The floor lets a quiet client retry; it is a floor, not added to the ratio", "[retry_budget]") {
  ManualClock clock;
  RetryBudget budget{options_with(clock, 0.1, 0.5)};  // 5 retries per 10 s window whatever the traffic
  CHECK(budget.available(clock.now()) == 5);
  for (int i = 0; i < 5; ++i) CHECK(budget.try_withdraw(clock.now()));
  CHECK_FALSE(budget.try_withdraw(clock.now()));
  for (int i = 0; i < 100; ++i) budget.deposit(clock.now());
  CHECK(budget.available(clock.now()) == 5);  // max(10, 5) - 5, not 10 + 5 - 5
}

TEST_CASE("A retry budget with options out of range is refused, naming the field", "[retry_budget]") {
  RetryBudgetOptions options;
  options.ratio = -0.1;
  CHECK_THROWS_WITH(RetryBudget{options}, "RetryBudgetOptions::ratio must be in [0, 10]");
  options.ratio = 0.1;
  options.min_per_second = -1;
  CHECK_THROWS_WITH(RetryBudget{options}, "RetryBudgetOptions::min_per_second must be in [0, 1000000]");
  options.min_per_second = 1;
  options.window = 1ms;
  CHECK_THROWS_WITH(RetryBudget{options}, "RetryBudgetOptions::window must be in [10 ms, 1 h]");
}

TEST_CASE("The budget's guard never refuses a first attempt and stops a refused retry", "[retry_budget]") {
  ManualClock clock;
  FakeSleep sleep{clock};
  RetryBudget budget{options_with(clock, 0.5, 0.0)};
  GiveUpRecorder recorder;

  // The first call deposits and earns half a retry: its retry is refused, with the last failure.
  SimulatedProvider provider{"server_error*3"};
  CHECK_THROWS_AS(call_with_retry([&] { return provider.call([] { return 1; }); }, no_jitter(), sleep, budget.guard(),
                                  recorder.options),
                  ProviderError);
  CHECK(provider.calls() == 1);
  REQUIRE(recorder.gave_up);
  CHECK(recorder.gave_up->reason == StopReason::retry_budget);
  CHECK(recorder.gave_up->failure.kind == FailureKind::server_error);
  CHECK(recorder.gave_up->failure.status == 503);

  // A second call deposits too: one retry is now allowed, then the budget is spent.
  SimulatedProvider twice{"server_error*2"};
  CHECK_THROWS_AS(call_with_retry([&] { return twice.call([] { return 1; }); }, no_jitter(), sleep, budget.guard(),
                                  recorder.options),
                  ProviderError);
  CHECK(twice.calls() == 2);
  CHECK(budget.stats().retries == 1);
  CHECK(budget.stats().refused == 2);
}

TEST_CASE("A retry admitted by the budget but not sent is given back", "[retry_budget]") {
  ManualClock clock;
  FakeSleep sleep{clock};
  RetryBudget budget{options_with(clock, 1.0, 0.0)};
  budget.deposit(clock.now());  // one retry available
  Limits limits;
  limits[Dimension::requests_per_minute] = Limit::per_minute(1);
  DeploymentOptions deployment_options;
  deployment_options.limits = limits;
  deployment_options.clock = std::ref(clock);
  deployment_options.max_queue_wait = 1s;
  Deployment deployment{deployment_options};
  (void)deployment.reserve(Cost{}, clock.now());  // the minute's request is used: pacing refuses

  Attempt retry;
  retry.number = 2;
  auto both = guards(budget.guard(), deployment.pace(Cost{}));
  CHECK_FALSE(both.admit(retry).admitted());
  CHECK(budget.available(clock.now()) == 1);
  CHECK(budget.stats().retries == 0);
}
