#include <llmretry/asio.hpp>

#include <llmretry/admission/hedging.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <vector>

#include "asio_helpers.hpp"
#include "helpers.hpp"
#include "llmretry_catch.hpp"

using namespace llmretry;
using namespace std::chrono_literals;
using Received = llmretry_test::Received<int>;
using llmretry_test::is_cancelled;
using llmretry_test::no_jitter;

namespace {

/// Requests that complete only when the test says (or when cancelled, with operation_aborted), each
/// recorded with its Attempt. `on_start(index)` runs as request `index` starts.
struct Requests {
  struct Request {
    Attempt attempt;
    std::function<void(std::exception_ptr, int)> finish;  // completes the request through the executor, once
    bool cancelled = false;
    bool done = false;
  };

  boost::asio::io_context& io;
  std::vector<std::shared_ptr<Request>> started;
  std::function<void(std::size_t)> on_start;

  auto attempt() {
    return [this](const Attempt& attempt, auto handler) {
      auto request = std::make_shared<Request>();
      request->attempt = attempt;
      auto slot = boost::asio::get_associated_cancellation_slot(handler);
      auto held = std::make_shared<decltype(handler)>(std::move(handler));
      request->finish = [this, held, weak = std::weak_ptr<Request>(request)](std::exception_ptr error, int answer) {
        const auto self = weak.lock();
        if (!self || self->done) return;
        self->done = true;
        boost::asio::post(io, [held, error, answer] {
          auto once = std::move(*held);  // destroyed once it ran, as an asynchronous operation's handler is
          std::move(once)(error, answer);
        });
      };
      if (slot.is_connected()) {
        slot.assign([this, weak = std::weak_ptr<Request>(request)](boost::asio::cancellation_type) {
          if (const auto cancelled = weak.lock()) {
            cancelled->cancelled = true;
            boost::asio::post(io, [cancelled] {
              cancelled->finish(
                  std::make_exception_ptr(boost::system::system_error(boost::asio::error::operation_aborted)), 0);
            });
          }
        });
      }
      started.push_back(request);
      if (on_start) on_start(started.size() - 1);
    };
  }

  /// Completes request `index` with `answer`, or with `error` when set.
  void answer(std::size_t index, int answer, std::exception_ptr error = nullptr) {
    started.at(index)->finish(error, answer);
  }
};

std::exception_ptr unavailable() { return std::make_exception_ptr(ProviderError("503 Service Unavailable", 503)); }

HedgingOptions after(std::chrono::milliseconds delay) {
  HedgingOptions options;
  options.delay = delay;
  options.ratio = 1.0;
  options.min_per_second = 1000;  // a floor: these few calls may hedge every attempt
  return options;
}

}  // namespace

TEST_CASE("Hedging: a first request that hangs is hedged; the hedge's answer wins and the first is cancelled",
          "[asio][hedging]") {
  boost::asio::io_context io;
  Hedging hedging(after(1ms));
  Requests requests{io, {}, {}};
  requests.on_start = [&](std::size_t index) {
    if (index == 1) requests.answer(1, 7);  // the hedge answers at once; the first never does
  };
  const RetryPolicy policy = no_jitter();
  CallStats stats;
  CallOptions options;
  options.hedging = &hedging;
  options.stats = &stats;
  Received received;
  asio::async_call_with_retry<int>(io.get_executor(), requests.attempt(), policy, options, received.handler());
  io.run();
  REQUIRE(received.called);
  CHECK_FALSE(received.error);
  CHECK(received.answer == 7);
  REQUIRE(requests.started.size() == 2);
  CHECK_FALSE(requests.started[0]->attempt.hedge);
  CHECK(requests.started[1]->attempt.hedge);
  CHECK(requests.started[1]->attempt.number == 1);
  CHECK(requests.started[0]->cancelled);  // and its handler ran before the call completed: io.run() returned
  CHECK(requests.started[0]->done);
  CHECK(stats.attempts == 1);
  CHECK(stats.hedges == 1);
  CHECK(hedging.stats().wins == 1);
}

