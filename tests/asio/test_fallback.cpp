#include <llmretry/asio/fallback.hpp>

#include <llmretry/admission/circuit_breaker.hpp>
#include <llmretry/admission/hedging.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include <algorithm>
#include <chrono>
#include <exception>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "asio_helpers.hpp"
#include "helpers.hpp"
#include "llmretry_catch.hpp"

using namespace llmretry;
using namespace std::chrono_literals;
using Received = llmretry_test::Received<Routed<int>>;
using llmretry_test::is_cancelled;
using llmretry_test::no_jitter;

namespace {

/// What one scripted attempt does: answer `answer`, or fail with `error`.
struct Outcome {
  std::exception_ptr error;
  int answer = 0;
};

Outcome ok(int answer) { return {nullptr, answer}; }
Outcome server_error() { return {std::make_exception_ptr(ProviderError("503 Service Unavailable", 503)), 0}; }
Outcome internal_error() { return {std::make_exception_ptr(ProviderError("500 Internal Server Error", 500)), 0}; }
Outcome bad_request() { return {std::make_exception_ptr(ProviderError("400 Bad Request", 400)), 0}; }
Outcome slow_down(std::chrono::milliseconds wait) {
  return {std::make_exception_ptr(RateLimited("429 Too Many Requests", wait)), 0};
}

/// Routes "primary" then "backup" (on a 5xx, a rate limit after retries, or the primary unavailable).
FallbackChain two_routes(CircuitBreaker* primary_breaker = nullptr) {
  Route primary;
  primary.name = "primary";
  primary.breaker = primary_breaker;
  Route backup;
  backup.name = "backup";
  backup.when = {FallbackReason::provider_5xx, FallbackReason::rate_limit_after_retry_budget,
                 FallbackReason::primary_unavailable};
  return FallbackChain({primary, backup});
}

/// Attempts on each route answer with the route's script (the last outcome again once it is spent),
/// through the executor; every attempt is recorded with its route.
struct Script {
  boost::asio::io_context& io;
  std::map<std::string, std::vector<Outcome>> outcomes;
  std::vector<std::string> routes;

  auto attempt() {
    return [this](const Route& route, const Attempt& /*attempt*/, auto handler) {
      routes.push_back(route.name);
      const auto& script = outcomes.at(route.name);
      const auto made = static_cast<std::size_t>(std::count(routes.begin(), routes.end(), route.name));
      const Outcome outcome = script[std::min(made, script.size()) - 1];
      boost::asio::post(
          io, [handler = std::move(handler), outcome]() mutable { std::move(handler)(outcome.error, outcome.answer); });
    };
  }
};

}  // namespace

TEST_CASE("async_call_with_fallback: the primary's answer, no move", "[asio][fallback]") {
  boost::asio::io_context io;
  Script script{io, {{"primary", {ok(1)}}, {"backup", {ok(2)}}}, {}};
  const FallbackChain chain = two_routes();
  const RetryPolicy policy = no_jitter(1ms);
  const FallbackOptions options;
  Received received;
  asio::async_call_with_fallback<int>(io.get_executor(), chain, script.attempt(), policy, options, received.handler());
  CHECK_FALSE(received.called);
  io.run();
  REQUIRE(received.called);
  CHECK_FALSE(received.error);
  CHECK(received.answer.answer == 1);
  CHECK(received.answer.route == "primary");
  CHECK(received.answer.moves.empty());
  CHECK(script.routes == std::vector<std::string>{"primary"});
}

TEST_CASE("async_call_with_fallback: moves after the primary's retries end in 5xx", "[asio][fallback]") {
  boost::asio::io_context io;
  Script script{io, {{"primary", {server_error()}}, {"backup", {server_error(), ok(2)}}}, {}};
  const FallbackChain chain = two_routes();
  RetryPolicy policy = no_jitter(1ms);
  policy.max_attempts = 2;
  FallbackOptions options;
  options.call.safe_to_repeat = true;
  std::vector<Move> told;
  options.on_move = [&](const Move& move) { told.push_back(move); };
  Received received;
  asio::async_call_with_fallback<int>(io.get_executor(), chain, script.attempt(), policy, options, received.handler());
  io.run();
  REQUIRE(received.called);
  CHECK_FALSE(received.error);
  CHECK(received.answer.answer == 2);
  CHECK(received.answer.route == "backup");
  REQUIRE(received.answer.moves.size() == 1);
  CHECK(received.answer.moves[0].from == "primary");
  CHECK(received.answer.moves[0].to == "backup");
  CHECK(received.answer.moves[0].reason == FallbackReason::provider_5xx);
  CHECK(told.size() == 1);
  CHECK(script.routes == std::vector<std::string>{"primary", "primary", "backup", "backup"});
}

