#include <llmretry/asio.hpp>

#include <llmretry/admission/circuit_breaker.hpp>
#include <llmretry/admission/deployment.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_future.hpp>
#if defined(BOOST_ASIO_HAS_CO_AWAIT)
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#endif

#include <algorithm>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "asio_helpers.hpp"
#include "helpers.hpp"
#include "llmretry_catch.hpp"
#include "test_time.hpp"

using namespace llmretry;
using namespace std::chrono_literals;
using Received = llmretry_test::Received<int>;
using llmretry_test::is_cancelled;
using llmretry_test::no_jitter;
using std::chrono::milliseconds;

namespace {

/// What one scripted attempt does: answer `answer`, or fail with `error`.
struct Outcome {
  std::exception_ptr error;
  int answer = 0;
};

Outcome ok(int answer) { return {nullptr, answer}; }
Outcome rate_limited(milliseconds wait = 1ms) {
  return {std::make_exception_ptr(RateLimited("429 Too Many Requests", wait)), 0};
}
Outcome server_error() { return {std::make_exception_ptr(ProviderError("503 Service Unavailable", 503)), 0}; }

/// Returns the options of a deployment with one concurrency slot and no rate limit.
DeploymentOptions one_slot() {
  DeploymentOptions options;
  options.name = "test/model";
  options.concurrency = 1;
  return options;
}

/// An asynchronous attempt that completes, through the executor, with the next scripted outcome (the last
/// one again once the script is spent), and records each attempt it was asked for.
struct Script {
  boost::asio::io_context& io;
  std::vector<Outcome> outcomes;
  std::vector<Attempt> attempts;

  auto attempt() {
    return [this](const Attempt& attempt, auto handler) {
      attempts.push_back(attempt);
      const Outcome outcome = outcomes[std::min(attempts.size(), outcomes.size()) - 1];
      boost::asio::post(
          io, [handler = std::move(handler), outcome]() mutable { std::move(handler)(outcome.error, outcome.answer); });
    };
  }
};

/// An attempt that never answers by itself: a timer of an hour that completes early, with
/// operation_aborted as the exception, when its handler's cancellation slot is emitted.
struct Hanging {
  boost::asio::io_context& io;
  int started = 0;

  auto attempt() {
    return [this](const Attempt& /*attempt*/, auto handler) {
      ++started;
      llmretry_test::hang<int>(io, std::move(handler));
    };
  }
};

}  // namespace

TEST_CASE("A first attempt that succeeds completes with its answer", "[asio]") {
  boost::asio::io_context io;
  Script script{io, {ok(42)}, {}};
  const RetryPolicy policy = no_jitter();
  CallStats stats;
  CallOptions options;
  options.stats = &stats;
  Received received;
  asio::async_call_with_retry<int>(io.get_executor(), script.attempt(), policy, options, received.handler());
  CHECK_FALSE(received.called);  // never inside the initiating function
  io.run();
  REQUIRE(received.called);
  CHECK_FALSE(received.error);
  CHECK(received.answer == 42);
  CHECK(stats.attempts == 1);
  CHECK(stats.waited == 0ms);
}

TEST_CASE("Failures are retried after timed waits, the provider's wait included", "[asio]") {
  boost::asio::io_context io;
  Script script{io, {rate_limited(30ms), server_error(), ok(7)}, {}};
  const RetryPolicy policy = no_jitter(1ms);
  CallStats stats;
  CallOptions options;
  options.stats = &stats;
  Received received;
  asio::async_call_with_retry<int>(io.get_executor(), script.attempt(), policy, options, received.handler());
  io.run();
  REQUIRE(received.called);
  CHECK_FALSE(received.error);
  CHECK(received.answer == 7);
  REQUIRE(script.attempts.size() == 3);
  CHECK(script.attempts[2].number == 3);
  CHECK(stats.attempts == 3);
  CHECK(stats.waited == 30ms + 2ms);  // the provider's 30 ms, then the backoff's second wait (2 x base)
}

