#include <llmretry/metrics/observe.hpp>

#include <llmretry/admission/deployment.hpp>
#include <llmretry/admission/tokens.hpp>
#include <llmretry/fallback.hpp>
#include <llmretry/json/usage.hpp>
#include <llmretry/metrics/registry.hpp>
#include <llmretry/retry.hpp>
#include <llmretry/testing.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "helpers.hpp"
#include "llmretry_catch.hpp"

using namespace llmretry;
using llmretry::testing::FakeSleep;
using llmretry::testing::SimulatedProvider;
using llmretry_test::no_jitter;

namespace {

const metrics::Target gpt{"openai", "gpt-5.5"};

// An Observer that writes down every event it hears, in order.
struct Recorder : metrics::Observer {
  std::vector<std::string> events;

  void request_finished(const metrics::Target& target, std::string_view status) override {
    events.push_back("finished " + target.provider + "/" + target.model + " " + std::string(status));
  }
  void retried(const metrics::Target& /*target*/, const Failure& failure, int resend_count) override {
    events.push_back(std::string("retried after ") + to_string(failure.kind) + " " + std::to_string(resend_count));
  }
  void rate_limited(const metrics::Target& /*target*/, metrics::LimitType limit_type) override {
    events.push_back(std::string("rate limited ") + to_string(limit_type));
  }
  void tokens_reserved(const metrics::Target& /*target*/, std::uint64_t tokens) override {
    events.push_back("reserved " + std::to_string(tokens));
  }
  void tokens_used(const metrics::Target& /*target*/, std::uint64_t tokens) override {
    events.push_back("used " + std::to_string(tokens));
  }
  void fell_back(const metrics::Target& from, const metrics::Target& to, FallbackReason reason) override {
    events.push_back("fell back " + from.provider + "/" + from.model + " -> " + to.provider + "/" + to.model + " " +
                     to_string(reason));
  }
};

// An Observer whose every event throws, as a failing metrics backend might.
struct Throwing : metrics::Observer {
  void request_finished(const metrics::Target& /*target*/, std::string_view /*status*/) override { fail(); }
  void retried(const metrics::Target& /*target*/, const Failure& /*failure*/, int /*resend_count*/) override { fail(); }
  void rate_limited(const metrics::Target& /*target*/, metrics::LimitType /*limit_type*/) override { fail(); }
  void tokens_reserved(const metrics::Target& /*target*/, std::uint64_t /*tokens*/) override { fail(); }
  void tokens_used(const metrics::Target& /*target*/, std::uint64_t /*tokens*/) override { fail(); }
  [[noreturn]] static void fail() { throw std::runtime_error("metrics backend down"); }
};

// An answer with a body, as a usage reader reads it.
struct Answer {
  std::string body;
};

const UsageReader json_usage = [](std::string_view body) { return json::usage_of(body); };

// A guard that refuses attempt number `from` and later ones with `reason`.
struct RefuseFrom {
  int from;
  StopReason reason;
  Admission<NoGuard::Ticket> admit(const Attempt& attempt) const {
    if (attempt.number >= from)
      return Admission<NoGuard::Ticket>::refuse(
          Refusal{reason, Failure::of(FailureKind::rate_limited, Sent::not_sent)});
    return Admission<NoGuard::Ticket>::go(NoGuard::Ticket{});
  }
};

}  // namespace

TEST_CASE("observe reports a call that succeeds at once", "[metrics][observe]") {
  Recorder recorder;
  SimulatedProvider provider({});
  CHECK(call_with_retry([&] { return provider.call([] { return 42; }); }, no_jitter(),
                        metrics::observe(recorder, gpt)) == 42);
  CHECK(recorder.events == std::vector<std::string>{"finished openai/gpt-5.5 success"});
}

TEST_CASE("observe reports each resend with the failure before it, and rate-limit hits", "[metrics][observe]") {
  Recorder recorder;
  FakeSleep sleep;
  SimulatedProvider provider({"rate_limit_ms:10", "server_error", "ok"});
  CHECK(call_with_retry([&] { return provider.call([] { return 1; }); }, no_jitter(), sleep,
                        metrics::observe(recorder, gpt)) == 1);
  CHECK(recorder.events == std::vector<std::string>{"rate limited unknown", "retried after rate_limited 1",
                                                    "retried after server_error 2", "finished openai/gpt-5.5 success"});
}