TEST_CASE("Hedging: the first request answers after the hedge started; the hedge is cancelled", "[asio][hedging]") {
  boost::asio::io_context io;
  Hedging hedging(after(1ms));
  Requests requests{io, {}, {}};
  requests.on_start = [&](std::size_t index) {
    if (index == 1) requests.answer(0, 5);
  };
  const RetryPolicy policy = no_jitter();
  CallOptions options;
  options.hedging = &hedging;
  Received received;
  asio::async_call_with_retry<int>(io.get_executor(), requests.attempt(), policy, options, received.handler());
  io.run();
  REQUIRE(received.called);
  CHECK_FALSE(received.error);
  CHECK(received.answer == 5);
  REQUIRE(requests.started.size() == 2);
  CHECK(requests.started[1]->cancelled);
  CHECK(hedging.stats().wins == 0);
  CHECK(hedging.stats().hedges == 1);
}

TEST_CASE("Hedging: a fast first answer never starts the hedge's request", "[asio][hedging]") {
  boost::asio::io_context io;
  Hedging hedging(after(std::chrono::hours{1}));
  Requests requests{io, {}, {}};
  requests.on_start = [&](std::size_t index) { requests.answer(index, 3); };
  const RetryPolicy policy = no_jitter();
  CallOptions options;
  options.hedging = &hedging;
  Received received;
  asio::async_call_with_retry<int>(io.get_executor(), requests.attempt(), policy, options, received.handler());
  io.run();  // returns at once: the hedge's timer was cancelled, not waited for
  REQUIRE(received.called);
  CHECK(received.answer == 3);
  CHECK(requests.started.size() == 1);
  CHECK(hedging.stats().hedges == 0);
}

TEST_CASE("Hedging: both requests fail; the call retries, and the retry is hedged again", "[asio][hedging]") {
  boost::asio::io_context io;
  Hedging hedging(after(1ms));
  Requests requests{io, {}, {}};
  requests.on_start = [&](std::size_t index) {
    if (index == 1) {  // the hedge of attempt 1: both fail, the hedge first
      requests.answer(1, 0, unavailable());
      requests.answer(0, 0, unavailable());
    }
    if (index == 3) requests.answer(3, 9);  // the hedge of attempt 2 answers
  };
  const RetryPolicy policy = no_jitter();
  CallStats stats;
  CallOptions options;
  options.hedging = &hedging;
  options.stats = &stats;
  Received received;
  asio::async_call_with_retry<int>(io.get_executor(), requests.attempt(), policy, options, received.handler());
  io.run();
  REQUIRE(received.called);
  CHECK_FALSE(received.error);
  CHECK(received.answer == 9);
  REQUIRE(requests.started.size() == 4);
  CHECK(requests.started[2]->attempt.number == 2);
  CHECK_FALSE(requests.started[2]->attempt.hedge);
  CHECK(requests.started[3]->attempt.hedge);
  CHECK(requests.started[2]->cancelled);
  CHECK(stats.attempts == 2);
  CHECK(stats.hedges == 2);
}

TEST_CASE("Hedging: a request that claims the stream first wins; the other is cancelled", "[asio][hedging]") {
  boost::asio::io_context io;
  Hedging hedging(after(1ms));
  Requests requests{io, {}, {}};
  bool first_may_stream = true;
  requests.on_start = [&](std::size_t index) {
    if (index == 1) {
      CHECK(requests.started[1]->attempt.claim());  // the hedge's first event
      first_may_stream = requests.started[0]->attempt.claim();
      requests.answer(1, 11);
    }
  };
  const RetryPolicy policy = no_jitter();
  CallOptions options;
  options.hedging = &hedging;
  Received received;
  asio::async_call_with_retry<int>(io.get_executor(), requests.attempt(), policy, options, received.handler());
  io.run();
  REQUIRE(received.called);
  CHECK(received.answer == 11);
  CHECK_FALSE(first_may_stream);
  CHECK(requests.started[0]->cancelled);
}