TEST_CASE("Giving up completes with the last failure's exception, unchanged", "[asio]") {
  boost::asio::io_context io;
  RetryPolicy policy = no_jitter(1ms);
  policy.max_attempts = 3;

  SECTION("attempts exhausted") {
    const Outcome last = server_error();
    Script script{io, {server_error(), server_error(), last}, {}};
    std::optional<GiveUp> gave_up;
    CallOptions options;
    options.on_give_up = [&](const GiveUp& g) { gave_up = g; };
    Received received;
    asio::async_call_with_retry<int>(io.get_executor(), script.attempt(), policy, options, received.handler());
    io.run();
    REQUIRE(received.error);
    CHECK(received.error == last.error);
    REQUIRE(gave_up);
    CHECK(gave_up->reason == StopReason::attempts_exhausted);
    CHECK(gave_up->attempts == 3);
  }
  SECTION("an exception nobody recognises is never retried") {
    Script script{io, {{std::make_exception_ptr(std::logic_error("bug")), 0}, ok(1)}, {}};
    Received received;
    asio::async_call_with_retry<int>(io.get_executor(), script.attempt(), policy, received.handler());
    io.run();
    CHECK(script.attempts.size() == 1);
    CHECK_THROWS_AS(std::rethrow_exception(received.error), std::logic_error);
  }
}

TEST_CASE("One function serves use_future and deferred", "[asio]") {
  boost::asio::io_context io;
  Script script{io, {server_error(), ok(5)}, {}};
  const RetryPolicy policy = no_jitter(1ms);

  SECTION("use_future") {
    std::future<int> answer =
        asio::async_call_with_retry<int>(io.get_executor(), script.attempt(), policy, boost::asio::use_future);
    io.run();
    CHECK(answer.get() == 5);
  }
  SECTION("deferred, started later") {
    auto operation =
        asio::async_call_with_retry<int>(io.get_executor(), script.attempt(), policy, boost::asio::deferred);
    CHECK(script.attempts.empty());  // nothing starts before it is launched
    Received received;
    std::move(operation)(received.handler());
    io.run();
    CHECK(received.answer == 5);
    CHECK(script.attempts.size() == 2);
  }
}

#if defined(BOOST_ASIO_HAS_CO_AWAIT)
TEST_CASE("A coroutine awaits the call: use_awaitable", "[asio]") {
  boost::asio::io_context io;
  Script script{io, {rate_limited(), ok(9)}, {}};
  const RetryPolicy policy = no_jitter(1ms);
  int answer = 0;
  boost::asio::co_spawn(
      io,
      [&]() -> boost::asio::awaitable<void> {
        answer = co_await asio::async_call_with_retry<int>(io.get_executor(), script.attempt(), policy,
                                                           boost::asio::use_awaitable);
      },
      boost::asio::detached);
  io.run();
  CHECK(answer == 9);
}
#endif

TEST_CASE("A refusal before the first attempt completes through the executor", "[asio]") {
  boost::asio::io_context io;
  Script script{io, {ok(1)}, {}};
  const RetryPolicy policy = no_jitter();
  CallOptions options;
  options.deadline = std::chrono::steady_clock::now() - 1s;  // already passed
  Received received;
  asio::async_call_with_retry<int>(io.get_executor(), script.attempt(), policy, options, received.handler());
  CHECK_FALSE(received.called);
  io.run();
  REQUIRE(received.called);
  CHECK(script.attempts.empty());
  try {
    std::rethrow_exception(received.error);
  } catch (const AttemptRefused& refused) {
    CHECK(refused.reason() == StopReason::deadline);
  }
}

TEST_CASE("A cancel during the backoff stops the timer: no retry after it", "[asio]") {
  boost::asio::io_context io;
  Script script{io, {server_error(), ok(1)}, {}};
  RetryPolicy policy = no_jitter(std::chrono::hours{1});
  policy.cap = std::chrono::hours{1};
  policy.max_total_wait = std::chrono::hours{2};
  CallStats stats;
  CallOptions options;
  options.stats = &stats;
  boost::asio::cancellation_signal cancel;
  Received received;
  asio::async_call_with_retry<int>(io.get_executor(), script.attempt(), policy, options,
                                   boost::asio::bind_cancellation_slot(cancel.slot(), received.handler()));
  io.run_one();  // the attempt's failure arrives, the hour's backoff starts
  REQUIRE(script.attempts.size() == 1);
  REQUIRE_FALSE(received.called);
  cancel.emit(boost::asio::cancellation_type::terminal);
  io.run();
  REQUIRE(received.called);
  CHECK(is_cancelled(received.error));
  CHECK(script.attempts.size() == 1);
  CHECK(stats.stopped == StopReason::cancelled);
}

