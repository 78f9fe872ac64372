#include <llmretry/engine.hpp>

#include <llmretry/admission/deployment.hpp>
#include <llmretry/retry.hpp>
#include <llmretry/testing.hpp>

#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

#include "helpers.hpp"
#include "llmretry_catch.hpp"

using namespace llmretry;
using llmretry::testing::FakeSleep;
using llmretry::testing::ManualClock;
using std::chrono::milliseconds;
using namespace std::chrono_literals;
using Kind = Step::Kind;
using llmretry_test::no_jitter;

namespace {

Failure rate_limited(milliseconds wait) {
  Failure failure = Failure::of(FailureKind::rate_limited, Sent::refused);
  failure.status = 429;
  failure.provider_wait = wait;
  return failure;
}

const Failure unavailable{FailureKind::server_error, 503, std::nullopt, Sent::maybe_processed, std::nullopt};

// A guard that admits after `wait` each time, counting admissions and outcomes; it refuses once `refuse_from`
// admissions were made.
struct CountingGuard {
  milliseconds wait{0};
  int refuse_from = 1000;
  int admitted = 0;
  int succeeded = 0;
  int failed = 0;
  int given_back = 0;

  struct Ticket {
    CountingGuard* guard;
    bool told = false;
    Ticket(CountingGuard* owner) : guard(owner) {}
    Ticket(Ticket&& other) noexcept : guard(other.guard), told(std::exchange(other.told, true)) {}
    Ticket& operator=(Ticket&&) = delete;
    ~Ticket() {
      if (!told) ++guard->given_back;
    }
    void succeeded(const int& /*answer*/) {
      told = true;
      ++guard->succeeded;
    }
    void failed(const Failure& /*failure*/) {
      told = true;
      ++guard->failed;
    }
  };

  Admission<Ticket> admit(const Attempt& /*attempt*/) {
    if (admitted >= refuse_from)
      return Admission<Ticket>::refuse(
          Refusal{StopReason::refused, Failure::of(FailureKind::server_error, Sent::not_sent)});
    ++admitted;
    return Admission<Ticket>::go(Ticket{this}, wait);
  }
};

// A guard whose ticket, at its first begin, asks to wait `wait` for `reason`, then begins; each admission
// moves `clock` (when set) by `admission_takes`.
struct WaitingToBegin {
  milliseconds wait{0};
  WaitReason reason = WaitReason::capacity;
  ManualClock* clock = nullptr;
  milliseconds admission_takes{0};
  int given_back = 0;

  struct Ticket {
    WaitingToBegin* guard;
    bool asked = false;
    bool told = false;
    Ticket(WaitingToBegin* owner) : guard(owner) {}
    Ticket(Ticket&& other) noexcept : guard(other.guard), asked(other.asked), told(std::exchange(other.told, true)) {}
    Ticket& operator=(Ticket&&) = delete;
    ~Ticket() {
      if (!told) ++guard->given_back;
    }
    Begin begin(const Attempt& /*attempt*/, Waker* /*waker*/) {
      if (std::exchange(asked, true)) return Begin::go();
      return Begin::wait_at_most(guard->wait, guard->reason);
    }
    void succeeded(const int& /*answer*/) { told = true; }
    void failed(const Failure& /*failure*/) { told = true; }
  };

  Admission<Ticket> admit(const Attempt& /*attempt*/) {
    if (clock != nullptr) clock->advance(admission_takes);
    return Admission<Ticket>::go(Ticket{this});
  }
};

// Returns options whose deadline is `deadline`, read on `clock` (which must outlive them).
CallOptions with_deadline(ManualClock& clock, ManualClock::time_point deadline) {
  CallOptions options;
  options.clock = std::ref(clock);
  options.deadline = deadline;
  return options;
}

// Checks that `engine`'s call ended at start() for `reason`, nothing sent, and that its guard got back the
// one ticket it gave.
template <class Engine, class Guard>
void check_refused_before_sending(Engine& engine, const Guard& guard, StopReason reason) {
  CHECK(engine.start().kind == Kind::done);
  REQUIRE(engine.first_refusal());
  CHECK(engine.first_refusal()->reason == reason);
  CHECK(engine.first_refusal()->failure.sent == Sent::not_sent);
  CHECK(guard.given_back == 1);
}

}  // namespace