TEST_CASE("async_call_with_fallback: a bad request stays, with the last exception", "[asio][fallback]") {
  boost::asio::io_context io;
  Script script{io, {{"primary", {bad_request()}}, {"backup", {ok(2)}}}, {}};
  const FallbackChain chain = two_routes();
  const RetryPolicy policy = no_jitter(1ms);
  FallbackOptions options;
  std::optional<FallbackGiveUp> gave_up;
  options.on_give_up = [&](const FallbackGiveUp& report) { gave_up = report; };
  Received received;
  asio::async_call_with_fallback<int>(io.get_executor(), chain, script.attempt(), policy, options, received.handler());
  io.run();
  REQUIRE(received.called);
  REQUIRE(received.error);
  CHECK_THROWS_AS(std::rethrow_exception(received.error), ProviderError);
  REQUIRE(gave_up);
  CHECK(gave_up->route == "primary");
  CHECK(gave_up->stay == Stay::no_reason);
  CHECK(script.routes == std::vector<std::string>{"primary"});
}

TEST_CASE("async_call_with_fallback: a call not safe to repeat stays after an ambiguous failure", "[asio][fallback]") {
  boost::asio::io_context io;
  Script script{io, {{"primary", {internal_error()}}, {"backup", {ok(2)}}}, {}};
  const FallbackChain chain = two_routes();
  const RetryPolicy policy = no_jitter(1ms);
  FallbackOptions options;
  options.call.safe_to_repeat = false;  // a 500 may have been processed
  std::optional<FallbackGiveUp> gave_up;
  options.on_give_up = [&](const FallbackGiveUp& report) { gave_up = report; };
  Received received;
  asio::async_call_with_fallback<int>(io.get_executor(), chain, script.attempt(), policy, options, received.handler());
  io.run();
  REQUIRE(received.error);
  REQUIRE(gave_up);
  CHECK(gave_up->stay == Stay::may_have_completed);
  CHECK(script.routes == std::vector<std::string>{"primary"});
}

TEST_CASE("async_call_with_fallback: an open breaker sends the call on without an attempt", "[asio][fallback]") {
  boost::asio::io_context io;
  CircuitBreakerOptions breaker_options;
  breaker_options.minimum_throughput = 1;
  breaker_options.failure_ratio = 1.0;
  CircuitBreaker breaker(breaker_options);
  {
    auto guard = breaker.guard();
    auto admission = guard.admit(Attempt{});
    REQUIRE(admission.admitted());
    admission.ticket().failed(Failure::of(FailureKind::server_error, Sent::maybe_processed));
  }
  Script script{io, {{"primary", {ok(1)}}, {"backup", {ok(2)}}}, {}};
  const FallbackChain chain = two_routes(&breaker);
  const RetryPolicy policy = no_jitter(1ms);
  const FallbackOptions options;
  Received received;
  asio::async_call_with_fallback<int>(io.get_executor(), chain, script.attempt(), policy, options, received.handler());
  io.run();
  REQUIRE(received.called);
  CHECK_FALSE(received.error);
  CHECK(received.answer.route == "backup");
  REQUIRE(received.answer.moves.size() == 1);
  CHECK(received.answer.moves[0].reason == FallbackReason::primary_unavailable);
  CHECK(script.routes == std::vector<std::string>{"backup"});
}

TEST_CASE("async_call_with_fallback: guards of your own see every attempt on every route", "[asio][fallback]") {
  struct Counting {
    std::map<std::string, int>* admitted;
    std::string route;
    struct Ticket {
      void succeeded(const int& /*answer*/) const noexcept {}
      void failed(const Failure& /*failure*/) const noexcept {}
    };
    Admission<Ticket> admit(const Attempt& /*attempt*/) {
      ++(*admitted)[route];
      return Admission<Ticket>::go(Ticket{});
    }
  };
  boost::asio::io_context io;
  Script script{io, {{"primary", {server_error()}}, {"backup", {ok(2)}}}, {}};
  const FallbackChain chain = two_routes();
  RetryPolicy policy = no_jitter(1ms);
  policy.max_attempts = 3;
  FallbackOptions options;
  options.call.safe_to_repeat = true;
  std::map<std::string, int> admitted;
  Received received;
  asio::async_call_with_fallback<int>(io.get_executor(), chain, script.attempt(), policy, options,
                                      route_guards([&](const Route& route) {
                                        return Counting{&admitted, route.name};
                                      }),
                                      received.handler());
  io.run();
  REQUIRE(received.called);
  CHECK_FALSE(received.error);
  CHECK(admitted == std::map<std::string, int>{{"backup", 1}, {"primary", 3}});
}