TEST_CASE("A cancel reaches the attempt in flight and gives its concurrency slot back", "[asio]") {
  boost::asio::io_context io;
  Deployment deployment{one_slot()};
  ConcurrencyLimit& slots = *deployment.concurrency();
  const RetryPolicy policy = no_jitter(1ms);
  Hanging hanging{io};
  auto pacing = deployment.pace(Cost{});
  boost::asio::cancellation_signal cancel;
  CallStats stats;
  CallOptions options;
  options.stats = &stats;
  Received received;
  asio::async_call_with_retry<int>(io.get_executor(), hanging.attempt(), policy, pacing, options,
                                   boost::asio::bind_cancellation_slot(cancel.slot(), received.handler()));
  REQUIRE(hanging.started == 1);  // the first attempt starts at once: a slot was free
  CHECK(slots.in_use() == 1);
  boost::asio::post(io, [&] { cancel.emit(boost::asio::cancellation_type::terminal); });
  io.run();
  REQUIRE(received.called);
  CHECK(is_cancelled(received.error));
  CHECK(hanging.started == 1);  // never retried after the cancel
  CHECK(stats.stopped == StopReason::cancelled);
  CHECK(slots.in_use() == 0);
}

TEST_CASE("A cancel during a wait for capacity gives the reservation back", "[asio]") {
  boost::asio::io_context io;
  DeploymentOptions deployment_options;
  deployment_options.name = "test/model";
  deployment_options.limits[Dimension::requests_per_minute] = Limit::per_minute(6, 1);  // one every 10 s
  Deployment deployment{deployment_options};
  const RetryPolicy policy = no_jitter(1ms);
  Script script{io, {ok(1)}, {}};

  auto first = deployment.pace(Cost{});
  Received done;
  asio::async_call_with_retry<int>(io.get_executor(), script.attempt(), policy, first, done.handler());
  io.run();
  REQUIRE(done.answer == 1);
  io.restart();

  auto second = deployment.pace(Cost{});  // waits about 10 s for capacity
  boost::asio::cancellation_signal cancel;
  Received received;
  asio::async_call_with_retry<int>(io.get_executor(), script.attempt(), policy, second,
                                   boost::asio::bind_cancellation_slot(cancel.slot(), received.handler()));
  boost::asio::post(io, [&] { cancel.emit(boost::asio::cancellation_type::terminal); });
  io.run();
  REQUIRE(received.called);
  CHECK(is_cancelled(received.error));
  CHECK(script.attempts.size() == 1);  // the second call never made its attempt
  const auto limiter = deployment.limiter().stats();
  CHECK(limiter.granted == 2);
  // Given back: the next reservation waits one period after the first, not two.
  const auto now = std::chrono::steady_clock::now();
  const auto next = deployment.limiter().reserve(Cost{}, now);
  CHECK(next.wait_after(now) <= 10s);
}

TEST_CASE("Many calls on one thread: every wait is a timer, none blocks the others", "[asio]") {
  boost::asio::io_context io;
  const RetryPolicy policy = no_jitter(5ms);
  constexpr int calls = 500;
  std::vector<std::unique_ptr<Script>> scripts;
  int answered = 0;
  for (int i = 0; i < calls; ++i) {
    scripts.push_back(std::make_unique<Script>(Script{io, {server_error(), server_error(), ok(i)}, {}}));
    asio::async_call_with_retry<int>(io.get_executor(), scripts.back()->attempt(), policy,
                                     [&answered, i](std::exception_ptr error, int answer) {
                                       if (!error && answer == i) ++answered;
                                     });
  }
  io.run();  // one thread: a blocking wait in any call would hold up all the others by its whole length
  CHECK(answered == calls);
}