TEST_CASE("CallEngine: a first attempt that succeeds is one attempt step, then done") {
  const RetryPolicy policy;
  const CallOptions options;
  CallEngine engine(policy, NoGuard{}, options);
  CHECK(engine.start().kind == Kind::attempt);
  CHECK(engine.attempt().number == 1);
  CHECK(engine.succeeded(42).kind == Kind::done);
  CHECK(engine.gave_up() == nullptr);
  CHECK(engine.attempts() == 1);
  CHECK(engine.waited() == 0ms);
}

TEST_CASE("CallEngine: a failure is a wait step with its reason, and resume() is the next attempt") {
  const RetryPolicy policy = no_jitter();
  CallStats stats;
  CallOptions options;
  options.stats = &stats;
  std::minstd_rand rng;
  CallEngine engine(policy, NoGuard{}, options);
  REQUIRE(engine.start().kind == Kind::attempt);

  SECTION("the backoff") {
    const Step wait = engine.failed(unavailable, rng);
    CHECK(wait.kind == Kind::wait);
    CHECK(wait.wait == 500ms);
    CHECK(wait.reason == WaitReason::backoff);
  }
  SECTION("the provider's wait when it is longer than the backoff") {
    const Step wait = engine.failed(rate_limited(2s), rng);
    CHECK(wait.kind == Kind::wait);
    CHECK(wait.wait == 2s);
    CHECK(wait.reason == WaitReason::provider);
  }
  SECTION("the backoff when it is longer than the provider's wait") {
    const Step wait = engine.failed(rate_limited(100ms), rng);
    CHECK(wait.wait == 500ms);
    CHECK(wait.reason == WaitReason::backoff);
  }
  const Step next = engine.resume();
  CHECK(next.kind == Kind::attempt);
  CHECK(engine.attempt().number == 2);
  CHECK(engine.succeeded(1).kind == Kind::done);
  CHECK(stats.attempts == 2);
  CHECK_FALSE(stats.stopped);
}

TEST_CASE("CallEngine: the waits of a call that fails every time, then its give-up") {
  const RetryPolicy policy = no_jitter();  // 4 attempts: waits 0.5, 1, 2
  std::vector<GiveUp> told;
  CallOptions options;
  options.on_give_up = [&](const GiveUp& give_up) { told.push_back(give_up); };
  std::minstd_rand rng;
  CallEngine engine(policy, NoGuard{}, options);
  std::vector<milliseconds> waits;
  Step step = engine.start();
  while (step.kind != Kind::done) {
    REQUIRE(step.kind == Kind::attempt);
    step = engine.failed(unavailable, rng);
    if (step.kind == Kind::wait) {
      waits.push_back(step.wait);
      step = engine.resume();
    }
  }
  CHECK(waits == std::vector<milliseconds>{500ms, 1000ms, 2000ms});
  REQUIRE(engine.gave_up() != nullptr);
  CHECK(engine.gave_up()->reason == StopReason::attempts_exhausted);
  CHECK(engine.gave_up()->attempts == 4);
  CHECK(engine.gave_up()->waited == 3500ms);
  CHECK(engine.gave_up()->failure == unavailable);
  CHECK_FALSE(engine.first_refusal());
  REQUIRE(told.size() == 1);
  CHECK(told.front().reason == StopReason::attempts_exhausted);
}

TEST_CASE("CallEngine: a guard's wait for capacity is a step, never slept inside") {
  const RetryPolicy policy = no_jitter();
  const CallOptions options;
  CountingGuard guard;
  guard.wait = 1500ms;
  std::minstd_rand rng;
  CallEngine engine(policy, guard, options);  // an lvalue: shared, held by reference
  const Step first = engine.start();
  CHECK(first.kind == Kind::wait);
  CHECK(first.wait == 1500ms);
  CHECK(first.reason == WaitReason::capacity);
  CHECK(guard.admitted == 1);
  CHECK(engine.attempts() == 0);  // admitted, not begun
  CHECK(engine.resume().kind == Kind::attempt);
  CHECK(engine.attempts() == 1);
  CHECK(engine.waited() == 1500ms);

  // A failure: the backoff, then admission again, and its own wait for capacity.
  const Step backoff = engine.failed(unavailable, rng);
  CHECK(guard.failed == 1);
  CHECK(backoff.reason == WaitReason::backoff);
  const Step capacity = engine.resume();
  CHECK(capacity.kind == Kind::wait);
  CHECK(capacity.reason == WaitReason::capacity);
  CHECK(guard.admitted == 2);
  CHECK(engine.resume().kind == Kind::attempt);
  CHECK(engine.attempt().number == 2);
  CHECK(engine.succeeded(7).kind == Kind::done);
  CHECK(guard.succeeded == 1);
  CHECK(guard.given_back == 0);
  CHECK(engine.waited() == 1500ms + 500ms + 1500ms);
}

