#include <llmretry/policy.hpp>

#include <stdexcept>
#include <string>

#include "llmretry_catch.hpp"

using llmretry::Jitter;
using llmretry::RetryPolicy;
using namespace std::chrono_literals;

namespace {
std::string validation_message(const RetryPolicy& policy) {
  try {
    policy.validate();
  } catch (const std::invalid_argument& error) {
    return error.what();
  }
  return "";
}
}  // namespace

TEST_CASE("RetryPolicy defaults: 4 attempts, 0.5 s base, 8 s cap, full jitter, 20 s of waiting", "[policy]") {
  const RetryPolicy policy;
  CHECK(policy.max_attempts == 4);
  CHECK(policy.base == 500ms);
  CHECK(policy.cap == 8s);
  CHECK(policy.max_total_wait == 20s);
  CHECK(policy.jitter == Jitter::full);
  CHECK_FALSE(policy.max_provider_wait.has_value());
  CHECK(policy.provider_wait_limit() == 8s);
  CHECK_NOTHROW(policy.validate());
}

TEST_CASE("RetryPolicy presets", "[policy]") {
  SECTION("interactive: 3 attempts, 8 s of waiting") {
    const auto policy = RetryPolicy::interactive();
    CHECK(policy.max_attempts == 3);
    CHECK(policy.max_total_wait == 8s);
    CHECK_NOTHROW(policy.validate());
  }
  SECTION("batch: 8 attempts, 300 s of waiting, a 60 s cap, provider waits spread by 1 s") {
    const auto policy = RetryPolicy::batch();
    CHECK(policy.max_attempts == 8);
    CHECK(policy.max_total_wait == 300s);
    CHECK(policy.cap == 60s);
    CHECK(policy.provider_wait_limit() == 60s);
    CHECK(policy.provider_wait_jitter == 1s);
    CHECK_NOTHROW(policy.validate());
  }
}

TEST_CASE("max_provider_wait overrides the cap as the longest accepted provider wait", "[policy]") {
  RetryPolicy policy;
  policy.max_provider_wait = 30s;
  CHECK(policy.provider_wait_limit() == 30s);
  policy.max_provider_wait = 0ms;
  CHECK(policy.provider_wait_limit() == 0ms);  // zero means zero, not "default"
}

TEST_CASE("A policy that makes no sense is refused, naming the field", "[policy]") {
  RetryPolicy policy;
  SECTION("max_attempts below 1") {
    policy.max_attempts = 0;
    CHECK(validation_message(policy) == "RetryPolicy::max_attempts must be at least 1");
    policy.max_attempts = -3;
    CHECK(validation_message(policy).find("max_attempts") != std::string::npos);
  }
  SECTION("negative base") {
    policy.base = -1ms;
    CHECK(validation_message(policy) == "RetryPolicy::base must not be negative");
  }
  SECTION("negative cap") {
    policy.base = 0ms;
    policy.cap = -1ms;
    CHECK(validation_message(policy) == "RetryPolicy::cap must not be negative");
  }
  SECTION("cap below base") {
    policy.base = 2s;
    policy.cap = 1s;
    CHECK(validation_message(policy) == "RetryPolicy::cap must not be less than RetryPolicy::base");
  }
  SECTION("negative max_total_wait") {
    policy.max_total_wait = -1ms;
    CHECK(validation_message(policy) == "RetryPolicy::max_total_wait must not be negative");
  }
  SECTION("negative max_provider_wait") {
    policy.max_provider_wait = -5ms;
    CHECK(validation_message(policy) == "RetryPolicy::max_provider_wait must not be negative");
  }
  SECTION("negative provider_wait_jitter") {
    policy.provider_wait_jitter = -1ms;
    CHECK(validation_message(policy) == "RetryPolicy::provider_wait_jitter must not be negative");
  }
  SECTION("a jitter that is not an enumerator") {
    policy.jitter = static_cast<Jitter>(42);
    CHECK(validation_message(policy) == "RetryPolicy::jitter is not a Jitter value");
  }
}

TEST_CASE("Zero durations and one attempt are meaningful, not defaults", "[policy]") {
  RetryPolicy policy;
  policy.max_attempts = 1;
  policy.base = 0ms;
  policy.cap = 0ms;
  policy.max_total_wait = 0ms;
  CHECK_NOTHROW(policy.validate());
}

TEST_CASE("Jitter names", "[policy]") {
  CHECK(std::string(llmretry::to_string(Jitter::none)) == "none");
  CHECK(std::string(llmretry::to_string(Jitter::full)) == "full");
  CHECK(std::string(llmretry::to_string(Jitter::equal)) == "equal");
  CHECK(std::string(llmretry::to_string(Jitter::decorrelated)) == "decorrelated");
  CHECK(std::string(llmretry::to_string(static_cast<Jitter>(9))) == "unknown");
}
