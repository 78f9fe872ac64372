#include <llmretry/fallback.hpp>

#include <llmretry/testing.hpp>

#include <map>
#include <string>
#include <tuple>
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

namespace {

// The chain of the routing policy: anthropic first; openai on 5xx or 429 after the retries; google for a
// longer context or when the primary is unavailable.
std::vector<Route> routes() {
  return {Route{"anthropic/claude-sonnet-4.6", "anthropic", "claude-sonnet-4.6", {}},
          Route{"openai/gpt-5.5",
                "openai",
                "gpt-5.5",
                {FallbackReason::provider_5xx, FallbackReason::rate_limit_after_retry_budget}},
          Route{"google/gemini-3",
                "google",
                "gemini-3",
                {FallbackReason::context_length_needed, FallbackReason::primary_unavailable}}};
}

using Script = std::vector<std::string>;

// One scripted provider per route, answering with the route's provider.
struct Providers {
  std::map<std::string, SimulatedProvider> by_route;
  std::vector<std::string> called;

  explicit Providers(const Script& anthropic, const Script& openai = {}, const Script& google = {}) {
    add("anthropic/claude-sonnet-4.6", anthropic);
    add("openai/gpt-5.5", openai);
    add("google/gemini-3", google);
  }
  void add(const std::string& name, const Script& script) {
    by_route.emplace(std::piecewise_construct, std::forward_as_tuple(name), std::forward_as_tuple(script));
  }

  std::string operator()(const Route& route) {
    called.push_back(route.provider);
    return by_route.at(route.name).call([&] { return "answer from " + route.provider; });
  }
};

struct Recorder {
  FallbackOptions options;
  std::vector<Move> moves;
  std::optional<FallbackGiveUp> gave_up;
  Recorder() {
    options.on_move = [this](const Move& move) { moves.push_back(move); };
    options.on_give_up = [this](const FallbackGiveUp& report) { gave_up = report; };
  }
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;
};

}  // namespace

TEST_CASE("The primary answers: no move", "[fallback]") {
  const FallbackChain chain{routes()};
  FakeSleep sleep;
  Recorder recorder;
  Providers p{{"rate_limit"}};
  const auto routed = call_with_fallback(chain, std::ref(p), no_jitter(), recorder.options, sleep);
  CHECK(routed.answer == "answer from anthropic");
  CHECK(routed.route == "anthropic/claude-sonnet-4.6");
  CHECK(routed.moves.empty());
  CHECK(p.called == std::vector<std::string>{"anthropic", "anthropic"});
}