TEST_CASE("async_call_with_fallback: a cancel during a wait stops the call, which never moves", "[asio][fallback]") {
  boost::asio::io_context io;
  Script script{io, {{"primary", {slow_down(10s)}}, {"backup", {ok(2)}}}, {}};
  const FallbackChain chain = two_routes();
  RetryPolicy policy = no_jitter(1ms);
  policy.max_provider_wait = 60s;
  policy.max_total_wait = 60s;
  const FallbackOptions options;
  boost::asio::cancellation_signal cancel;
  Received received;
  asio::async_call_with_fallback<int>(io.get_executor(), chain, script.attempt(), policy, options,
                                      boost::asio::bind_cancellation_slot(cancel.slot(), received.handler()));
  boost::asio::steady_timer soon(io, 20ms);
  soon.async_wait([&](boost::system::error_code) { cancel.emit(boost::asio::cancellation_type::terminal); });
  io.run();
  REQUIRE(received.called);
  CHECK(is_cancelled(received.error));
  CHECK(script.routes == std::vector<std::string>{"primary"});
}

TEST_CASE("async_call_with_fallback: a cancel while the primary's guard on a pool refuses it: the call never moves",
          "[asio][fallback]") {
  // The primary's guard refuses (its pacing could not be reached), and the cancel comes while it does, on
  // the guards' executor: the call ends there, and the backup is never called.
  struct RefusesAndCancels {
    boost::asio::cancellation_signal* cancel;  ///< null: admits (the backup)
    struct Ticket {
      void succeeded(const int& /*answer*/) const noexcept {}
      void failed(const Failure& /*failure*/) const noexcept {}
    };
    Admission<Ticket> admit(const Attempt& /*attempt*/) {
      if (cancel == nullptr) return Admission<Ticket>::go(Ticket{});
      cancel->emit(boost::asio::cancellation_type::terminal);
      return Admission<Ticket>::refuse(
          Refusal{StopReason::pacing_unavailable, Failure::of(FailureKind::unknown, Sent::not_sent)});
    }
  };
  boost::asio::io_context io;
  boost::asio::io_context guard_io;  // run by hand: nothing of the call listens while it runs there
  Script script{io, {{"primary", {ok(1)}}, {"backup", {ok(2)}}}, {}};
  const FallbackChain chain = two_routes();
  const RetryPolicy policy = no_jitter(1ms);
  const FallbackOptions options;
  boost::asio::cancellation_signal cancel;
  Received received;
  asio::async_call_with_fallback<int>(
      io.get_executor(), chain, script.attempt(), policy, options,
      route_guards([&](const Route& route) { return RefusesAndCancels{route.name == "primary" ? &cancel : nullptr}; }),
      asio::guards_on(guard_io.get_executor()), boost::asio::bind_cancellation_slot(cancel.slot(), received.handler()));
  for (int turn = 0; turn < 100 && !received.called; ++turn) {
    guard_io.restart();
    guard_io.poll();
    io.restart();
    io.poll();
  }
  REQUIRE(received.called);
  CHECK(received.error);
  CHECK(received.answer.moves.empty());
  CHECK(script.routes.empty());
}

TEST_CASE("async_call_with_fallback: a policy that makes no sense or hedging is refused before anything starts",
          "[asio][fallback]") {
  boost::asio::io_context io;
  Script script{io, {{"primary", {ok(1)}}, {"backup", {ok(2)}}}, {}};
  const FallbackChain chain = two_routes();
  RetryPolicy bad = no_jitter(1ms);
  bad.max_attempts = 0;
  const FallbackOptions options;
  Received received;
  CHECK_THROWS_AS(
      asio::async_call_with_fallback<int>(io.get_executor(), chain, script.attempt(), bad, options, received.handler()),
      std::invalid_argument);
  Hedging hedging;
  FallbackOptions hedged;
  hedged.call.hedging = &hedging;
  CHECK_THROWS_AS(asio::async_call_with_fallback<int>(io.get_executor(), chain, script.attempt(), no_jitter(1ms),
                                                      hedged, received.handler()),
                  std::invalid_argument);
  io.run();
  CHECK_FALSE(received.called);
  CHECK(script.routes.empty());
}