TEST_CASE("Hedging: a cancel while both requests are in flight cancels both and completes once", "[asio][hedging]") {
  boost::asio::io_context io;
  Hedging hedging(after(1ms));
  Requests requests{io, {}, {}};
  boost::asio::cancellation_signal cancel;
  requests.on_start = [&](std::size_t index) {
    if (index == 1) boost::asio::post(io, [&] { cancel.emit(boost::asio::cancellation_type::terminal); });
  };
  const RetryPolicy policy = no_jitter();
  CallStats stats;
  CallOptions options;
  options.hedging = &hedging;
  options.stats = &stats;
  int completions = 0;
  Received received;
  asio::async_call_with_retry<int>(io.get_executor(), requests.attempt(), policy, options,
                                   boost::asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr e, int a) {
                                     ++completions;
                                     received.handler()(std::move(e), a);
                                   }));
  io.run();
  CHECK(completions == 1);
  CHECK(is_cancelled(received.error));
  REQUIRE(requests.started.size() == 2);
  CHECK(requests.started[0]->cancelled);
  CHECK(requests.started[1]->cancelled);
  REQUIRE(stats.stopped);
  CHECK(*stats.stopped == StopReason::cancelled);
}

TEST_CASE("Hedging: a cancel after the first request failed, while its hedge runs", "[asio][hedging]") {
  boost::asio::io_context io;
  Hedging hedging(after(1ms));
  Requests requests{io, {}, {}};
  boost::asio::cancellation_signal cancel;
  requests.on_start = [&](std::size_t index) {
    if (index == 1) {
      requests.answer(0, 0, unavailable());
      boost::asio::post(io,
                        [&] { boost::asio::post(io, [&] { cancel.emit(boost::asio::cancellation_type::terminal); }); });
    }
  };
  const RetryPolicy policy = no_jitter();
  CallOptions options;
  options.hedging = &hedging;
  Received received;
  asio::async_call_with_retry<int>(io.get_executor(), requests.attempt(), policy, options,
                                   boost::asio::bind_cancellation_slot(cancel.slot(), received.handler()));
  io.run();
  REQUIRE(received.called);
  CHECK(is_cancelled(received.error));
  REQUIRE(requests.started.size() == 2);
  CHECK(requests.started[1]->cancelled);
}

TEST_CASE("Hedging: a call not safe to repeat is never hedged; a GuardOn call is refused", "[asio][hedging]") {
  boost::asio::io_context io;
  Hedging hedging(after(1ms));
  const RetryPolicy policy = no_jitter();
  CallOptions options;
  options.hedging = &hedging;

  SECTION("not safe to repeat") {
    options.safe_to_repeat = false;
    Requests requests{io, {}, {}};
    bool answered = false;
    requests.on_start = [&](std::size_t) {
      // Answers well after the delay: a timer of 20 ms, longer than the hedge's 1 ms.
      auto timer = std::make_shared<boost::asio::steady_timer>(io, 20ms);
      timer->async_wait([&, timer](boost::system::error_code) {
        answered = true;
        requests.answer(0, 1);
      });
    };
    Received received;
    asio::async_call_with_retry<int>(io.get_executor(), requests.attempt(), policy, options, received.handler());
    io.run();
    CHECK(answered);
    CHECK(received.answer == 1);
    CHECK(requests.started.size() == 1);
  }
  SECTION("guard_on") {
    boost::asio::thread_pool pool(1);
    NoGuard plain;
    auto on_pool = asio::guard_on(pool.get_executor(), plain);
    Requests requests{io, {}, {}};
    Received received;
    CHECK_THROWS_AS(asio::async_call_with_retry<int>(io.get_executor(), requests.attempt(), policy, on_pool, options,
                                                     received.handler()),
                    std::invalid_argument);
  }
}