TEST_CASE("observe reports a call that gives up", "[metrics][observe]") {
  Recorder recorder;
  FakeSleep sleep;
  RetryPolicy policy = no_jitter();
  policy.max_attempts = 2;
  SimulatedProvider provider({"server_error*5"});
  const auto call = [&] { return provider.call([] { return 1; }); };

  SECTION("without being told why: gave_up") {
    CHECK_THROWS_AS(call_with_retry(call, policy, sleep, metrics::observe(recorder, gpt)), ProviderError);
    CHECK(recorder.events ==
          std::vector<std::string>{"retried after server_error 1", "finished openai/gpt-5.5 gave_up"});
  }
  SECTION("told why through on_give_up: the stop reason") {
    auto observed = metrics::observe(recorder, gpt);
    CallOptions options;
    options.on_give_up = [&](const GiveUp& report) { observed.gave_up(report); };
    CHECK_THROWS_AS(call_with_retry(call, policy, sleep, observed, options), ProviderError);
    CHECK(recorder.events ==
          std::vector<std::string>{"retried after server_error 1", "finished openai/gpt-5.5 attempts_exhausted"});
  }
  SECTION("a failure that is not retried, told why") {
    SimulatedProvider bad({"context_length"});
    auto observed = metrics::observe(recorder, gpt);
    CallOptions options;
    options.on_give_up = [&](const GiveUp& report) { observed.gave_up(report); };
    CHECK_THROWS_AS(call_with_retry([&] { return bad.call([] { return 1; }); }, policy, sleep, observed, options),
                    ProviderError);
    CHECK(recorder.events == std::vector<std::string>{"finished openai/gpt-5.5 not_retryable"});
  }
}

TEST_CASE("observe reports an attempt another guard refused", "[metrics][observe]") {
  Recorder recorder;
  FakeSleep sleep;
  SimulatedProvider provider({"server_error", "ok"});
  const auto call = [&] { return provider.call([] { return 1; }); };

  SECTION("without being told why: not_sent") {
    CHECK_THROWS_AS(call_with_retry(call, no_jitter(), sleep,
                                    guards(metrics::observe(recorder, gpt), RefuseFrom{2, StopReason::circuit_open})),
                    ProviderError);
    CHECK(recorder.events == std::vector<std::string>{"finished openai/gpt-5.5 not_sent"});
  }
  SECTION("told why: the refusal's reason; a refusal for want of capacity is a rate-limit hit") {
    auto observed = metrics::observe(recorder, gpt);
    CallOptions options;
    options.on_give_up = [&](const GiveUp& report) { observed.gave_up(report); };
    CHECK_THROWS_AS(
        call_with_retry(call, no_jitter(), sleep, guards(observed, RefuseFrom{2, StopReason::no_capacity}), options),
        ProviderError);
    CHECK(recorder.events == std::vector<std::string>{"rate limited unknown", "finished openai/gpt-5.5 no_capacity"});
  }
  SECTION("a first attempt refused before observe was asked: reported only when told") {
    auto observed = metrics::observe(recorder, gpt);
    CallOptions options;
    options.on_give_up = [&](const GiveUp& report) { observed.gave_up(report); };
    CHECK_THROWS_AS(
        call_with_retry(call, no_jitter(), sleep, guards(RefuseFrom{1, StopReason::circuit_open}, observed), options),
        AttemptRefused);
    CHECK(recorder.events == std::vector<std::string>{"finished openai/gpt-5.5 circuit_open"});
    recorder.events.clear();
    CHECK_THROWS_AS(call_with_retry(call, no_jitter(), sleep,
                                    guards(RefuseFrom{1, StopReason::circuit_open}, metrics::observe(recorder, gpt))),
                    AttemptRefused);
    CHECK(recorder.events.empty());
  }
}

TEST_CASE("observe reports the tokens reserved for each attempt sent and those an answer used", "[metrics][observe]") {
  Recorder recorder;
  FakeSleep sleep;
  SimulatedProvider provider({"server_error"});
  const UsageReader read_usage = [](std::string_view body) -> std::optional<Cost> {
    if (body.empty()) return std::nullopt;
    return Cost{1, 10, 5};
  };
  CHECK(call_with_retry([&] { return provider.call([] { return Answer{"answer"}; }); }, no_jitter(), sleep,
                        metrics::observe(recorder, gpt, estimate_cost(100, 50), read_usage))
            .body == "answer");
  CHECK(recorder.events == std::vector<std::string>{"reserved 150", "retried after server_error 1", "reserved 150",
                                                    "used 15", "finished openai/gpt-5.5 success"});
  SECTION("a usage with negative or huge counts: counted as the tokens-per-minute limit charges them") {
    recorder.events.clear();
    const UsageReader odd_usage = [](std::string_view body) -> std::optional<Cost> {
      if (body == "negative") return Cost{1, -10, 3};
      return Cost{1, std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::max()};
    };
    call_with_retry([] { return Answer{"negative"}; }, no_jitter(),
                    metrics::observe(recorder, gpt, std::nullopt, odd_usage));
    call_with_retry([] { return Answer{"huge"}; }, no_jitter(),
                    metrics::observe(recorder, gpt, std::nullopt, odd_usage));
    CHECK(recorder.events == std::vector<std::string>{"used 3", "finished openai/gpt-5.5 success", "used 2000000000000",
                                                      "finished openai/gpt-5.5 success"});
  }
  SECTION("an estimate alone") {
    recorder.events.clear();
    call_with_retry([] {}, no_jitter(), metrics::observe(recorder, gpt, estimate_cost(7, 0)));
    CHECK(recorder.events == std::vector<std::string>{"reserved 7", "finished openai/gpt-5.5 success"});
  }
  SECTION("an attempt that failed without being sent: no tokens reserved, and it is no resend") {
    recorder.events.clear();
    SimulatedProvider refused({"server_error", "connection_refused", "ok"});
    call_with_retry([&] { refused.call(); }, no_jitter(), sleep, metrics::observe(recorder, gpt, estimate_cost(7, 0)));
    CHECK(recorder.events == std::vector<std::string>{"reserved 7", "retried after connection 2", "reserved 7",
                                                      "finished openai/gpt-5.5 success"});
  }
}

