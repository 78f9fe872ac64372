#include <llmretry/guard.hpp>

#include <llmretry/retry.hpp>
#include <llmretry/testing.hpp>

#include <deque>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "give_up_recorder.hpp"
#include "helpers.hpp"
#include "llmretry_catch.hpp"

using namespace llmretry;
using llmretry::testing::FakeSleep;
using llmretry::testing::ManualClock;
using llmretry::testing::SimulatedProvider;
using std::chrono::milliseconds;
using namespace std::chrono_literals;
using llmretry_test::no_jitter;

namespace {

// A guard that answers each admission from a script (a wait, or a refusal) and writes down everything
// it hears: admissions, outcomes, and tickets given back without an outcome.
class ScriptedGuard {
 public:
  struct Answer {
    milliseconds wait{0};
    std::optional<Refusal> refusal;
  };

  class Ticket {
   public:
    Ticket(ScriptedGuard& guard, int number) : guard_(&guard), number_(number) {}
    Ticket(Ticket&& other) noexcept : guard_(std::exchange(other.guard_, nullptr)), number_(other.number_) {}
    Ticket& operator=(Ticket&&) = delete;
    ~Ticket() {
      if (guard_ != nullptr) guard_->log.push_back("cancelled " + std::to_string(number_));
    }
    void succeeded(const int& answer) { finish("succeeded " + std::to_string(answer)); }
    void succeeded(const Result<int>& answer) { finish("succeeded result " + std::to_string(*answer)); }
    void succeeded() { finish("succeeded"); }
    void failed(const Failure& failure) { finish(std::string("failed ") + to_string(failure.kind)); }

   private:
    void finish(const std::string& entry) {
      guard_->log.push_back(entry);
      guard_ = nullptr;
    }
    ScriptedGuard* guard_;
    int number_;
  };

  Admission<Ticket> admit(const Attempt& attempt) {
    log.push_back("admit " + std::to_string(attempt.number) +
                  (attempt.time_left ? " left " + std::to_string(attempt.time_left->count()) : std::string()));
    Answer answer;
    if (!answers.empty()) {
      answer = answers.front();
      answers.pop_front();
    }
    if (answer.refusal) return Admission<Ticket>::refuse(*answer.refusal);
    return Admission<Ticket>::go(Ticket{*this, attempt.number}, answer.wait);
  }

  std::deque<Answer> answers;
  std::vector<std::string> log;
};

Refusal breaker_open() {
  Failure failure = Failure::of(FailureKind::server_error, Sent::not_sent);
  failure.provider_wait = 5s;
  return Refusal{StopReason::refused, failure};
}

}  // namespace

TEST_CASE("A guard admits every attempt, the first too, and learns every outcome", "[guard]") {
  ScriptedGuard guard;
  FakeSleep sleep;
  SimulatedProvider provider{"server_error", "rate_limit"};
  const int answer = call_with_retry([&] { return provider.call([] { return 7; }); }, no_jitter(), sleep, guard);
  CHECK(answer == 7);
  CHECK(guard.log == std::vector<std::string>{"admit 1", "failed server_error", "admit 2", "failed rate_limited",
                                              "admit 3", "succeeded 7"});

  SECTION("also for a call that returns nothing") {
    guard.log.clear();
    call_with_retry([] {}, no_jitter(), sleep, guard);
    CHECK(guard.log == std::vector<std::string>{"admit 1", "succeeded"});
  }
}

TEST_CASE("A guard's wait is slept before the attempt and counts toward the wait budget", "[guard]") {
  ScriptedGuard guard;
  FakeSleep sleep;
  CallStats stats;
  CallOptions options;
  options.stats = &stats;
  guard.answers = {{250ms, {}}, {100ms, {}}};
  SimulatedProvider provider{"rate_limit"};
  call_with_retry([&] { provider.call(); }, no_jitter(), sleep, guard, options);
  CHECK(sleep.waits() == std::vector<milliseconds>{250ms, 500ms, 100ms});
  CHECK(stats.waited == 850ms);
  CHECK(stats.attempts == 2);

  SECTION("a wait past max_total_wait stops the call, and the ticket is given back") {
    RetryPolicy policy = no_jitter();
    policy.max_total_wait = 1s;
    GiveUpRecorder recorder;
    guard.answers = {{0ms, {}}, {600ms, {}}};
    guard.log.clear();
    SimulatedProvider failing{"server_error*5"};
    CHECK_THROWS_AS(call_with_retry([&] { failing.call(); }, policy, sleep, guard, recorder.options), ProviderError);
    CHECK(failing.calls() == 1);  // 0.5 s of backoff, then 0.6 s more for the guard: past 1 s
    REQUIRE(recorder.gave_up);
    CHECK(recorder.gave_up->reason == StopReason::wait_budget);
    CHECK(guard.log == std::vector<std::string>{"admit 1", "failed server_error", "admit 2", "cancelled 2"});
  }
}