TEST_CASE("Hedging: the hedge fails while the first request runs; the first one's answer is the call's",
          "[asio][hedging]") {
  boost::asio::io_context io;
  Hedging hedging(after(1ms));
  Requests requests{io, {}, {}};
  requests.on_start = [&](std::size_t index) {
    if (index == 1) {
      requests.answer(1, 0, unavailable());
      boost::asio::post(io, [&] { boost::asio::post(io, [&] { requests.answer(0, 4); }); });
    }
  };
  const RetryPolicy policy = no_jitter();
  CallStats stats;
  CallOptions options;
  options.hedging = &hedging;
  options.stats = &stats;
  Received received;
  asio::async_call_with_retry<int>(io.get_executor(), requests.attempt(), policy, options, received.handler());
  io.run();
  REQUIRE(received.called);
  CHECK_FALSE(received.error);
  CHECK(received.answer == 4);
  CHECK(requests.started.size() == 2);
  CHECK(stats.attempts == 1);
  CHECK(hedging.stats().wins == 0);
}

TEST_CASE("Hedging: a hedge that completes with something that is not a std::exception ends the call with it",
          "[asio][hedging]") {
  boost::asio::io_context io;
  Hedging hedging(after(1ms));
  Requests requests{io, {}, {}};
  requests.on_start = [&](std::size_t index) {
    if (index == 1) requests.answer(1, 0, std::make_exception_ptr(42));
  };
  const RetryPolicy policy = no_jitter();
  CallOptions options;
  options.hedging = &hedging;
  Received received;
  asio::async_call_with_retry<int>(io.get_executor(), requests.attempt(), policy, options, received.handler());
  io.run();
  REQUIRE(received.called);
  REQUIRE(received.error);
  CHECK_THROWS_AS(std::rethrow_exception(received.error), int);
  CHECK(requests.started[0]->cancelled);  // the first one was cancelled, and ended, before the call did
}

TEST_CASE("Hedging: a guard that throws when it admits the hedge keeps the hedge from going, nothing more",
          "[asio][hedging]") {
  struct ThrowsOnHedges {
    NoGuard::Ticket ticket;
    Admission<NoGuard::Ticket> admit(const Attempt& attempt) {
      if (attempt.hedge) throw std::runtime_error("no hedge for you");
      return Admission<NoGuard::Ticket>::go(NoGuard::Ticket{});
    }
  } guard;
  boost::asio::io_context io;
  Hedging hedging(after(1ms));
  Requests requests{io, {}, {}};
  auto late = std::make_shared<boost::asio::steady_timer>(io, 30ms);  // answers after the hedge's delay
  requests.on_start = [&](std::size_t) { late->async_wait([&](boost::system::error_code) { requests.answer(0, 6); }); };
  const RetryPolicy policy = no_jitter();
  CallOptions options;
  options.hedging = &hedging;
  Received received;
  asio::async_call_with_retry<int>(io.get_executor(), requests.attempt(), policy, guard, options, received.handler());
  io.run();
  REQUIRE(received.called);
  CHECK_FALSE(received.error);
  CHECK(received.answer == 6);
  CHECK(requests.started.size() == 1);
}

TEST_CASE("Hedging: a cancel after the hedge claimed the stream cancels it; the call completes cancelled, once",
          "[asio][hedging]") {
  boost::asio::io_context io;
  Hedging hedging(after(1ms));
  Requests requests{io, {}, {}};
  boost::asio::cancellation_signal cancel;
  requests.on_start = [&](std::size_t index) {
    if (index == 1) {
      CHECK(requests.started[1]->attempt.claim());  // streams, then hangs
      auto later = std::make_shared<boost::asio::steady_timer>(io, 10ms);
      later->async_wait(
          [&, later](boost::system::error_code) { cancel.emit(boost::asio::cancellation_type::terminal); });
    }
  };
  const RetryPolicy policy = no_jitter();
  CallStats stats;
  CallOptions options;
  options.hedging = &hedging;
  options.stats = &stats;
  int completions = 0;
  Received received;
  asio::async_call_with_retry<int>(io.get_executor(), requests.attempt(), policy, options,
                                   boost::asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr e, int a) {
                                     ++completions;
                                     received.handler()(std::move(e), a);
                                   }));
  io.run();
  CHECK(completions == 1);
  CHECK(is_cancelled(received.error));
  CHECK(requests.started[0]->cancelled);
  CHECK(requests.started[1]->cancelled);
  REQUIRE(stats.stopped);
  CHECK(*stats.stopped == StopReason::cancelled);
}
