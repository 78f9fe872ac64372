#include <llmretry/sim/provider.hpp>

#include <chrono>
#include <stdexcept>
#include <string>

#include "llmretry_catch.hpp"

using namespace std::chrono_literals;
using llmretry::FailureKind;
using llmretry::sim::Bucket;
using llmretry::sim::BusyAnswer;
using llmretry::sim::Outcome;
using llmretry::sim::ProviderModel;
using llmretry::sim::ProviderSpec;
using llmretry::sim::RetryAfterMode;
using llmretry::sim::Time;

TEST_CASE("start_interval: a request at t is served iff t >= last start + interval") {
  ProviderSpec spec;
  spec.start_interval = 250ms;
  ProviderModel provider{spec, 1};
  CHECK(provider.request(Time{0}).outcome == Outcome::served);
  const auto refused = provider.request(Time{0});
  CHECK(refused.outcome == Outcome::refused);
  REQUIRE(refused.failure);
  CHECK(refused.failure->status == 429);
  CHECK(refused.failure->kind == FailureKind::rate_limited);
  CHECK_FALSE(refused.failure->provider_wait);  // RetryAfterMode::none
  CHECK(provider.request(Time{249}).outcome == Outcome::refused);
  CHECK(provider.request(Time{250}).outcome == Outcome::served);
  CHECK(provider.request(Time{499}).outcome == Outcome::refused);
  CHECK(provider.request(Time{600}).outcome == Outcome::served);
  CHECK(provider.request(Time{850}).outcome == Outcome::served);
}

TEST_CASE("Retry-After: none, fixed, or the precise time until capacity returns") {
  ProviderSpec spec;
  spec.start_interval = 1s;
  SECTION("fixed") {
    spec.retry_after_header = RetryAfterMode::fixed;
    spec.fixed_retry_after = 30s;
    ProviderModel provider{spec, 1};
    CHECK(provider.request(Time{0}).outcome == Outcome::served);
    CHECK(provider.request(Time{100}).failure->provider_wait == 30s);
  }
  SECTION("precise") {
    spec.retry_after_header = RetryAfterMode::precise;
    ProviderModel provider{spec, 1};
    CHECK(provider.request(Time{0}).outcome == Outcome::served);
    CHECK(provider.request(Time{100}).failure->provider_wait == 900ms);
    CHECK(provider.request(Time{999}).failure->provider_wait == 1ms);
  }
}