TEST_CASE("A policy that makes no sense throws before anything starts", "[asio]") {
  boost::asio::io_context io;
  Script script{io, {ok(1)}, {}};
  RetryPolicy policy;
  policy.max_attempts = 0;
  Received received;
  CHECK_THROWS_AS(asio::async_call_with_retry<int>(io.get_executor(), script.attempt(), policy, received.handler()),
                  std::invalid_argument);
  CHECK_FALSE(received.called);
  CHECK(script.attempts.empty());
}

TEST_CASE("Calls in line for one concurrency slot take it in turn, woken as it comes back", "[asio]") {
  boost::asio::io_context io;
  Deployment deployment{one_slot()};
  ConcurrencyLimit& slots = *deployment.concurrency();
  const RetryPolicy policy = no_jitter(1ms);
  constexpr int calls = 20;
  int in_flight = 0, most_in_flight = 0, answered = 0;
  // Each attempt holds the slot across a timer of 2 ms, then answers.
  const auto attempt = [&](const Attempt& /*attempt*/, auto handler) {
    most_in_flight = std::max(most_in_flight, ++in_flight);
    auto timer = std::make_shared<boost::asio::steady_timer>(io, 2ms);
    timer->async_wait([&, timer, handler = std::move(handler)](boost::system::error_code) mutable {
      --in_flight;
      std::move(handler)(nullptr, 1);
    });
  };
  std::vector<Deployment::Pacing> pacings;
  pacings.reserve(calls);
  for (int i = 0; i < calls; ++i) {
    pacings.push_back(deployment.pace(Cost{}));
    asio::async_call_with_retry<int>(io.get_executor(), attempt, policy, pacings.back(),
                                     [&answered](std::exception_ptr error, int) {
                                       if (!error) ++answered;
                                     });
  }
  io.run();
  CHECK(answered == calls);
  CHECK(most_in_flight == 1);
  CHECK(slots.in_use() == 0);
  CHECK(slots.waiting() == 0);
}

namespace {

/// A guard that records the thread of each admission and outcome, and admits every attempt at once.
struct ThreadRecordingGuard {
  struct Ticket {
    ThreadRecordingGuard* guard;
    template <class... Answer>
    void succeeded(const Answer&... /*answer*/) {
      guard->record();
    }
    void failed(const Failure& /*failure*/) { guard->record(); }
  };
  [[nodiscard]] Admission<Ticket> admit(const Attempt& /*attempt*/) {
    record();
    return Admission<Ticket>::go(Ticket{this});
  }
  void record() {
    const std::lock_guard<std::mutex> lock(mutex);
    threads.push_back(std::this_thread::get_id());
  }
  std::mutex mutex;
  std::vector<std::thread::id> threads;
};

}  // namespace

TEST_CASE("A guard placed on a pool is called there, never on the call's thread", "[asio]") {
  boost::asio::io_context io;
  boost::asio::thread_pool pool(2);
  Script script{io, {server_error(), ok(4)}, {}};
  const RetryPolicy policy = no_jitter(1ms);
  ThreadRecordingGuard recording;
  auto guard = asio::guard_on(pool.get_executor(), recording);
  Received received;
  asio::async_call_with_retry<int>(io.get_executor(), script.attempt(), policy, guard, received.handler());
  io.run();
  pool.join();
  CHECK(received.answer == 4);
  REQUIRE(recording.threads.size() == 4);  // two admissions, a failure, a success
  for (const auto& thread : recording.threads) CHECK(thread != std::this_thread::get_id());
}

namespace {

/// A guard that admits as `inner` does, and emits `cancel` while it admits attempt `number`: the cancel comes
/// while the call is on the guard's executor, where nothing listens to it.
template <class Guard>
struct CancelsAt {
  Guard& inner;
  int number;
  boost::asio::cancellation_signal& cancel;

  auto admit(const Attempt& attempt) {
    auto admission = inner.admit(attempt);
    if (attempt.number == number) cancel.emit(boost::asio::cancellation_type::terminal);
    return admission;
  }
};

}  // namespace