TEST_CASE("Each reason moves to the first later route that accepts it", "[fallback]") {
  const FallbackChain chain{routes()};
  FakeSleep sleep;
  Recorder recorder;

  SECTION("provider_5xx: after the retries of server errors") {
    Providers p{{"server_error*4"}};
    const auto routed = call_with_fallback(chain, std::ref(p), no_jitter(), recorder.options, sleep);
    CHECK(routed.answer == "answer from openai");
    REQUIRE(routed.moves.size() == 1);
    CHECK(routed.moves[0].from == "anthropic/claude-sonnet-4.6");
    CHECK(routed.moves[0].to == "openai/gpt-5.5");
    CHECK(routed.moves[0].reason == FallbackReason::provider_5xx);
    CHECK(recorder.moves.size() == 1);
  }
  SECTION("provider_5xx: timeouts and failed connections too") {
    Providers p{{"timeout*2", "connection_refused*2"}};
    CHECK(call_with_fallback(chain, std::ref(p), no_jitter(), recorder.options, sleep).moves.at(0).reason ==
          FallbackReason::provider_5xx);
  }
  SECTION("rate_limit_after_retry_budget: the policy's attempts ran out on 429s") {
    Providers p{{"rate_limit*4"}};
    const auto routed = call_with_fallback(chain, std::ref(p), no_jitter(), recorder.options, sleep);
    CHECK(routed.route == "openai/gpt-5.5");
    CHECK(routed.moves.at(0).reason == FallbackReason::rate_limit_after_retry_budget);
  }
  SECTION("rate_limit_after_retry_budget: the shared retry budget refused the retry") {
    ManualClock clock;
    RetryBudgetOptions budget_options;
    budget_options.ratio = 0;
    budget_options.min_per_second = 0;
    budget_options.clock = std::ref(clock);
    RetryBudget budget{budget_options};
    auto r = routes();
    r[0].budget = &budget;
    const FallbackChain budgeted{r};
    Providers p{{"rate_limit*4"}};
    const auto routed = call_with_fallback(budgeted, std::ref(p), no_jitter(), recorder.options, sleep);
    CHECK(routed.moves.at(0).reason == FallbackReason::rate_limit_after_retry_budget);
    CHECK(p.called == std::vector<std::string>{"anthropic", "openai"});
    CHECK(budget.stats().refused == 1);
  }
  SECTION("context_length_needed: skips the route that does not accept it") {
    Providers p{{"context_length"}};
    const auto routed = call_with_fallback(chain, std::ref(p), no_jitter(), recorder.options, sleep);
    CHECK(routed.route == "google/gemini-3");
    CHECK(routed.moves.at(0).reason == FallbackReason::context_length_needed);
    CHECK(p.called == std::vector<std::string>{"anthropic", "google"});
  }
  SECTION("primary_unavailable: the breaker is open; nothing is sent to the primary") {
    ManualClock clock;
    CircuitBreakerOptions breaker_options;
    breaker_options.minimum_throughput = 1;
    breaker_options.clock = std::ref(clock);
    CircuitBreaker breaker{breaker_options};
    breaker.record(breaker.try_pass(clock.now()), true, clock.now());
    auto r = routes();
    r[0].breaker = &breaker;
    Providers p{{"ok"}};
    const auto routed = call_with_fallback(FallbackChain{r}, std::ref(p), no_jitter(), recorder.options, sleep);
    CHECK(routed.route == "google/gemini-3");
    CHECK(routed.moves.at(0).reason == FallbackReason::primary_unavailable);
    CHECK(p.called == std::vector<std::string>{"google"});
  }
  SECTION("primary_unavailable: no capacity within the queue's wait limit") {
    ManualClock clock;
    DeploymentOptions deployment_options;
    deployment_options.limits[Dimension::requests_per_minute] = Limit::per_minute(1);
    deployment_options.max_queue_wait = 8s;
    deployment_options.clock = std::ref(clock);
    Deployment deployment{deployment_options};
    (void)deployment.reserve(Cost{}, clock.now());  // the minute's one request is taken
    auto r = routes();
    r[0].deployment = &deployment;
    Providers p{{"ok"}};
    const auto routed = call_with_fallback(FallbackChain{r}, std::ref(p), no_jitter(), recorder.options, sleep);
    CHECK(routed.route == "google/gemini-3");
    CHECK(routed.moves.at(0).reason == FallbackReason::primary_unavailable);
    CHECK(sleep.waits().empty());
  }
  SECTION("two moves: the openai fallback unavailable too is not a reason google accepts from it") {
    Providers p{{"server_error*4"}, {"server_error*4"}};
    CHECK_THROWS_AS(call_with_fallback(chain, std::ref(p), no_jitter(), recorder.options, sleep), ProviderError);
    REQUIRE(recorder.gave_up);
    CHECK(recorder.gave_up->route == "openai/gpt-5.5");
    CHECK(recorder.gave_up->stay == Stay::no_route);
    CHECK(recorder.gave_up->reason == FallbackReason::provider_5xx);
    CHECK(recorder.gave_up->moves.size() == 1);
    CHECK(recorder.gave_up->last.reason == StopReason::attempts_exhausted);
  }
}

TEST_CASE("A failure no other deployment can fix does not move", "[fallback]") {
  const FallbackChain chain{routes()};
  FakeSleep sleep;
  Recorder recorder;
  Providers p{{"status:401"}};
  CHECK_THROWS_AS(call_with_fallback(chain, std::ref(p), no_jitter(), recorder.options, sleep), ProviderError);
  REQUIRE(recorder.gave_up);
  CHECK(recorder.gave_up->stay == Stay::no_reason);
  CHECK_FALSE(recorder.gave_up->reason);
  CHECK(p.called.size() == 1);

  SECTION("nor does a passed deadline") {
    ManualClock clock;
    FakeSleep timed{clock};
    recorder.options.call.clock = std::ref(clock);
    recorder.options.call.deadline = clock.now() + 1s;
    Providers q{{"server_error*9"}};
    CHECK_THROWS_AS(call_with_fallback(chain, std::ref(q), no_jitter(), recorder.options, timed), ProviderError);
    CHECK(recorder.gave_up->last.reason == StopReason::deadline);
    CHECK(q.called == std::vector<std::string>{"anthropic", "anthropic"});
  }
}

