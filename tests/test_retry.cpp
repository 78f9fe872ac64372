#include <llmretry/retry.hpp>

#include <llmretry/testing.hpp>

#include <memory>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
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
struct Recorded {
  int attempt;
  FailureKind kind;
  milliseconds wait;
};

// A ProviderError subclass of the application's own: giving up must rethrow this very object.
class MyProviderError : public ProviderError {
 public:
  MyProviderError(const std::string& message, int id) : ProviderError(message, 503), id_(id) {}
  int id() const { return id_; }

 private:
  int id_;
};

// The ticket of the guards below: it learns nothing.
struct NoTicket {
  template <class Answer>
  void succeeded(const Answer& /*answer*/) {}
  void failed(const Failure& /*failure*/) {}
};

// A guard that asks every attempt to wait `wait` for capacity before it goes.
struct WaitingGuard {
  milliseconds wait;

  Admission<NoTicket> admit(const Attempt& /*attempt*/) const { return Admission<NoTicket>::go(NoTicket{}, wait); }
};

// A guard that refuses every attempt from the `from`th on: no capacity.
struct RefusingGuard {
  int from = 1;

  Admission<NoTicket> admit(const Attempt& attempt) const {
    if (attempt.number < from) return Admission<NoTicket>::go(NoTicket{});
    return Admission<NoTicket>::refuse(
        Refusal{StopReason::no_capacity, Failure::of(FailureKind::rate_limited, Sent::not_sent)});
  }
};

// A result-like value that cannot be assigned (its members are const): each attempt's is a new object.
struct ConstResult {
  explicit ConstResult(int number) : value(number) {}
  explicit ConstResult(Error failure) : error_(std::move(failure)) {}
  bool has_value() const { return !error_; }
  const Error& error() const { return *error_; }

  const int value = 0;
  const std::optional<Error> error_;
};
}  // namespace

TEST_CASE("A first attempt that succeeds returns at once", "[retry]") {
  FakeSleep sleep;
  std::mt19937_64 rng(1);
  const auto before = rng;
  int hooks = 0;
  const int value = call_with_retry([] { return 42; }, RetryPolicy{}, sleep, rng,
                                    [&](int, const Failure&, milliseconds) { ++hooks; });
  CHECK(value == 42);
  CHECK(sleep.waits().empty());
  CHECK(hooks == 0);
  CHECK(rng == before);
}

TEST_CASE("Failures are retried with backoff, then the value returned", "[retry]") {
  SimulatedProvider provider{"rate_limit", "timeout", "server_error"};
  FakeSleep sleep;
  std::mt19937_64 rng(8);
  std::vector<Recorded> seen;
  const auto text = call_with_retry([&] { return provider.call([] { return std::string("finish_reason stop"); }); },
                                    no_jitter(), sleep, rng,
                                    [&](int attempt, const Failure& failure, milliseconds wait) {
                                      seen.push_back({attempt, failure.kind, wait});
                                    });
  CHECK(text == "finish_reason stop");
  CHECK(provider.calls() == 4);
  CHECK(sleep.waits() == std::vector<milliseconds>{500ms, 1s, 2s});
  REQUIRE(seen.size() == 3);
  CHECK(seen[0].attempt == 1);
  CHECK(seen[0].kind == FailureKind::rate_limited);
  CHECK(seen[1].attempt == 2);
  CHECK(seen[1].kind == FailureKind::timeout);
  CHECK(seen[2].attempt == 3);
  CHECK(seen[2].kind == FailureKind::server_error);
  CHECK(seen[2].wait == 2s);
}

TEST_CASE("Giving up rethrows the last error unchanged and says why", "[retry]") {
  FakeSleep sleep;
  int calls = 0;
  GiveUpRecorder recorder;
  const auto& gave_up = recorder.gave_up;
  try {
    call_with_retry(
        [&]() -> int {
          ++calls;
          throw MyProviderError("HTTP 503 #" + std::to_string(calls), calls);
        },
        no_jitter(), sleep, std::mt19937_64{1}, NoRetryHook{}, recorder.options);
    FAIL("call_with_retry returned");
  } catch (const MyProviderError& error) {
    CHECK(error.id() == 4);
    CHECK(std::string(error.what()) == "HTTP 503 #4");
  }
  CHECK(calls == 4);
  REQUIRE(gave_up);
  CHECK(gave_up->reason == StopReason::attempts_exhausted);
  CHECK(gave_up->attempts == 4);
  CHECK(gave_up->waited == 3500ms);
  CHECK(gave_up->failure.status == 503);
}