TEST_CASE("A cancel while a guard on a pool admits an attempt: it is not sent, its slot and tokens come back",
          "[asio]") {
  for (const int cancelled_at : {1, 2}) {
    CAPTURE(cancelled_at);
    // The guard's executor is run by hand, and so is the call's (its work keeps io.run() from returning).
    boost::asio::io_context io;
    boost::asio::io_context guard_io;
    DeploymentOptions paced = one_slot();
    paced.limits[Dimension::tokens_per_minute] = Limit::per_minute(10'000);
    Deployment deployment{paced};
    // Before the second attempt, the first was sent and failed: it may have been processed, it stays charged.
    Script script{io, {server_error(), ok(1)}, {}};
    const RetryPolicy policy = no_jitter(1ms);
    auto pacing = deployment.pace(Cost{1, 300, 0});
    boost::asio::cancellation_signal cancel;
    CancelsAt<decltype(pacing)> cancels{pacing, cancelled_at, cancel};
    auto guard = asio::guard_on(guard_io.get_executor(), cancels);
    CallStats stats;
    CallOptions options;
    options.stats = &stats;
    Received received;
    asio::async_call_with_retry<int>(io.get_executor(), script.attempt(), policy, guard, options,
                                     boost::asio::bind_cancellation_slot(cancel.slot(), received.handler()));
    const auto give_up = std::chrono::steady_clock::now() + llmretry_test::scaled(10s);
    while (!received.called && std::chrono::steady_clock::now() < give_up) {
      guard_io.restart();
      const std::size_t ran = guard_io.poll();
      io.restart();
      if (ran + io.poll() == 0) io.run_one_for(1ms);  // the backoff: a real timer of 1 ms
    }
    REQUIRE(received.called);
    CHECK(is_cancelled(received.error));
    CHECK(script.attempts.size() == static_cast<std::size_t>(cancelled_at - 1));
    CHECK(stats.stopped == StopReason::cancelled);
    CHECK(deployment.concurrency()->in_use() == 0);
    const RateLimiterStats limiter = deployment.limiter().stats();
    CHECK(limiter.granted == cancelled_at);
    CHECK(limiter.tokens_released == 300);  // the reservation of the attempt never sent
  }
}

// ---- Attacks: what the engine's steps throw, cancels at the edges, the success path's cost. ----

namespace {

/// A guard whose admission, or whose ticket's success, throws when told to (a store that went away); it
/// counts the tickets given back unused.
struct ThrowingGuard {
  int admissions = 0;
  int throw_at_admission = 0;  ///< the admission that throws (1: the first); 0: none
  bool throw_on_success = false;
  int given_back = 0;

  struct Ticket {
    ThrowingGuard* guard;
    bool told = false;
    explicit Ticket(ThrowingGuard* owner) : guard(owner) {}
    Ticket(Ticket&& other) noexcept : guard(other.guard), told(std::exchange(other.told, true)) {}
    Ticket& operator=(Ticket&&) = delete;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket() {
      if (!told) ++guard->given_back;
    }
    void succeeded(const int& /*answer*/) {
      told = true;
      if (guard->throw_on_success) throw std::runtime_error("the ticket's store went away");
    }
    void failed(const Failure& /*failure*/) { told = true; }
  };

  Admission<Ticket> admit(const Attempt& /*attempt*/) {
    if (++admissions == throw_at_admission) throw std::runtime_error("the guard's store went away");
    return Admission<Ticket>::go(Ticket{this});
  }
};

std::string what_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return {};
  }
}

}  // namespace