TEST_CASE("observe never changes what a call does", "[metrics][observe]") {
  FakeSleep sleep;
  SECTION("an observer that throws: the events are dropped, the call goes on") {
    Throwing throwing;
    SimulatedProvider provider({"server_error", "rate_limit_ms:5", "ok"});
    CHECK(call_with_retry([&] { return provider.call([] { return Answer{"answer"}; }); }, no_jitter(), sleep,
                          metrics::observe(throwing, gpt, estimate_cost(10, 10), json_usage))
              .body == "answer");
    CHECK(provider.calls() == 3);
    CHECK_NOTHROW(call_with_retry([] {}, no_jitter(), metrics::observe(throwing, gpt)));
  }
  SECTION("a usage reader that throws: no tokens used, the call succeeds") {
    Recorder recorder;
    const UsageReader throwing_reader = [](std::string_view /*body*/) -> std::optional<Cost> {
      throw std::runtime_error("bad usage");
    };
    CHECK(call_with_retry([] { return Answer{"answer"}; }, no_jitter(),
                          metrics::observe(recorder, gpt, std::nullopt, throwing_reader))
              .body == "answer");
    CHECK(recorder.events == std::vector<std::string>{"finished openai/gpt-5.5 success"});
  }
  SECTION("before a deployment's pacing: a success is settled, not given back") {
    Throwing throwing;
    DeploymentOptions options;
    options.limits = Limits::per_minute(100, 10'000);
    options.read_usage = json_usage;
    Deployment deployment(options);
    const Cost estimate = estimate_cost(100, 50);
    CHECK(call_with_retry([] { return Answer{R"({"usage":{"prompt_tokens":20,"completion_tokens":10}})"}; },
                          no_jitter(),
                          guards(metrics::observe(throwing, gpt, estimate, json_usage), deployment.pace(estimate)))
              .body.size() > 0);
    const RateLimiterStats stats = deployment.limiter().stats();
    CHECK(stats.tokens_released == 0);
    CHECK(stats.tokens_used == 30);
  }
}

TEST_CASE("observe reports the limit a deployment's pacing refused a call for", "[metrics][observe]") {
  Recorder recorder;
  FakeSleep sleep;
  DeploymentOptions options;
  options.max_queue_wait = std::chrono::milliseconds{0};
  const auto refused_call = [&](Deployment& deployment) {
    auto observed = metrics::observe(recorder, gpt);
    CallOptions call_options;
    call_options.on_give_up = [&](const GiveUp& report) { observed.gave_up(report); };
    CHECK_THROWS_AS(
        call_with_retry([] {}, no_jitter(), sleep, guards(observed, deployment.pace(Cost{1, 10, 0})), call_options),
        AttemptRefused);
  };
  SECTION("a concurrency slot") {
    options.concurrency = 1;
    Deployment deployment(options);
    REQUIRE(deployment.concurrency()->try_acquire());  // the only slot is taken
    refused_call(deployment);
    deployment.concurrency()->release();
    CHECK(recorder.events ==
          std::vector<std::string>{"rate limited concurrency", "finished openai/gpt-5.5 no_capacity"});
  }
  SECTION("the rate of requests") {
    options.limits[Dimension::requests_per_minute] = Limit::per_minute(1);
    Deployment deployment(options);
    call_with_retry([] {}, no_jitter(), sleep, deployment.pace(Cost{1, 10, 0}));  // the only request this minute
    refused_call(deployment);
    CHECK(recorder.events == std::vector<std::string>{"rate limited requests", "finished openai/gpt-5.5 no_capacity"});
  }
  SECTION("the rate of tokens") {
    options.limits[Dimension::tokens_per_minute] = Limit::per_minute(10);
    Deployment deployment(options);
    call_with_retry([] {}, no_jitter(), sleep, deployment.pace(Cost{1, 10, 0}));
    refused_call(deployment);
    CHECK(recorder.events == std::vector<std::string>{"rate limited tokens", "finished openai/gpt-5.5 no_capacity"});
  }
}

TEST_CASE("observe moved from reports nothing", "[metrics][observe]") {
  Recorder recorder;
  auto observed = metrics::observe(recorder, gpt, estimate_cost(1, 1));
  static_assert(std::is_nothrow_move_constructible_v<metrics::ObservedCall> ==
                std::is_nothrow_move_constructible_v<UsageReader>);  // std::function's move: noexcept since C++20
  auto taken = std::move(observed);
  call_with_retry([] {}, no_jitter(), observed);  // NOLINT(bugprone-use-after-move): what is tested
  CHECK(recorder.events.empty());
  call_with_retry([] {}, no_jitter(), taken);
  call_with_retry([] {}, no_jitter(), taken);
  CHECK(recorder.events == std::vector<std::string>{"reserved 2", "finished openai/gpt-5.5 success", "reserved 2"});
}

TEST_CASE("observe works with calls that return results", "[metrics][observe]") {
  Recorder recorder;
  FakeSleep sleep;
  SimulatedProvider provider({"timeout", "ok"});
  const Result<int> result = call_with_retry([&] { return provider.try_call([] { return 3; }); }, no_jitter(), sleep,
                                             metrics::observe(recorder, gpt));
  CHECK(result.has_value());
  CHECK(recorder.events == std::vector<std::string>{"retried after timeout 1", "finished openai/gpt-5.5 success"});
}

TEST_CASE("observe kept in a variable reports each call when the next one starts", "[metrics][observe]") {
  Recorder recorder;
  FakeSleep sleep;
  SimulatedProvider provider({"ok", "connection_refused", "ok"});
  const auto call = [&] { return provider.call([] { return 1; }); };
  {
    auto observed = metrics::observe(recorder, gpt);
    call_with_retry(call, no_jitter(), sleep, observed);
    CHECK(recorder.events.empty());
    call_with_retry(call, no_jitter(), sleep, observed);
    CHECK(recorder.events == std::vector<std::string>{"finished openai/gpt-5.5 success", "retried after connection 1"});
  }
  CHECK(recorder.events == std::vector<std::string>{"finished openai/gpt-5.5 success", "retried after connection 1",
                                                    "finished openai/gpt-5.5 success"});
}

TEST_CASE("observe feeds a Registry", "[metrics][observe]") {
  metrics::Registry registry;
  FakeSleep sleep;
  SimulatedProvider provider({"rate_limit_ms:5", "ok"});
  call_with_retry([&] { provider.call(); }, no_jitter(), sleep, metrics::observe(registry, gpt));
  const std::string text = registry.prometheus_text();
  using llmretry_catch::contains;
  CHECK_THAT(text, contains("llm_requests_total{provider=\"openai\",model=\"gpt-5.5\",status=\"success\"} 1\n"));
  CHECK_THAT(text,
             contains("llm_retries_total{provider=\"openai\",model=\"gpt-5.5\",error_type=\"rate_limited\"} 1\n"));
  CHECK_THAT(text,
             contains("llm_rate_limit_hits_total{provider=\"openai\",model=\"gpt-5.5\",limit_type=\"unknown\"} 1\n"));
}

TEST_CASE("report_moves reports the moves of call_with_fallback with the routes' targets", "[metrics][observe]") {
  Recorder recorder;
  FakeSleep sleep;
  RetryPolicy policy = no_jitter();
  policy.max_attempts = 1;
  const FallbackChain chain({Route{"primary", "openai", "gpt-5.5", {}},
                             Route{"backup", "anthropic", "claude-sonnet-4.6", {FallbackReason::provider_5xx}}});
  std::vector<std::string> told;
  FallbackOptions options;
  options.on_move = metrics::report_moves(recorder, chain, [&](const Move& move) { told.push_back(move.to); });
  const auto routed = call_with_fallback(
      chain,
      [](const Route& route) -> std::string {
        if (route.name == "primary") throw ProviderError("down", Failure::of(FailureKind::server_error, Sent::refused));
        return "ok";
      },
      policy, options, sleep);
  CHECK(routed.answer == "ok");
  CHECK(recorder.events ==
        std::vector<std::string>{"fell back openai/gpt-5.5 -> anthropic/claude-sonnet-4.6 provider_5xx"});
  CHECK(told == std::vector<std::string>{"backup"});
}