TEST_CASE("Double billing: no move after an ambiguous failure of a call not safe to repeat", "[fallback]") {
  const FallbackChain chain{routes()};
  FakeSleep sleep;
  Recorder recorder;
  recorder.options.call.safe_to_repeat = false;
  std::vector<std::string> asked;

  SECTION("unknown whether it completed: stay, and the timeout is rethrown") {
    Providers p{{"timeout"}};
    CHECK_THROWS_AS(call_with_fallback(chain, std::ref(p), no_jitter(), recorder.options, sleep), ProviderTimeout);
    REQUIRE(recorder.gave_up);
    CHECK(recorder.gave_up->stay == Stay::may_have_completed);
    CHECK(recorder.gave_up->last.reason == StopReason::not_safe_to_repeat);
    CHECK(p.called == std::vector<std::string>{"anthropic"});
  }
  SECTION("the operations table says it did not complete: move") {
    recorder.options.completed = [&](const Route& route, const Failure& failure) -> std::optional<bool> {
      asked.push_back(route.name + " " + to_string(failure.kind));
      return false;
    };
    Providers p{{"server_error"}};
    CHECK(call_with_fallback(chain, std::ref(p), no_jitter(), recorder.options, sleep).route == "openai/gpt-5.5");
    CHECK(asked == std::vector<std::string>{"anthropic/claude-sonnet-4.6 server_error"});
  }
  SECTION("it completed: stay") {
    recorder.options.completed = [](const Route&, const Failure&) -> std::optional<bool> { return true; };
    Providers p{{"timeout"}};
    CHECK_THROWS_AS(call_with_fallback(chain, std::ref(p), no_jitter(), recorder.options, sleep), ProviderTimeout);
    CHECK(recorder.gave_up->stay == Stay::completed);
    CHECK(p.called.size() == 1);
  }
  SECTION("a failure that certainly was not processed moves without asking") {
    recorder.options.completed = [&](const Route&, const Failure&) -> std::optional<bool> {
      asked.emplace_back("asked");
      return std::nullopt;
    };
    Providers p{{"connect_timeout*4"}};  // never sent
    CHECK(call_with_fallback(chain, std::ref(p), no_jitter(), recorder.options, sleep).route == "openai/gpt-5.5");
    Providers q{{"overloaded*4"}};  // 529: refused without work
    CHECK(call_with_fallback(chain, std::ref(q), no_jitter(), recorder.options, sleep).route == "openai/gpt-5.5");
    CHECK(asked.empty());
  }
}

TEST_CASE("A result-like call moves the same way and returns the last result when it stays", "[fallback]") {
  const FallbackChain chain{routes()};
  FakeSleep sleep;
  FallbackOptions options;
  Providers p{{"server_error*4"}, {"server_error*4"}};
  const auto routed = call_with_fallback(
      chain, [&](const Route& route, const Attempt&) { return p.by_route.at(route.name).try_call([] { return 1; }); },
      no_jitter(), options, sleep);
  REQUIRE_FALSE(routed.answer.has_value());
  CHECK(routed.route == "openai/gpt-5.5");
  CHECK(routed.moves.size() == 1);
}

TEST_CASE("fallback_reason reads the stop and the last failure", "[fallback]") {
  CHECK(fallback_reason(StopReason::circuit_open, classify_status(503)) == FallbackReason::primary_unavailable);
  CHECK(fallback_reason(StopReason::no_capacity, Failure::of(FailureKind::rate_limited, Sent::not_sent)) ==
        FallbackReason::primary_unavailable);
  CHECK(fallback_reason(StopReason::retry_budget, classify_status(429)) ==
        FallbackReason::rate_limit_after_retry_budget);
  CHECK(fallback_reason(StopReason::attempts_exhausted, classify_status(502)) == FallbackReason::provider_5xx);
  CHECK(fallback_reason(StopReason::not_retryable, Failure::of(FailureKind::context_length, Sent::refused)) ==
        FallbackReason::context_length_needed);
  CHECK_FALSE(fallback_reason(StopReason::deadline, classify_status(503)));
  CHECK_FALSE(fallback_reason(StopReason::not_retryable, classify_status(400)));
  CHECK_FALSE(fallback_reason(StopReason::not_retryable, Failure::of(FailureKind::quota_exhausted, Sent::refused)));
  CHECK(fallback_reason_named("primary_unavailable") == FallbackReason::primary_unavailable);
  CHECK_FALSE(fallback_reason_named("foo"));
}

TEST_CASE("A policy that makes no sense is refused before the first call", "[fallback]") {
  const FallbackChain chain{routes()};
  FakeSleep sleep;
  Recorder recorder;
  Providers p{{}};
  RetryPolicy policy = no_jitter();
  policy.base = -1ms;
  CHECK_THROWS_WITH(call_with_fallback(chain, std::ref(p), policy, recorder.options, sleep),
                    "RetryPolicy::base must not be negative");
  CHECK(p.called.empty());
}

