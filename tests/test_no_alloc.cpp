// The success path of call_with_retry allocates nothing: every operator new in this program is counted.
#include <llmretry/llmretry.hpp>

#include <optional>
#include <random>

#include "counting_new.hpp"
#include "llmretry_catch.hpp"

TEST_CASE("The counter sees allocations", "[no_alloc]") {
  CHECK(allocations_during([] {
          int* volatile p = new int(1);  // through a volatile pointer: the allocation cannot be elided
          delete p;
        }) == 1);
}

TEST_CASE("A first attempt that succeeds allocates nothing", "[no_alloc]") {
  SECTION("all defaults: real sleep, thread generator, default options") {
    CHECK(allocations_during([] {
            volatile int sink = llmretry::call_with_retry([] { return 1; });
            (void)sink;
          }) == 0);
  }
  SECTION("every argument given") {
    CHECK(allocations_during([] {
            std::mt19937 rng(1);
            volatile int sink = llmretry::call_with_retry(
                [] { return 1; }, llmretry::RetryPolicy::batch(), [](std::chrono::milliseconds) {}, rng,
                [](int, const llmretry::Failure&, std::chrono::milliseconds) {}, llmretry::CallOptions{});
            (void)sink;
          }) == 0);
  }
  SECTION("the result-value style") {
    CHECK(allocations_during([] {
            const auto result = llmretry::call_with_retry([] { return llmretry::Result<int>(1); });
            (void)result;
          }) == 0);
  }
}

TEST_CASE("A paced first attempt that succeeds allocates nothing, a free concurrency slot included", "[no_alloc]") {
  static std::optional<llmretry::Deployment> deployment;
  static std::optional<llmretry::CircuitBreaker> breaker;
  llmretry::DeploymentOptions options;
  options.limits = llmretry::Limits::per_minute(600'000, 100'000'000);
  options.concurrency = 4;
  deployment.emplace(options);
  breaker.emplace(llmretry::CircuitBreakerOptions{});
  SECTION("through the deployment") {
    CHECK(allocations_during([] {
            auto pacing = deployment->pace(llmretry::Cost{1, 10, 10});
            volatile int sink = llmretry::call_with_retry([] { return 1; }, llmretry::RetryPolicy{}, pacing);
            (void)sink;
          }) == 0);
  }
  SECTION("through a breaker and the deployment") {
    CHECK(allocations_during([] {
            auto both = llmretry::guards(breaker->guard(), deployment->pace(llmretry::Cost{1, 10, 10}));
            volatile int sink = llmretry::call_with_retry([] { return 1; }, llmretry::RetryPolicy{}, both);
            (void)sink;
          }) == 0);
  }
  CHECK(deployment->concurrency()->in_use() == 0);
}

TEST_CASE("A retry decision allocates nothing", "[no_alloc]") {
  CHECK(allocations_during([] {
          llmretry::RetryState state{llmretry::RetryPolicy{}};
          std::mt19937_64 rng(1);
          volatile bool retry = state.next(llmretry::classify_status(503), rng).retry;
          (void)retry;
        }) == 0);
}