TEST_CASE("requests bucket (RPM): a burst of capacity, then capacity per period") {
  ProviderSpec spec;
  spec.requests = Bucket{600, 60s};  // one request every 100 ms once the burst is spent
  spec.retry_after_header = RetryAfterMode::precise;
  ProviderModel provider{spec, 1};
  for (int i = 0; i < 600; ++i) REQUIRE(provider.request(Time{0}).outcome == Outcome::served);
  const auto refused = provider.request(Time{0});
  CHECK(refused.outcome == Outcome::refused);
  CHECK(refused.failure->provider_wait == 100ms);
  CHECK(provider.request(Time{99}).failure->provider_wait == 1ms);
  CHECK(provider.request(Time{100}).outcome == Outcome::served);
  CHECK(provider.request(Time{150}).outcome == Outcome::refused);
  // A full period of silence refills it completely, never beyond the capacity.
  for (int i = 0; i < 600; ++i) REQUIRE(provider.request(Time{600'000}).outcome == Outcome::served);
  CHECK(provider.request(Time{600'000}).outcome == Outcome::refused);
}

TEST_CASE("tokens bucket (TPM): 100,000 tokens per minute refill 1,666.7 tokens a second") {
  ProviderSpec spec;
  spec.tokens = Bucket{100'000, 60s};
  spec.tokens_per_request = 2000;
  spec.retry_after_header = RetryAfterMode::precise;
  ProviderModel provider{spec, 1};
  for (int i = 0; i < 50; ++i) REQUIRE(provider.request(Time{0}).outcome == Outcome::served);
  const auto refused = provider.request(Time{0});
  CHECK(refused.outcome == Outcome::refused);
  CHECK(refused.failure->provider_wait == 1200ms);  // 2,000 tokens at 100,000 / 60 s
  // At 688 ms, 1,146.7 tokens are back: 853.3 missing, 512 ms more.
  CHECK(provider.request(Time{688}).failure->provider_wait == 512ms);
  CHECK(provider.request(Time{1199}).outcome == Outcome::refused);
  CHECK(provider.request(Time{1200}).outcome == Outcome::served);
}

TEST_CASE("concurrency limit with latency: slots free when answers go out") {
  ProviderSpec spec;
  spec.concurrency = 2;
  spec.latency = 1s;
  spec.retry_after_header = RetryAfterMode::precise;
  ProviderModel provider{spec, 1};
  const auto first = provider.request(Time{0});
  CHECK(first.outcome == Outcome::served);
  CHECK(first.latency == 1s);
  CHECK(provider.request(Time{300}).outcome == Outcome::served);
  const auto refused = provider.request(Time{500});
  CHECK(refused.outcome == Outcome::refused);
  CHECK(refused.latency == 0ms);
  CHECK(refused.failure->provider_wait == 500ms);
  CHECK(provider.request(Time{1000}).outcome == Outcome::served);  // the first answered at 1000
  CHECK(provider.request(Time{1000}).outcome == Outcome::refused);
}

TEST_CASE("limits compose: admitted only when every limit has room, and a refusal consumes nothing") {
  ProviderSpec spec;
  spec.start_interval = 100ms;
  spec.requests = Bucket{2, 1s};
  spec.retry_after_header = RetryAfterMode::precise;
  ProviderModel provider{spec, 1};
  CHECK(provider.request(Time{0}).outcome == Outcome::served);
  CHECK(provider.request(Time{50}).failure->provider_wait == 50ms);  // the interval is the only full limit
  CHECK(provider.request(Time{100}).outcome == Outcome::served);
  // Both limits full: the precise wait is the longer one (the bucket regains a request at 500 ms).
  CHECK(provider.request(Time{150}).failure->provider_wait == 350ms);
  CHECK(provider.request(Time{500}).outcome == Outcome::served);
}

TEST_CASE("conflict refusals are 409 with x-should-retry: true, after the refusal latency") {
  ProviderSpec spec;
  spec.start_interval = 20ms;
  spec.busy_answer = BusyAnswer::conflict;
  spec.latency = 40ms;
  spec.refusal_latency = 40ms;
  ProviderModel provider{spec, 1};
  CHECK(provider.request(Time{0}).latency == 40ms);
  const auto lost = provider.request(Time{10});
  CHECK(lost.outcome == Outcome::refused);
  CHECK(lost.latency == 40ms);
  CHECK(lost.failure->status == 409);
  CHECK(lost.failure->should_retry == true);
}

TEST_CASE("random 5xx and timeouts: their rates over many requests, and repeatable by seed") {
  ProviderSpec spec;
  spec.server_error_rate = 0.2;
  spec.timeout_rate = 0.1;
  spec.latency = 100ms;
  spec.timeout = 5s;
  const auto run = [&](std::uint64_t seed) {
    ProviderModel provider{spec, seed};
    std::string outcomes;
    int errors = 0, timeouts = 0;
    for (int i = 0; i < 20000; ++i) {
      const auto reply = provider.request(Time{i});
      outcomes += static_cast<char>('0' + static_cast<int>(reply.outcome));
      if (reply.outcome == Outcome::server_error) {
        ++errors;
        CHECK(reply.failure->status == 503);
        CHECK(reply.latency == 100ms);
      }
      if (reply.outcome == Outcome::timeout) {
        ++timeouts;
        CHECK(reply.failure->kind == FailureKind::timeout);
        CHECK(reply.latency == 5s);
      }
    }
    CHECK(errors > 3700);
    CHECK(errors < 4300);
    CHECK(timeouts > 1800);
    CHECK(timeouts < 2200);
    return outcomes;
  };
  CHECK(run(7) == run(7));
  CHECK(run(7) != run(8));
}

TEST_CASE("ProviderSpec::validate names the bad field") {
  const auto message = [](const ProviderSpec& spec) {
    try {
      spec.validate();
    } catch (const std::invalid_argument& error) {
      return std::string{error.what()};
    }
    return std::string{};
  };
  ProviderSpec spec;
  CHECK(message(spec).empty());
  SECTION("interval") {
    spec.start_interval = 0ms;
    CHECK(message(spec).find("start_interval") != std::string::npos);
  }
  SECTION("bucket capacity") {
    spec.requests = Bucket{0, 60s};
    CHECK(message(spec).find("requests.capacity") != std::string::npos);
  }
  SECTION("cost above the token capacity") {
    spec.tokens = Bucket{1000, 60s};
    spec.tokens_per_request = 1001;
    CHECK(message(spec).find("tokens_per_request") != std::string::npos);
  }
  SECTION("concurrency") {
    spec.concurrency = 0;
    CHECK(message(spec).find("concurrency") != std::string::npos);
  }
  SECTION("rates") {
    spec.server_error_rate = 0.7;
    spec.timeout_rate = 0.4;
    CHECK(message(spec).find("timeout_rate") != std::string::npos);
    spec.server_error_rate = -0.1;
    CHECK(message(spec).find("server_error_rate") != std::string::npos);
  }
  SECTION("the constructor validates") {
    spec.latency = -1ms;
    CHECK_THROWS_AS((ProviderModel{spec, 1}), std::invalid_argument);
  }
}