TEST_CASE("A chain that makes no sense is refused, naming the route and field", "[fallback]") {
  CHECK_THROWS_WITH(FallbackChain{{}}, "FallbackChain: at least one route is needed");
  auto r = routes();
  r[1].when.clear();
  CHECK_THROWS_WITH(FallbackChain{r}, "FallbackChain: routes[1].when must name at least one reason to move to it");
  r = routes();
  r[2].name = r[0].name;
  CHECK_THROWS_WITH(FallbackChain{r}, "FallbackChain: routes[2].name \"anthropic/claude-sonnet-4.6\" is used twice");
  r = routes();
  r[0].when = {FallbackReason::provider_5xx};
  CHECK_THROWS_WITH(FallbackChain{r}, "FallbackChain: routes[0].when must be empty: nothing moves to the primary");
}

namespace {

// A guard of the user's that writes down each route's admissions and outcomes, and refuses the routes it is
// told to with no capacity.
struct RouteLog {
  std::vector<std::string> entries;
  std::vector<std::string> refused;
};

class LoggingGuard {
 public:
  struct Ticket {
    RouteLog* log;
    std::string route;
    template <class... Answer>
    void succeeded(const Answer&... /*answer*/) {
      log->entries.push_back(route + " succeeded");
    }
    void failed(const Failure& failure) { log->entries.push_back(route + " failed " + to_string(failure.kind)); }
  };
  LoggingGuard(RouteLog& log, std::string route) : log_(&log), route_(std::move(route)) {}
  Admission<Ticket> admit(const Attempt& attempt) {
    log_->entries.push_back(route_ + " admit " + std::to_string(attempt.number));
    for (const auto& name : log_->refused)
      if (name == route_)
        return Admission<Ticket>::refuse(Refusal{
            StopReason::no_capacity, Failure::of(FailureKind::rate_limited, Sent::not_sent), LimitType::tokens});
    return Admission<Ticket>::go(Ticket{log_, route_});
  }

 private:
  RouteLog* log_;
  std::string route_;
};

}  // namespace

TEST_CASE("route_guards: a guard of the user's on each route sees its attempts, before the route's own", "[fallback]") {
  const FallbackChain chain{routes()};
  FakeSleep sleep;
  Recorder recorder;
  RouteLog log;
  Providers providers({"server_error*4"}, {"ok"});
  const auto routed =
      call_with_fallback(chain, providers, no_jitter(), recorder.options, sleep,
                         route_guards([&](const Route& route) { return LoggingGuard(log, route.provider); }));
  CHECK(routed.route == "openai/gpt-5.5");
  CHECK(log.entries == std::vector<std::string>{
                           "anthropic admit 1", "anthropic failed server_error", "anthropic admit 2",
                           "anthropic failed server_error", "anthropic admit 3", "anthropic failed server_error",
                           "anthropic admit 4", "anthropic failed server_error", "openai admit 1", "openai succeeded"});
}

TEST_CASE("route_guards: a refusal of the user's guard moves the call like the route's own pacing", "[fallback]") {
  const FallbackChain chain{routes()};
  FakeSleep sleep;
  Recorder recorder;
  RouteLog log;
  log.refused = {"anthropic"};
  Providers providers({"ok"}, {}, {"ok"});
  const auto routed =
      call_with_fallback(chain, providers, no_jitter(), recorder.options, sleep,
                         route_guards([&](const Route& route) { return LoggingGuard(log, route.provider); }));
  CHECK(routed.route == "google/gemini-3");  // primary_unavailable
  REQUIRE(recorder.moves.size() == 1);
  CHECK(recorder.moves.front().reason == FallbackReason::primary_unavailable);
  CHECK(providers.called == std::vector<std::string>{"google"});
}

TEST_CASE("route_guards: a guard returned by reference is shared by every route", "[fallback]") {
  const FallbackChain chain{routes()};
  FakeSleep sleep;
  Recorder recorder;
  RouteLog log;
  LoggingGuard shared(log, "shared");
  Providers providers({"server_error*4"}, {"ok"});
  (void)call_with_fallback(chain, providers, no_jitter(), recorder.options, sleep,
                           route_guards([&](const Route&) -> LoggingGuard& { return shared; }));
  CHECK(log.entries.size() == 10);
  CHECK(log.entries.back() == "shared succeeded");
}
