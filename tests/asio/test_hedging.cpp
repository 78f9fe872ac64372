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

/// One hedged call (the hedge after 1 ms) on its own io_context, cancellable through `cancel`.
struct HedgedCall {
  boost::asio::io_context io;
  Hedging hedging{after(1ms)};
  Requests requests{io, {}, {}};
  RetryPolicy policy = no_jitter();
  CallStats stats;
  CallOptions options;
  boost::asio::cancellation_signal cancel;
  Received received;
  int completions = 0;

  HedgedCall() {
    options.hedging = &hedging;
    options.stats = &stats;
  }

  /// Makes the call through `guard` and runs the io_context until nothing is left.
  template <class Guard = const NoGuard>
  void run(Guard& guard = no_guard) {
    asio::async_call_with_retry<int>(
        io.get_executor(), requests.attempt(), policy, guard, options,
        boost::asio::bind_cancellation_slot(cancel.slot(), [this](std::exception_ptr e, int a) {
          ++completions;
          received.handler()(std::move(e), a);
        }));
    io.run();
  }

  /// Runs `then` on the io_context after the handlers already queued, and those they queue.
  void soon(std::function<void()> then) {
    boost::asio::post(io, [this, then = std::move(then)] { boost::asio::post(io, then); });
  }
  /// Cancels the call soon (see soon()).
  void cancel_soon() {
    soon([this] { cancel.emit(boost::asio::cancellation_type::terminal); });
  }

  static inline const NoGuard no_guard{};
};

}  // namespace

TEST_CASE("Hedging: a first request that hangs is hedged; the hedge's answer wins and the first is cancelled",
          "[asio][hedging]") {
  HedgedCall call;
  call.requests.on_start = [&](std::size_t index) {
    if (index == 1) call.requests.answer(1, 7);  // the hedge answers at once; the first never does
  };
  call.run();
  REQUIRE(call.received.called);
  CHECK_FALSE(call.received.error);
  CHECK(call.received.answer == 7);
  const auto& started = call.requests.started;
  REQUIRE(started.size() == 2);
  CHECK_FALSE(started[0]->attempt.hedge);
  CHECK(started[1]->attempt.hedge);
  CHECK(started[1]->attempt.number == 1);
  CHECK(started[0]->cancelled);  // and its handler ran before the call completed: io.run() returned
  CHECK(started[0]->done);
  CHECK(call.stats.attempts == 1);
  CHECK(call.stats.hedges == 1);
  CHECK(call.hedging.stats().wins == 1);
}

TEST_CASE("Hedging: the first request answers after the hedge started; the hedge is cancelled", "[asio][hedging]") {
  HedgedCall call;
  call.requests.on_start = [&](std::size_t index) {
    if (index == 1) call.requests.answer(0, 5);
  };
  call.run();
  CHECK_FALSE(call.received.error);
  CHECK(call.received.answer == 5);
  REQUIRE(call.requests.started.size() == 2);
  CHECK(call.requests.started[1]->cancelled);
  CHECK(call.hedging.stats().wins == 0);
  CHECK(call.hedging.stats().hedges == 1);
}

TEST_CASE("Hedging: the hedge fails while the first request runs; the first one's answer is the call's",
          "[asio][hedging]") {
  HedgedCall call;
  call.requests.on_start = [&](std::size_t index) {
    if (index != 1) return;
    call.requests.answer(1, 0, unavailable());
    call.soon([&] { call.requests.answer(0, 4); });
  };
  call.run();
  CHECK_FALSE(call.received.error);
  CHECK(call.received.answer == 4);
  CHECK(call.requests.started.size() == 2);
  CHECK(call.stats.attempts == 1);
  CHECK(call.hedging.stats().wins == 0);
}

TEST_CASE("Hedging: a fast first answer never starts the hedge's request", "[asio][hedging]") {
  HedgedCall call;
  Hedging slow(after(std::chrono::hours{1}));
  call.options.hedging = &slow;
  call.requests.on_start = [&](std::size_t index) { call.requests.answer(index, 3); };
  call.run();  // returns at once: the hedge's timer was cancelled, not waited for
  CHECK(call.received.answer == 3);
  CHECK(call.requests.started.size() == 1);
  CHECK(slow.stats().hedges == 0);
}