TEST_CASE("CallEngine: a wait for capacity past the wait budget is a refusal, and gives the ticket back") {
  RetryPolicy policy = no_jitter();
  policy.max_total_wait = 1s;
  const CallOptions options;
  CountingGuard guard;
  guard.wait = 1500ms;
  CallEngine engine(policy, guard, options);
  check_refused_before_sending(engine, guard, StopReason::wait_budget);
}

TEST_CASE("CallEngine: a refusal of the first attempt, and of a later one") {
  const RetryPolicy policy = no_jitter();
  const CallOptions options;
  CountingGuard guard;
  std::minstd_rand rng;

  SECTION("the first: first_refusal() says why, no attempt was made") {
    guard.refuse_from = 0;
    CallEngine engine(policy, guard, options);
    CHECK(engine.start().kind == Kind::done);
    REQUIRE(engine.first_refusal());
    CHECK(engine.first_refusal()->reason == StopReason::refused);
    CHECK(engine.attempts() == 0);
  }
  SECTION("a later one ends the call like a give-up, with the guard's reason") {
    guard.refuse_from = 1;
    CallEngine engine(policy, guard, options);
    REQUIRE(engine.start().kind == Kind::attempt);
    REQUIRE(engine.failed(unavailable, rng).kind == Kind::wait);
    CHECK(engine.resume().kind == Kind::done);
    CHECK_FALSE(engine.first_refusal());
    REQUIRE(engine.gave_up() != nullptr);
    CHECK(engine.gave_up()->reason == StopReason::refused);
    CHECK(engine.gave_up()->attempts == 1);
  }
}

TEST_CASE("CallEngine: the deadline on the options' clock, in virtual time") {
  const RetryPolicy policy = no_jitter();
  ManualClock clock;
  const CallOptions options = with_deadline(clock, clock.now() + 1200ms);
  std::minstd_rand rng;
  CallEngine engine(policy, NoGuard{}, options);
  REQUIRE(engine.start().kind == Kind::attempt);
  CHECK(engine.attempt().time_left == 1200ms);
  clock.advance(100ms);  // the attempt took 100 ms
  const Step wait = engine.failed(unavailable, rng);
  REQUIRE(wait.kind == Kind::wait);
  clock.advance(wait.wait);  // the driver waits in virtual time
  REQUIRE(engine.resume().kind == Kind::attempt);
  CHECK(engine.attempt().time_left == 600ms);
  clock.advance(100ms);
  // The next backoff (1 s) would end after the deadline (500 ms left).
  CHECK(engine.failed(unavailable, rng).kind == Kind::done);
  REQUIRE(engine.gave_up() != nullptr);
  CHECK(engine.gave_up()->reason == StopReason::deadline);
}

TEST_CASE("CallEngine: a Deployment in virtual time: the wait for capacity moves the manual clock, not real time") {
  ManualClock clock;
  DeploymentOptions deployment_options;
  deployment_options.name = "virtual";
  deployment_options.limits[Dimension::requests_per_minute] = Limit::per_minute(60, 1);  // one a second
  deployment_options.clock = std::ref(clock);
  Deployment deployment(deployment_options);
  const RetryPolicy policy = no_jitter();
  const CallOptions options;
  std::vector<milliseconds> waits;
  for (int call = 0; call < 3; ++call) {
    CallEngine engine(policy, deployment.pace(Cost{}), options);  // a temporary guard: moved in
    Step step = engine.start();
    while (step.kind == Kind::wait) {
      CHECK(step.reason == WaitReason::capacity);
      waits.push_back(step.wait);
      clock.advance(step.wait);
      step = engine.resume();
    }
    REQUIRE(step.kind == Kind::attempt);
    CHECK(engine.succeeded(0).kind == Kind::done);
  }
  CHECK(waits == std::vector<milliseconds>{1000ms, 1000ms});
}