TEST_CASE("Exceptions that are not the provider's propagate at once", "[retry]") {
  FakeSleep sleep;
  int calls = 0;
  GiveUpRecorder recorder;
  const auto& gave_up = recorder.gave_up;
  CHECK_THROWS_AS(call_with_retry(
                      [&]() -> int {
                        ++calls;
                        throw std::logic_error("a bug");
                      },
                      RetryPolicy{}, sleep, std::mt19937_64{1}, NoRetryHook{}, recorder.options),
                  std::logic_error);
  CHECK(calls == 1);
  CHECK(sleep.waits().empty());
  REQUIRE(gave_up);
  CHECK(gave_up->reason == StopReason::not_retryable);
  CHECK(gave_up->failure.kind == FailureKind::unknown);

  SECTION("and so does anything that is not a std::exception") {
    CHECK_THROWS_AS(call_with_retry([]() -> int { throw 7; }, RetryPolicy{}, sleep), int);
  }
}

TEST_CASE("A policy that makes no sense is refused when first read: at the first failure, before any retry",
          "[retry]") {
  RetryPolicy policy;
  policy.max_attempts = 0;
  FakeSleep sleep;
  SECTION("a call that throws") {
    SimulatedProvider provider{"rate_limit"};
    CHECK_THROWS_WITH(call_with_retry([&] { return provider.call(); }, policy, sleep),
                      "RetryPolicy::max_attempts must be at least 1");
    CHECK(provider.calls() == 1);
  }
  SECTION("a failure that is not retried: the policy error in its place, on_give_up not told") {
    GiveUpRecorder recorder;
    SimulatedProvider provider{"context_length"};
    CHECK_THROWS_WITH(call_with_retry([&] { return provider.call(); }, policy, sleep, recorder.options),
                      "RetryPolicy::max_attempts must be at least 1");
    CHECK(provider.calls() == 1);
    CHECK_FALSE(recorder.gave_up);
  }
  SECTION("an exception nobody recognises") {
    int calls = 0;
    CHECK_THROWS_WITH(call_with_retry(
                          [&]() -> int {
                            ++calls;
                            throw std::runtime_error("a bug");
                          },
                          policy, sleep),
                      "RetryPolicy::max_attempts must be at least 1");
    CHECK(calls == 1);
  }
  SECTION("a first attempt refused: AttemptRefused, the policy not read") {
    RefusingGuard guard;
    int calls = 0;
    CHECK_THROWS_AS(call_with_retry([&] { return ++calls; }, policy, sleep, guard), AttemptRefused);
    CHECK(calls == 0);
  }
  SECTION("a call that returns a result") {
    int calls = 0;
    const auto failing = [&]() -> Result<int> {
      ++calls;
      return Error{Failure::of(FailureKind::server_error, Sent::maybe_processed), "503"};
    };
    CHECK_THROWS_WITH(call_with_retry(failing, policy, sleep), "RetryPolicy::max_attempts must be at least 1");
    CHECK(calls == 1);
  }
  SECTION("a guard's wait before the first attempt: nothing is sent") {
    WaitingGuard guard{300ms};
    int calls = 0;
    CHECK_THROWS_WITH(call_with_retry([&] { return ++calls; }, policy, sleep, guard),
                      "RetryPolicy::max_attempts must be at least 1");
    CHECK(calls == 0);
  }
  SECTION("a first attempt that succeeds never reads the policy") {
    int calls = 0;
    CHECK(call_with_retry([&] { return ++calls; }, policy, sleep) == 1);
  }
  CHECK(sleep.waits().empty());
}