TEST_CASE("Hedging: both requests fail; the call retries, and the retry is hedged again", "[asio][hedging]") {
  HedgedCall call;
  call.requests.on_start = [&](std::size_t index) {
    if (index == 1) {  // the hedge of attempt 1: both fail, the hedge first
      call.requests.answer(1, 0, unavailable());
      call.requests.answer(0, 0, unavailable());
    }
    if (index == 3) call.requests.answer(3, 9);  // the hedge of attempt 2 answers
  };
  call.run();
  CHECK_FALSE(call.received.error);
  CHECK(call.received.answer == 9);
  const auto& started = call.requests.started;
  REQUIRE(started.size() == 4);
  CHECK(started[2]->attempt.number == 2);
  CHECK_FALSE(started[2]->attempt.hedge);
  CHECK(started[3]->attempt.hedge);
  CHECK(started[2]->cancelled);
  CHECK(call.stats.attempts == 2);
  CHECK(call.stats.hedges == 2);
}

TEST_CASE("Hedging: a request that claims the stream first wins; the other is cancelled", "[asio][hedging]") {
  HedgedCall call;
  bool first_may_stream = true;
  call.requests.on_start = [&](std::size_t index) {
    if (index != 1) return;
    CHECK(call.requests.started[1]->attempt.claim());  // the hedge's first event
    first_may_stream = call.requests.started[0]->attempt.claim();
    call.requests.answer(1, 11);
  };
  call.run();
  CHECK(call.received.answer == 11);
  CHECK_FALSE(first_may_stream);
  CHECK(call.requests.started[0]->cancelled);
}

TEST_CASE("Hedging: a cancel in each state completes the call cancelled, once, every request ended",
          "[asio][hedging]") {
  HedgedCall call;
  SECTION("both requests in flight") {
    call.requests.on_start = [&](std::size_t index) {
      if (index == 1) call.cancel_soon();
    };
  }
  SECTION("the first request failed, its hedge runs") {
    call.requests.on_start = [&](std::size_t index) {
      if (index != 1) return;
      call.requests.answer(0, 0, unavailable());
      call.cancel_soon();
    };
  }
  SECTION("the hedge claimed the stream, the first request was cancelled") {
    call.requests.on_start = [&](std::size_t index) {
      if (index != 1) return;
      CHECK(call.requests.started[1]->attempt.claim());  // streams, then hangs
      call.cancel_soon();
    };
  }
  call.run();
  CHECK(call.completions == 1);
  CHECK(is_cancelled(call.received.error));
  REQUIRE(call.requests.started.size() == 2);
  for (const auto& request : call.requests.started) CHECK(request->done);
  CHECK(call.requests.started[1]->cancelled);
  REQUIRE(call.stats.stopped);
  CHECK(*call.stats.stopped == StopReason::cancelled);
}

TEST_CASE("Hedging: a hedge that completes with something that is not a std::exception ends the call with it",
          "[asio][hedging]") {
  HedgedCall call;
  call.requests.on_start = [&](std::size_t index) {
    if (index == 1) call.requests.answer(1, 0, std::make_exception_ptr(42));
  };
  call.run();
  REQUIRE(call.received.error);
  CHECK_THROWS_AS(std::rethrow_exception(call.received.error), int);
  CHECK(call.requests.started[0]->cancelled);  // the first one was cancelled, and ended, before the call did
}

TEST_CASE("Hedging: what keeps a hedge from going: not safe to repeat, a guard that throws for it", "[asio][hedging]") {
  HedgedCall call;
  auto late = std::make_shared<boost::asio::steady_timer>(call.io, 30ms);  // answers after the hedge's delay
  call.requests.on_start = [&](std::size_t) {
    late->async_wait([&](boost::system::error_code) { call.requests.answer(0, 6); });
  };
  SECTION("not safe to repeat") {
    call.options.safe_to_repeat = false;
    call.run();
  }
  SECTION("a guard that throws when it admits the hedge") {
    struct ThrowsOnHedges {
      Admission<NoGuard::Ticket> admit(const Attempt& attempt) {
        if (attempt.hedge) throw std::runtime_error("no hedge for you");
        return Admission<NoGuard::Ticket>::go(NoGuard::Ticket{});
      }
    } guard;
    call.run(guard);
  }
  CHECK_FALSE(call.received.error);
  CHECK(call.received.answer == 6);
  CHECK(call.requests.started.size() == 1);
}

TEST_CASE("Hedging: a call whose guard is a GuardOn is refused", "[asio][hedging]") {
  HedgedCall call;
  boost::asio::thread_pool pool(1);
  NoGuard plain;
  auto on_pool = asio::guard_on(pool.get_executor(), plain);
  CHECK_THROWS_AS(asio::async_call_with_retry<int>(call.io.get_executor(), call.requests.attempt(), call.policy,
                                                   on_pool, call.options, call.received.handler()),
                  std::invalid_argument);
}