TEST_CASE("A guard's wait that would end after the deadline stops the call", "[guard]") {
  ManualClock clock;
  FakeSleep sleep{clock};
  ScriptedGuard guard;
  GiveUpRecorder recorder;
  recorder.options.clock = std::ref(clock);
  recorder.options.deadline = clock.now() + 2s;
  guard.answers = {{3s, {}}};
  CHECK_THROWS_AS(call_with_retry([] { return 1; }, no_jitter(), sleep, guard, recorder.options), AttemptRefused);
  CHECK(sleep.waits().empty());
  REQUIRE(recorder.gave_up);
  CHECK(recorder.gave_up->reason == StopReason::deadline);
  CHECK(recorder.gave_up->attempts == 0);
  CHECK(guard.log == std::vector<std::string>{"admit 1 left 2000", "cancelled 1"});
}

TEST_CASE("A refused first attempt ends the call without calling", "[guard]") {
  ScriptedGuard guard;
  FakeSleep sleep;
  GiveUpRecorder recorder;
  int calls = 0;
  guard.answers = {{0ms, breaker_open()}};

  SECTION("thrown as AttemptRefused, with the guard's failure and reason") {
    try {
      call_with_retry([&] { return ++calls; }, no_jitter(), sleep, guard, recorder.options);
      FAIL("no exception");
    } catch (const AttemptRefused& refused) {
      CHECK(refused.reason() == StopReason::refused);
      CHECK(refused.failure().provider_wait == 5s);
    }
    CHECK(calls == 0);
    REQUIRE(recorder.gave_up);
    CHECK(recorder.gave_up->reason == StopReason::refused);
    CHECK(recorder.gave_up->attempts == 0);
  }

  SECTION("returned as the error of a result-like call") {
    const Result<int> result = call_with_retry([&]() -> Result<int> { return ++calls; }, no_jitter(), sleep, guard);
    REQUIRE_FALSE(result.has_value());
    CHECK(result.error().failure.provider_wait == 5s);
    CHECK(calls == 0);
  }
}

TEST_CASE("A refused retry ends the call with the last failure", "[guard]") {
  ScriptedGuard guard;
  FakeSleep sleep;
  GiveUpRecorder recorder;
  guard.answers = {{0ms, {}}, {0ms, breaker_open()}};

  SECTION("rethrown unchanged") {
    SimulatedProvider provider{"server_error*5"};
    CHECK_THROWS_AS(call_with_retry([&] { provider.call(); }, no_jitter(), sleep, guard, recorder.options),
                    ProviderError);
    CHECK(provider.calls() == 1);
    REQUIRE(recorder.gave_up);
    CHECK(recorder.gave_up->reason == StopReason::refused);
    CHECK(recorder.gave_up->attempts == 1);
  }

  SECTION("returned as it was") {
    int calls = 0;
    const Result<int> result = call_with_retry(
        [&]() -> Result<int> {
          ++calls;
          return Error{classify_status(503), "overloaded"};
        },
        no_jitter(), sleep, guard);
    REQUIRE_FALSE(result.has_value());
    CHECK(result.error().message == "overloaded");
    CHECK(calls == 1);
  }
}

TEST_CASE("NoGuard admits at once", "[guard]") {
  auto admission = NoGuard{}.admit(Attempt{});
  CHECK(admission.admitted());
  CHECK(admission.wait() == 0ms);
}

TEST_CASE("guards() admits in order, waits for the longest, and tells every ticket the outcome", "[guard]") {
  ScriptedGuard first;
  ScriptedGuard second;
  FakeSleep sleep;
  first.answers = {{100ms, {}}, {0ms, {}}};
  second.answers = {{300ms, {}}, {50ms, {}}};
  SimulatedProvider provider{"rate_limit"};
  const int answer =
      call_with_retry([&] { return provider.call([] { return 3; }); }, no_jitter(), sleep, guards(first, second));
  CHECK(answer == 3);
  CHECK(sleep.waits() == std::vector<milliseconds>{300ms, 500ms, 50ms});
  CHECK(first.log == std::vector<std::string>{"admit 1", "failed rate_limited", "admit 2", "succeeded 3"});
  CHECK(second.log == first.log);
}

TEST_CASE("guards(): a refusal by a later guard gives back the earlier tickets and skips the rest", "[guard]") {
  ScriptedGuard first;
  ScriptedGuard second;
  ScriptedGuard third;
  FakeSleep sleep;
  GiveUpRecorder recorder;
  second.answers = {{0ms, breaker_open()}};
  CHECK_THROWS_AS(call_with_retry([] { return 1; }, no_jitter(), sleep, guards(first, second, third), recorder.options),
                  AttemptRefused);
  CHECK(first.log == std::vector<std::string>{"admit 1", "cancelled 1"});
  CHECK(second.log == std::vector<std::string>{"admit 1"});
  CHECK(third.log.empty());
  REQUIRE(recorder.gave_up);
  CHECK(recorder.gave_up->failure.provider_wait == 5s);
}