TEST_CASE("A call that is not safe to repeat is not retried after an ambiguous failure", "[retry]") {
  GiveUpRecorder recorder;
  const auto& gave_up = recorder.gave_up;
  recorder.options.safe_to_repeat = false;
  FakeSleep sleep;
  SECTION("a read timeout: stop after one call") {
    SimulatedProvider provider{"timeout"};
    CHECK_THROWS_AS(call_with_retry([&] { provider.call(); }, RetryPolicy{}, sleep, std::mt19937_64{1}, NoRetryHook{},
                                    recorder.options),
                    ProviderTimeout);
    CHECK(provider.calls() == 1);
    CHECK(gave_up->reason == StopReason::not_safe_to_repeat);
  }
  SECTION("a connection refused before sending: retried") {
    SimulatedProvider provider{"connection_refused", "connect_timeout", "rate_limit"};
    call_with_retry([&] { provider.call(); }, RetryPolicy{}, sleep, std::mt19937_64{1}, NoRetryHook{},
                    recorder.options);
    CHECK(provider.calls() == 4);
    CHECK_FALSE(gave_up);
  }
}

TEST_CASE("A custom classifier decides for exceptions of its own", "[retry]") {
  struct Flaky : std::runtime_error {
    using std::runtime_error::runtime_error;
  };
  CallOptions options;
  options.classify = [](const std::exception& error) -> std::optional<Failure> {
    if (dynamic_cast<const Flaky*>(&error)) return classify_status(503);
    return failure_of(error);
  };
  FakeSleep sleep;
  int calls = 0;
  const int value = call_with_retry(
      [&] {
        if (++calls < 3) throw Flaky("flaky");
        return calls;
      },
      no_jitter(), sleep, std::mt19937_64{1}, NoRetryHook{}, options);
  CHECK(value == 3);
  CHECK(sleep.waits() == std::vector<milliseconds>{500ms, 1s});
}

TEST_CASE("A deadline stops before a wait that would end after it", "[retry]") {
  ManualClock clock;
  FakeSleep sleep{clock};
  GiveUpRecorder recorder;
  const auto& gave_up = recorder.gave_up;
  recorder.options.clock = std::ref(clock);
  recorder.options.deadline = clock.now() + 2s;
  SimulatedProvider provider{"server_error*10"};
  CHECK_THROWS_AS(call_with_retry([&] { provider.call(); }, no_jitter(), sleep, std::mt19937_64{1}, NoRetryHook{},
                                  recorder.options),
                  ProviderError);
  // 0.5 s then 1 s fit in 2 s; the next 2 s wait would end at 3.5 s.
  CHECK(sleep.waits() == std::vector<milliseconds>{500ms, 1s});
  CHECK(provider.calls() == 3);
  CHECK(gave_up->reason == StopReason::deadline);
}

TEST_CASE("A deadline already passed stops at the first failure", "[retry]") {
  ManualClock clock;
  CallOptions options;
  options.clock = std::ref(clock);
  options.deadline = clock.now();
  clock.advance(1s);
  FakeSleep sleep;
  SimulatedProvider provider{"rate_limit"};
  CHECK_THROWS_AS(
      call_with_retry([&] { provider.call(); }, no_jitter(), sleep, std::mt19937_64{1}, NoRetryHook{}, options),
      RateLimited);
  CHECK(provider.calls() == 1);
}

TEST_CASE("The result-value style: failures in the returned value", "[retry][result]") {
  FakeSleep sleep;
  SECTION("retried until a value comes back") {
    SimulatedProvider provider{"rate_limit:1", "overloaded"};
    const auto result = call_with_retry([&] { return provider.try_call([] { return 7; }); }, no_jitter(), sleep);
    REQUIRE(result.has_value());
    CHECK(*result == 7);
    CHECK(sleep.waits() == std::vector<milliseconds>{1s, 1s});
  }
  SECTION("giving up returns the last result, and says why") {
    SimulatedProvider provider{"rate_limit", "context_length"};
    GiveUpRecorder recorder;
    const auto& gave_up = recorder.gave_up;
    const auto result = call_with_retry([&] { return provider.try_call([] { return 7; }); }, no_jitter(), sleep,
                                        std::mt19937_64{1}, NoRetryHook{}, recorder.options);
    REQUIRE_FALSE(result.has_value());
    CHECK(result.error().failure.kind == FailureKind::context_length);
    CHECK(result.error().message == "HTTP 400: context_length (simulated).");
    CHECK(provider.calls() == 2);
    REQUIRE(gave_up);
    CHECK(gave_up->reason == StopReason::not_retryable);
    CHECK(gave_up->attempts == 2);
  }
  SECTION("Result<void>") {
    SimulatedProvider provider{"server_error"};
    const auto result = call_with_retry([&] { return provider.try_call(); }, no_jitter(), sleep);
    CHECK(result.has_value());
    CHECK(provider.calls() == 2);
  }
}