TEST_CASE("async_call_with_fallback: what the route guards' maker or on_move throws ends the call with it",
          "[asio][fallback]") {
  boost::asio::io_context io;
  Script script{io, {{"primary", {server_error()}}, {"backup", {ok(2)}}}, {}};
  const FallbackChain chain = two_routes();
  RetryPolicy policy = no_jitter(1ms);
  policy.max_attempts = 1;
  SECTION("the maker, at the first route: never inside the initiation") {
    const FallbackOptions options;
    Received received;
    asio::async_call_with_fallback<int>(
        io.get_executor(), chain, script.attempt(), policy, options,
        route_guards([](const Route& /*route*/) -> NoGuard { throw std::runtime_error("no guard"); }),
        received.handler());
    CHECK_FALSE(received.called);
    io.run();
    REQUIRE(received.called);
    CHECK_THROWS_WITH(std::rethrow_exception(received.error), "no guard");
    CHECK(script.routes.empty());
  }
  SECTION("on_move") {
    FallbackOptions options;
    options.call.safe_to_repeat = true;
    options.on_move = [](const Move& /*move*/) { throw std::runtime_error("no move"); };
    Received received;
    asio::async_call_with_fallback<int>(io.get_executor(), chain, script.attempt(), policy, options,
                                        received.handler());
    io.run();
    REQUIRE(received.called);
    CHECK_THROWS_WITH(std::rethrow_exception(received.error), "no move");
    CHECK(script.routes == std::vector<std::string>{"primary"});
  }
}

TEST_CASE("async_call_with_fallback: a cancel while an attempt is in flight stops it; the call never moves",
          "[asio][fallback]") {
  boost::asio::io_context io;
  int started = 0;
  const auto hanging = [&](const Route& /*route*/, const Attempt& /*attempt*/, auto handler) {
    ++started;
    llmretry_test::hang<int>(io, std::move(handler));
  };
  const FallbackChain chain = two_routes();
  const RetryPolicy policy = no_jitter(1ms);
  FallbackOptions options;
  options.call.safe_to_repeat = true;
  boost::asio::cancellation_signal cancel;
  Received received;
  asio::async_call_with_fallback<int>(io.get_executor(), chain, hanging, policy, options,
                                      boost::asio::bind_cancellation_slot(cancel.slot(), received.handler()));
  boost::asio::steady_timer soon(io, 20ms);
  soon.async_wait([&](boost::system::error_code) { cancel.emit(boost::asio::cancellation_type::terminal); });
  io.run();
  REQUIRE(received.called);
  CHECK(is_cancelled(received.error));
  CHECK(started == 1);
}

TEST_CASE("async_call_with_fallback with guards_on(pool): every guard is called on the pool, the call on its executor",
          "[asio][fallback]") {
  struct Where {
    std::vector<std::thread::id>* admitted;
    struct Ticket {
      std::vector<std::thread::id>* told;
      void succeeded(const int& /*answer*/) const { told->push_back(std::this_thread::get_id()); }
      void failed(const Failure& /*failure*/) const { told->push_back(std::this_thread::get_id()); }
    };
    Admission<Ticket> admit(const Attempt& /*attempt*/) {
      admitted->push_back(std::this_thread::get_id());
      return Admission<Ticket>::go(Ticket{admitted});
    }
  };
  boost::asio::io_context io;
  boost::asio::thread_pool pool(1);
  Script script{io, {{"primary", {server_error()}}, {"backup", {ok(2)}}}, {}};
  const FallbackChain chain = two_routes();
  RetryPolicy policy = no_jitter(1ms);
  policy.max_attempts = 1;
  FallbackOptions options;
  options.call.safe_to_repeat = true;
  std::vector<std::thread::id> seen;
  Received received;
  asio::async_call_with_fallback<int>(io.get_executor(), chain, script.attempt(), policy, options,
                                      route_guards([&](const Route& /*route*/) { return Where{&seen}; }),
                                      asio::guards_on(pool.get_executor()), received.handler());
  io.run();
  pool.join();
  REQUIRE(received.called);
  CHECK_FALSE(received.error);
  CHECK(received.answer.route == "backup");
  REQUIRE(seen.size() == 4);  // an admission and an outcome on each route
  for (const auto& id : seen) CHECK(id != std::this_thread::get_id());
}