namespace {
// A guard whose tickets take a slot in begin(): refused when `slots` is zero.
struct SlotGuard {
  int slots = 1;
  std::vector<std::string> log;
  struct Ticket {
    SlotGuard* guard;
    bool held = false;
    Ticket(SlotGuard* g) : guard(g) {}  // NOLINT(google-explicit-constructor)
    Ticket(Ticket&& other) noexcept : guard(other.guard), held(std::exchange(other.held, false)) {}
    Ticket& operator=(Ticket&&) = delete;
    ~Ticket() {
      if (held) guard->log.push_back("released");
    }
    std::optional<Refusal> begin(const Attempt& /*attempt*/) {
      if (guard->slots == 0)
        return Refusal{StopReason::no_capacity, Failure::of(FailureKind::rate_limited, Sent::not_sent)};
      held = true;
      guard->log.push_back("began");
      return std::nullopt;
    }
    void succeeded(const int& /*answer*/) { guard->log.push_back("succeeded"); }
    void failed(const Failure& /*failure*/) { guard->log.push_back("failed"); }
  };
  Admission<Ticket> admit(const Attempt& /*attempt*/) { return Admission<Ticket>::go(Ticket{this}); }
};
}  // namespace

TEST_CASE("guards(): begin runs on every ticket that has one; a refusal there gives back the others", "[guard]") {
  SlotGuard held;
  SlotGuard full;
  ScriptedGuard scripted;
  FakeSleep sleep;
  CHECK(call_with_retry([] { return 1; }, no_jitter(), sleep, guards(held, scripted)) == 1);
  CHECK(held.log == std::vector<std::string>{"began", "succeeded", "released"});

  held.log.clear();
  scripted.log.clear();
  full.slots = 0;
  try {
    (void)call_with_retry([] { return 1; }, no_jitter(), sleep, guards(held, full, scripted));
    FAIL("no exception");
  } catch (const AttemptRefused& refused) {
    CHECK(refused.reason() == StopReason::no_capacity);
  }
  CHECK(held.log == std::vector<std::string>{"began", "released"});
  CHECK(scripted.log == std::vector<std::string>{"admit 1", "cancelled 1"});
}

TEST_CASE("A guard that throws on hearing a success does not turn the success into a failure", "[guard]") {
  struct Throwing {
    struct Ticket {
      std::vector<std::string>* log;
      void succeeded(const int& /*answer*/) { throw std::runtime_error("metrics backend down"); }
      void failed(const Failure& /*failure*/) { log->push_back("failed"); }
    };
    std::vector<std::string> log;
    Admission<Ticket> admit(const Attempt& /*attempt*/) { return Admission<Ticket>::go(Ticket{&log}); }
  } guard;
  FakeSleep sleep;
  int calls = 0;
  CHECK_THROWS_WITH(call_with_retry([&] { return ++calls; }, no_jitter(), sleep, guard), "metrics backend down");
  CHECK(calls == 1);         // not retried
  CHECK(guard.log.empty());  // and never told it failed
}

TEST_CASE("guards(): a ticket that throws on hearing the outcome does not keep it from the tickets after it",
          "[guard]") {
  struct Throwing {
    struct Ticket {
      void succeeded(const int& /*answer*/) { throw std::runtime_error("succeeded threw"); }
      void failed(const Failure& /*failure*/) { throw std::runtime_error("failed threw"); }
    };
    Admission<Ticket> admit(const Attempt& /*attempt*/) { return Admission<Ticket>::go(Ticket{}); }
  } throwing;
  ScriptedGuard first;
  ScriptedGuard last;
  auto set = guards(first, throwing, throwing, last);
  auto admission = set.admit(Attempt{});
  REQUIRE(admission.admitted());
  SECTION("a success") {
    CHECK_THROWS_WITH(admission.ticket().succeeded(5), "succeeded threw");
    CHECK(last.log == std::vector<std::string>{"admit 1", "succeeded 5"});
  }
  SECTION("a failure") {
    CHECK_THROWS_WITH(admission.ticket().failed(Failure::of(FailureKind::server_error, Sent::maybe_processed)),
                      "failed threw");
    CHECK(last.log == std::vector<std::string>{"admit 1", "failed server_error"});
  }
  CHECK(first.log == std::vector<std::string>{"admit 1", last.log.back()});
}

TEST_CASE("A guard's wait that uses up the time left refuses the attempt for the deadline", "[guard]") {
  ManualClock clock;
  FakeSleep sleep{clock};
  ScriptedGuard guard;
  CallOptions options;
  options.clock = std::ref(clock);
  options.deadline = clock.now() + 2s;
  CallStats stats;
  options.stats = &stats;
  guard.answers = {{2s, {}}};  // exactly the time left: allowed, but nothing remains for the attempt
  int calls = 0;
  CHECK_THROWS_AS(call_with_retry([&](const Attempt&) { return ++calls; }, no_jitter(), sleep, guard, options),
                  AttemptRefused);
  CHECK(calls == 0);
  CHECK(stats.stopped == StopReason::deadline);
  CHECK(guard.log.back() == "cancelled 1");
}