TEST_CASE("Return types pass through unchanged", "[retry]") {
  FakeSleep sleep;
  SECTION("move-only") {
    auto pointer = call_with_retry([] { return std::make_unique<int>(5); }, RetryPolicy{}, sleep);
    CHECK(*pointer == 5);
  }
  SECTION("a reference") {
    int target = 1;
    int& same = call_with_retry([&]() -> int& { return target; }, RetryPolicy{}, sleep);
    CHECK(&same == &target);
  }
  SECTION("void") {
    int calls = 0;
    call_with_retry([&] { ++calls; }, RetryPolicy{}, sleep);
    CHECK(calls == 1);
  }
}

TEST_CASE("A result-like value that cannot be assigned", "[retry][result]") {
  static_assert(!std::is_move_assignable_v<ConstResult> && is_result_like_v<ConstResult>);
  FakeSleep sleep;
  int calls = 0;
  const auto failing_until = [&](int last_failure) {
    return [&calls, last_failure] {
      ++calls;
      if (calls <= last_failure) return ConstResult(Error{classify_status(503), "attempt " + std::to_string(calls)});
      return ConstResult(calls);
    };
  };
  SECTION("retried until a value comes back") {
    const ConstResult result = call_with_retry(failing_until(2), no_jitter(), sleep);
    REQUIRE(result.has_value());
    CHECK(result.value == 3);
    CHECK(sleep.waits().size() == 2);
  }
  SECTION("giving up returns the last result") {
    RetryPolicy policy = no_jitter();
    policy.max_attempts = 2;
    const ConstResult result = call_with_retry(failing_until(5), policy, sleep);
    REQUIRE_FALSE(result.has_value());
    CHECK(result.error().message == "attempt 2");
    CHECK(calls == 2);
  }
  SECTION("a first attempt refused: the result is built from the refusal") {
    RefusingGuard guard;
    const ConstResult result = call_with_retry(failing_until(0), no_jitter(), sleep, guard);
    REQUIRE_FALSE(result.has_value());
    CHECK(result.error().message == "attempt refused: no_capacity");
    CHECK(calls == 0);
  }
  SECTION("a retry refused after its wait: the last result comes back") {
    RefusingGuard guard{2};
    const ConstResult result = call_with_retry(failing_until(5), no_jitter(), sleep, guard);
    REQUIRE_FALSE(result.has_value());
    CHECK(result.error().message == "attempt 1");
    CHECK(calls == 1);
    CHECK(sleep.waits().size() == 1);
  }
}

TEST_CASE("The caller's generator is used by reference", "[retry]") {
  SimulatedProvider provider{"rate_limit"};
  FakeSleep sleep;
  std::mt19937_64 rng(3);
  const auto before = rng;
  call_with_retry([&] { provider.call(); }, RetryPolicy{}, sleep, rng);
  CHECK(rng != before);
}

TEST_CASE("The defaults: real sleep and the thread's generator", "[retry]") {
  CallStats stats;
  CallOptions options;
  options.stats = &stats;
  SECTION("the real sleep waits at least the wait decided") {
    RetryPolicy policy;
    policy.base = policy.cap = 5ms;
    policy.jitter = Jitter::none;
    SimulatedProvider provider{"rate_limit"};
    const auto start = std::chrono::steady_clock::now();
    call_with_retry([&] { provider.call(); }, policy, options);
    CHECK(std::chrono::steady_clock::now() - start >= 5ms);  // a lower bound: a busy machine only adds
    CHECK(provider.calls() == 2);
    CHECK(stats.waited == 5ms);
  }
  SECTION("the thread's generator draws the jitter: full jitter over 1 s gives waits that differ") {
    RetryPolicy policy;
    policy.base = policy.cap = 1000ms;
    std::set<std::chrono::milliseconds::rep> waits;
    for (int i = 0; i < 20; ++i) {
      SimulatedProvider provider{"rate_limit"};
      FakeSleep sleep;  // the generator is the default one; only the sleep is recorded
      call_with_retry([&] { provider.call(); }, policy, sleep);
      REQUIRE(sleep.waits().size() == 1);
      CHECK(sleep.waits().front() <= 1000ms);
      waits.insert(sleep.waits().front().count());
    }
    CHECK(waits.size() > 1);  // 20 draws in [0, 1000] ms all equal: about 1 in 10^57
  }
}