TEST_CASE("What a step of the engine throws completes the call with it: the handler always runs", "[asio]") {
  boost::asio::io_context io;
  const RetryPolicy policy = no_jitter(1ms);
  ThrowingGuard guard;
  Received received;

  SECTION("the guard's admission of a retry") {
    Script script{io, {server_error(), ok(1)}, {}};
    guard.throw_at_admission = 2;
    asio::async_call_with_retry<int>(io.get_executor(), script.attempt(), policy, guard, received.handler());
    REQUIRE_NOTHROW(io.run());
    CHECK(script.attempts.size() == 1);
    REQUIRE(received.called);
    CHECK(what_of(received.error) == "the guard's store went away");
  }
  SECTION("the ticket told of a success") {
    Script script{io, {ok(1)}, {}};
    guard.throw_on_success = true;
    asio::async_call_with_retry<int>(io.get_executor(), script.attempt(), policy, guard, received.handler());
    REQUIRE_NOTHROW(io.run());
    REQUIRE(received.called);
    CHECK(what_of(received.error) == "the ticket's store went away");
  }
  SECTION("on_give_up") {
    Script script{io, {server_error()}, {}};
    RetryPolicy once = policy;
    once.max_attempts = 1;
    CallOptions options;
    options.on_give_up = [](const GiveUp&) { throw std::runtime_error("on_give_up's own"); };
    asio::async_call_with_retry<int>(io.get_executor(), script.attempt(), once, guard, options, received.handler());
    REQUIRE_NOTHROW(io.run());
    REQUIRE(received.called);
    CHECK(what_of(received.error) == "on_give_up's own");
  }
  SECTION("the first admission: delivered through the executor, nothing started") {
    Script script{io, {ok(1)}, {}};
    guard.throw_at_admission = 1;
    asio::async_call_with_retry<int>(io.get_executor(), script.attempt(), policy, guard, received.handler());
    CHECK_FALSE(received.called);  // never inside the initiating function
    REQUIRE_NOTHROW(io.run());
    REQUIRE(received.called);
    CHECK_THROWS_AS(std::rethrow_exception(received.error), std::runtime_error);
    CHECK(script.attempts.empty());
  }
  CHECK(guard.given_back == 0);
}

TEST_CASE("A cancel at the edges: after completion, and with an outcome already queued", "[asio]") {
  boost::asio::io_context io;
  const RetryPolicy policy = no_jitter(1ms);
  boost::asio::cancellation_signal cancel;
  Received received;

  SECTION("after completion: nothing happens") {
    Script script{io, {ok(3)}, {}};
    asio::async_call_with_retry<int>(io.get_executor(), script.attempt(), policy,
                                     boost::asio::bind_cancellation_slot(cancel.slot(), received.handler()));
    io.run();
    REQUIRE(received.called);
    cancel.emit(boost::asio::cancellation_type::terminal);
    io.restart();
    io.run();
    CHECK(received.answer == 3);
    CHECK_FALSE(received.error);
  }
  SECTION("an answer already on its way is delivered") {
    Script script{io, {ok(4)}, {}};  // the attempt posts its answer, then the cancel comes
    asio::async_call_with_retry<int>(io.get_executor(), script.attempt(), policy,
                                     boost::asio::bind_cancellation_slot(cancel.slot(), received.handler()));
    cancel.emit(boost::asio::cancellation_type::terminal);
    io.run();
    CHECK(received.answer == 4);
    CHECK_FALSE(received.error);
  }
  SECTION("a failure already on its way ends the call as cancelled, never retried") {
    Script script{io, {server_error(), ok(5)}, {}};
    asio::async_call_with_retry<int>(io.get_executor(), script.attempt(), policy,
                                     boost::asio::bind_cancellation_slot(cancel.slot(), received.handler()));
    cancel.emit(boost::asio::cancellation_type::terminal);
    io.run();
    CHECK(is_cancelled(received.error));
    CHECK(script.attempts.size() == 1);
  }
  SECTION("a refusal before the first attempt, then a cancel: the refusal") {
    Script script{io, {ok(1)}, {}};
    CallOptions options;
    options.deadline = std::chrono::steady_clock::now() - 1s;
    asio::async_call_with_retry<int>(io.get_executor(), script.attempt(), policy, options,
                                     boost::asio::bind_cancellation_slot(cancel.slot(), received.handler()));
    cancel.emit(boost::asio::cancellation_type::terminal);
    io.run();
    REQUIRE(received.called);
    CHECK_THROWS_AS(std::rethrow_exception(received.error), AttemptRefused);
  }
  REQUIRE(received.called);
}

TEST_CASE("A first attempt that succeeds: no timer, no random draw, one handler run", "[asio]") {
  boost::asio::io_context io;
  Script script{io, {ok(8)}, {}};
  const RetryPolicy policy;  // with jitter: a draw would show
  ThreadRng::seed_this_thread(12345);
  Received received;
  asio::async_call_with_retry<int>(io.get_executor(), script.attempt(), policy, received.handler());
  CHECK(io.run() == 1);  // the attempt's answer, delivered straight to the handler: no timer, no post
  CHECK(received.answer == 8);
  ThreadRng rng;
  const auto next = rng();
  ThreadRng::seed_this_thread(12345);
  CHECK(next == rng());
}