TEST_CASE("CallEngine: a ticket's wait to begin ends by the deadline, and is never negative") {
  const RetryPolicy policy = no_jitter();
  ManualClock clock;
  const CallOptions options = with_deadline(clock, clock.now() + 10s);
  WaitingToBegin guard;
  CallEngine engine(policy, guard, options);

  SECTION("a wait for capacity past the deadline is refused, nothing sent, the ticket given back") {
    guard.wait = 1h;
    check_refused_before_sending(engine, guard, StopReason::deadline);
  }
  SECTION("a wait for a slot is cut to the deadline") {
    guard.wait = milliseconds::max();
    guard.reason = WaitReason::slot;
    const Step wait = engine.start();
    REQUIRE(wait.kind == Kind::wait);
    CHECK(wait.wait == 10s);
    CHECK(wait.reason == WaitReason::slot);
    clock.advance(1s);  // the slot came sooner
    CHECK(engine.resume().kind == Kind::attempt);
    CHECK(engine.succeeded(1).kind == Kind::done);
  }
  SECTION("the time left is read again once the guard admitted the attempt, which took time") {
    guard.wait = milliseconds::max();
    guard.reason = WaitReason::slot;
    guard.clock = &clock;
    guard.admission_takes = 4s;
    const Step wait = engine.start();
    REQUIRE(wait.kind == Kind::wait);
    CHECK(wait.wait == 6s);
  }
  SECTION("a wait within the deadline is the step") {
    guard.wait = 4s;
    const Step wait = engine.start();
    REQUIRE(wait.kind == Kind::wait);
    CHECK(wait.wait == 4s);
    CHECK(wait.reason == WaitReason::capacity);
  }
  SECTION("a negative wait is 0") {
    guard.wait = -5s;
    const Step wait = engine.start();
    REQUIRE(wait.kind == Kind::wait);
    CHECK(wait.wait == 0ms);
    CHECK(engine.resume().kind == Kind::attempt);
  }
}

TEST_CASE("CallEngine: the time left to a deadline far away, on a clock showing a time before its epoch") {
  ManualClock clock(ManualClock::time_point{} - 1h);
  const CallOptions options = with_deadline(clock, ManualClock::time_point::max());
  const RetryPolicy policy;
  CallEngine engine(policy, NoGuard{}, options);
  REQUIRE(engine.start().kind == Kind::attempt);
  REQUIRE(engine.attempt().time_left);
  CHECK(*engine.attempt().time_left > std::chrono::hours{24 * 365 * 100});  // a century and more: no overflow
}

TEST_CASE("call_with_retry: a negative wait the provider asked for counts as 0, as Retry-After: 0 does") {
  // The waits and their reasons of a call whose first attempt is refused with `asked`, under a policy that
  // spreads a provider's wait by up to 1 s, drawing from one seed.
  const auto waits_after = [](milliseconds asked) {
    RetryPolicy policy = no_jitter();
    policy.base = 10ms;
    policy.provider_wait_jitter = 1s;
    FakeSleep sleep;
    std::minstd_rand rng(7);
    int calls = 0;
    const int answer = call_with_retry(
        [&] {
          if (++calls == 1) throw RateLimited("slow down", asked);
          return calls;
        },
        policy, sleep, rng);
    CHECK(answer == 2);
    return std::pair{sleep.waits(), sleep.reasons()};
  };
  const auto at_once = waits_after(0ms);
  REQUIRE(at_once.first.size() == 1);
  CHECK(at_once.first.front() <= 1s);
  for (const milliseconds asked : {-1ms, milliseconds::min()}) {
    INFO(asked.count());
    CHECK(waits_after(asked) == at_once);
  }
}

TEST_CASE("CallEngine: an abandoned attempt gives its ticket back") {
  const RetryPolicy policy;
  const CallOptions options;
  CountingGuard guard;
  CallEngine engine(policy, guard, options);
  REQUIRE(engine.start().kind == Kind::attempt);
  engine.abandoned();
  CHECK(guard.given_back == 1);
  CHECK(guard.failed == 0);
}