TEST_CASE("The clock is read only when an attempt fails and a deadline is set", "[retry]") {
  int reads = 0;
  CallOptions options;
  options.deadline = std::chrono::steady_clock::time_point{} + 1h;
  options.clock = [&] {
    ++reads;
    return std::chrono::steady_clock::time_point{};
  };
  FakeSleep sleep;
  call_with_retry([] { return 1; }, RetryPolicy{}, sleep, std::mt19937_64{1}, NoRetryHook{}, options);
  CHECK(reads == 0);
  SimulatedProvider provider{"rate_limit", "rate_limit"};
  call_with_retry([&] { provider.call(); }, RetryPolicy{}, sleep, std::mt19937_64{1}, NoRetryHook{}, options);
  CHECK(reads == 2);
  options.deadline.reset();
  SimulatedProvider again{"rate_limit"};
  call_with_retry([&] { again.call(); }, RetryPolicy{}, sleep, std::mt19937_64{1}, NoRetryHook{}, options);
  CHECK(reads == 2);
}

TEST_CASE("A call that takes an Attempt learns its number and the time left", "[retry][deadline]") {
  ManualClock clock;
  FakeSleep sleep{clock};
  CallOptions options;
  options.clock = std::ref(clock);
  SimulatedProvider provider{"server_error", "server_error"};
  std::vector<std::pair<int, std::optional<milliseconds>>> seen;
  const auto call = [&](const Attempt& attempt) {
    seen.emplace_back(attempt.number, attempt.time_left);
    clock.advance(100ms);  // each attempt takes 0.1 s
    return provider.call([] { return 1; });
  };

  SECTION("without a deadline: no time left is given") {
    CHECK(call_with_retry(call, no_jitter(), sleep, options) == 1);
    CHECK(seen == decltype(seen){{1, std::nullopt}, {2, std::nullopt}, {3, std::nullopt}});
  }
  SECTION("with a deadline: the time left when each attempt starts") {
    options.deadline = clock.now() + 5s;
    CHECK(call_with_retry(call, no_jitter(), sleep, options) == 1);
    CHECK(seen == decltype(seen){{1, 5000ms}, {2, 4400ms}, {3, 3300ms}});
  }
  SECTION("a deadline passed before the first attempt: nothing is sent") {
    options.deadline = clock.now();
    GiveUpRecorder recorder;
    recorder.options.clock = std::ref(clock);
    recorder.options.deadline = clock.now();
    CHECK_THROWS_AS(call_with_retry(call, no_jitter(), sleep, recorder.options), AttemptRefused);
    CHECK(seen.empty());
    REQUIRE(recorder.gave_up);
    CHECK(recorder.gave_up->reason == StopReason::deadline);
    CHECK(recorder.gave_up->failure.sent == Sent::not_sent);
  }
}

TEST_CASE("The deadline passing during an attempt stops the call with StopReason::deadline", "[retry][deadline]") {
  ManualClock clock;
  FakeSleep sleep{clock};
  GiveUpRecorder recorder;
  recorder.options.clock = std::ref(clock);
  recorder.options.deadline = clock.now() + 1s;
  RetryPolicy policy = no_jitter();
  policy.base = 0ms;  // a retry would not wait at all: only the deadline can stop it
  policy.max_attempts = 100;
  int calls = 0;
  CHECK_THROWS_AS(call_with_retry(
                      [&](const Attempt& attempt) {
                        ++calls;
                        clock.advance(*attempt.time_left);  // the attempt uses all the time it is given
                        throw ProviderTimeout("read timeout");
                      },
                      policy, sleep, recorder.options),
                  ProviderTimeout);
  CHECK(calls == 1);
  REQUIRE(recorder.gave_up);
  CHECK(recorder.gave_up->reason == StopReason::deadline);
}

TEST_CASE("CallStats says what a call spent, on success too", "[retry]") {
  FakeSleep sleep;
  CallStats stats;
  CallOptions options;
  options.stats = &stats;
  CHECK(call_with_retry([] { return 1; }, no_jitter(), options) == 1);
  CHECK(stats.attempts == 1);
  CHECK(stats.waited == 0ms);
  CHECK_FALSE(stats.stopped);

  SimulatedProvider provider{"rate_limit", "server_error"};
  call_with_retry([&] { provider.call(); }, no_jitter(), sleep, options);
  CHECK(stats.attempts == 3);
  CHECK(stats.waited == 1500ms);
  CHECK_FALSE(stats.stopped);

  SimulatedProvider failing{"status:404"};
  CHECK_THROWS_AS(call_with_retry([&] { failing.call(); }, no_jitter(), sleep, options), ProviderError);
  CHECK(stats.attempts == 1);
  CHECK(stats.stopped == StopReason::not_retryable);
}

TEST_CASE("check_answer retries an answer the caller cannot use", "[retry]") {
  FakeSleep sleep;
  CallStats stats;
  CallOptions options;
  options.stats = &stats;
  const auto empty_is_unusable = check_answer([](const std::string& text) -> std::optional<Failure> {
    if (text.empty()) return Failure::unusable_answer();
    return std::nullopt;
  });
  std::vector<std::string> answers{"", "", "done"};
  std::size_t next = 0;
  const auto call = [&] { return answers.at(next++); };

  SECTION("retried under the same policy until an answer is usable") {
    CHECK(call_with_retry(call, no_jitter(), sleep, empty_is_unusable, options) == "done");
    CHECK(sleep.waits() == std::vector<milliseconds>{500ms, 1s});
  }
  SECTION("giving up returns the last answer, and says why") {
    RetryPolicy policy = no_jitter();
    policy.max_attempts = 2;
    CHECK(call_with_retry(call, policy, sleep, empty_is_unusable, options).empty());
    CHECK(next == 2);
    CHECK(stats.stopped == StopReason::attempts_exhausted);
  }
  SECTION("not retried when the call is not safe to repeat: the work was done") {
    options.safe_to_repeat = false;
    CHECK(call_with_retry(call, no_jitter(), sleep, empty_is_unusable, options).empty());
    CHECK(stats.stopped == StopReason::not_safe_to_repeat);
  }
  SECTION("for a result-like call, values only") {
    const auto positive = check_answer([](const Result<int>& result) -> std::optional<Failure> {
      if (*result <= 0) return Failure::unusable_answer();
      return std::nullopt;
    });
    int value = -1;
    const Result<int> result = call_with_retry([&]() -> Result<int> { return value++; }, no_jitter(), sleep, positive);
    CHECK(*result == 1);
  }
}

TEST_CASE("The arguments after the policy come in any order, each recognised by its type", "[retry]") {
  FakeSleep sleep;
  std::mt19937_64 rng{1};
  CallStats stats;
  CallOptions options;
  options.stats = &stats;
  int hooks = 0;
  const auto on_retry = [&](int, const Failure&, milliseconds) { ++hooks; };
  SimulatedProvider provider{"rate_limit*4"};
  call_with_retry([&] { provider.call(); }, RetryPolicy::batch(), options, on_retry, rng, sleep);
  CHECK(sleep.waits().size() == 4);
  CHECK(hooks == 4);
  CHECK(stats.attempts == 5);
}

TEST_CASE("provider_wait_jitter spreads returns above the provider's wait, never below", "[retry]") {
  RetryPolicy policy = no_jitter();
  policy.base = 1ms;
  policy.provider_wait_jitter = 200ms;
  std::mt19937_64 rng{7};
  milliseconds lowest = milliseconds::max(), highest{0};
  for (int i = 0; i < 200; ++i) {
    FakeSleep sleep;
    SimulatedProvider provider{"rate_limit_ms:511"};
    call_with_retry([&] { provider.call(); }, policy, sleep, rng);
    lowest = std::min(lowest, sleep.waits().at(0));
    highest = std::max(highest, sleep.waits().at(0));
  }
  CHECK(lowest >= 511ms);
  CHECK(highest <= 711ms);
  CHECK(highest - lowest >= 150ms);  // spread, not one instant
}