TEST_CASE("CallEngine: a cancel gives back the ticket of an attempt step not sent, and tells one under way it lost") {
  const RetryPolicy policy = no_jitter();
  const CallOptions options;
  CountingGuard guard;
  CallEngine engine(policy, guard, options);
  std::minstd_rand rng;
  REQUIRE(engine.start().kind == Kind::attempt);
  // The first attempt failed without being sent (connection refused): the call's last failure says not_sent,
  // which says nothing of whether the retry went.
  const Failure refused_connection = Failure::of(FailureKind::connection, Sent::not_sent);
  REQUIRE(engine.failed(refused_connection, rng).kind == Kind::wait);
  REQUIRE(engine.resume().kind == Kind::attempt);
  REQUIRE(guard.failed == 1);
  SECTION("cancelled_unsent: the driver started nothing, the ticket is given back") {
    CHECK(engine.cancelled_unsent(refused_connection).kind == Kind::done);
    CHECK(guard.given_back == 1);
    CHECK(guard.failed == 1);
  }
  SECTION("cancelled: the retry is under way, whatever the last failure says") {
    CHECK(engine.cancelled(refused_connection).kind == Kind::done);
    CHECK(guard.given_back == 0);
    CHECK(guard.failed == 2);
  }
  REQUIRE(engine.gave_up() != nullptr);
  CHECK(engine.gave_up()->reason == StopReason::cancelled);
  CHECK(engine.gave_up()->failure.sent == Sent::not_sent);
}

TEST_CASE("CallEngine: a policy that makes no sense is refused when the engine is made") {
  RetryPolicy policy;
  policy.max_attempts = 0;
  const CallOptions options;
  CHECK_THROWS_AS(CallEngine(policy, NoGuard{}, options), std::invalid_argument);
}

TEST_CASE("CallEngine: validated later, a policy that makes no sense is refused when first read") {
  RetryPolicy policy;
  policy.cap = -1ms;
  const CallOptions options;
  std::mt19937_64 rng(1);
  SECTION("a success never reads it") {
    CallEngine<NoGuard> engine(detail::validate_later, policy, NoGuard{}, options);
    REQUIRE(engine.start().kind == Kind::attempt);
    CHECK(engine.succeeded().kind == Kind::done);
  }
  SECTION("the first failure reads it, after its ticket heard the failure") {
    CountingGuard guard;
    CallEngine<CountingGuard&> engine(detail::validate_later, policy, guard, options);
    REQUIRE(engine.start().kind == Kind::attempt);
    CHECK_THROWS_WITH(engine.failed(unavailable, rng), "RetryPolicy::cap must not be negative");
    CHECK(guard.failed == 1);
    CHECK(engine.gave_up() == nullptr);
  }
  SECTION("a failure that is not retried reads it too") {
    CountingGuard guard;
    CallEngine<CountingGuard&> engine(detail::validate_later, policy, guard, options);
    REQUIRE(engine.start().kind == Kind::attempt);
    CHECK_THROWS_WITH(engine.failed(classify_status(400), rng), "RetryPolicy::cap must not be negative");
    CHECK(guard.failed == 1);
    CHECK(engine.gave_up() == nullptr);
  }
  SECTION("a guard's wait before the first attempt reads it: nothing is sent") {
    CountingGuard guard;
    guard.wait = 100ms;
    CallEngine<CountingGuard&> engine(detail::validate_later, policy, guard, options);
    CHECK_THROWS_WITH(engine.start(), "RetryPolicy::cap must not be negative");
    CHECK(guard.admitted == 1);
    CHECK(guard.given_back == 1);  // at once: the call is over
  }
}

TEST_CASE("call_with_retry tells a sleep that takes a WaitReason why it waits") {
  FakeSleep sleep;
  CountingGuard guard;
  guard.wait = 300ms;
  int calls = 0;
  const int answer = call_with_retry(
      [&]() -> int {
        ++calls;
        if (calls == 1) throw RateLimited("slow down", rate_limited(2s));
        if (calls == 2) throw ProviderError("unavailable", unavailable);
        return 5;
      },
      no_jitter(), guard, sleep);
  CHECK(answer == 5);
  CHECK(sleep.waits() == std::vector<milliseconds>{300ms, 2000ms, 300ms, 1000ms, 300ms});
  CHECK(sleep.reasons() == std::vector<WaitReason>{WaitReason::capacity, WaitReason::provider, WaitReason::capacity,
                                                   WaitReason::backoff, WaitReason::capacity});
}

TEST_CASE("WaitReason names") {
  CHECK(std::string(to_string(WaitReason::backoff)) == "backoff");
  CHECK(std::string(to_string(WaitReason::provider)) == "provider");
  CHECK(std::string(to_string(WaitReason::capacity)) == "capacity");
  CHECK(std::string(to_string(WaitReason::slot)) == "slot");
}
