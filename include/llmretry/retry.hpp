#ifndef LLMRETRY_RETRY_HPP
#define LLMRETRY_RETRY_HPP

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

#include "attempt.hpp"
#include "clock.hpp"
#include "decision.hpp"
#include "detail/config.hpp"
#include "engine.hpp"
#include "errors.hpp"
#include "failure.hpp"
#include "guard.hpp"
#include "policy.hpp"
#include "random.hpp"
#include "result.hpp"
#include "version.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// Sleeps the calling thread for the given duration: the default `sleep` of call_with_retry.
struct RealSleep {
  template <class Rep, class Period>
  void operator()(std::chrono::duration<Rep, Period> wait) const {
    std::this_thread::sleep_for(wait);
  }
};

/// The Waker of a call whose waits are carried out on one thread: wait() blocks until the slot came.
class BlockingWaker final : public Waker {
 public:
  /// Marks the slot come and wakes the thread in wait().
  void wake() noexcept override {
    const std::lock_guard<std::mutex> lock(mutex_);
    woken_ = true;
    ready_.notify_one();  // under the lock: the waiting thread may destroy this object once it returns
  }

  /// Blocks until wake() was called (since the last wait returned) or `at_most` passed on the real clock
  /// (milliseconds::max(): no bound). Returns true when woken.
  bool wait(std::chrono::milliseconds at_most) {
    std::unique_lock<std::mutex> lock(mutex_);
    const auto woken = [this] { return woken_; };
    const auto now = real_now();
    const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(decltype(now)::max() - now);
    if (at_most >= room) ready_.wait(lock, woken);  // milliseconds::max(), or beyond the clock's range
    else ready_.wait_until(lock, now + at_most, woken);
    return std::exchange(woken_, false);
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  bool woken_ = false;
};

namespace detail {
/// Whether a sleep may keep virtual time: it has `moves_clock()`, which says whether it does (as
/// testing::FakeSleep with a clock).
template <class Sleep, class = void>
struct may_keep_virtual_time : std::false_type {};
template <class Sleep>
struct may_keep_virtual_time<Sleep, std::void_t<decltype(std::declval<const Sleep&>().moves_clock())>>
    : std::true_type {};

}  // namespace detail

/// The waits of a call driven on one thread (call_with_retry's, a queue worker's): `sleep` carries out each
/// wait (told why when it takes a WaitReason too). A wait for a concurrency slot blocks on waker(), woken as
/// soon as the slot comes; with a sleep that keeps virtual time (testing::FakeSleep with a clock), it is
/// slept in pieces of at most 10 ms instead, the slot looked at after each. `Wakes` false leaves the waker
/// out, for calls that never wait for a slot. `sleep` must outlive it, and it the engine told of waker().
template <class Sleep, bool Wakes = true>
class BlockingWaits {
 public:
  /// Waits carried out by `sleep`.
  explicit BlockingWaits(Sleep& sleep) noexcept : sleep_(sleep) {}

  /// Returns the waker to give the call's engine (CallEngine::wake_with).
  [[nodiscard]] Waker* waker() noexcept {
    static_assert(Wakes, "BlockingWaits<Sleep, false> has no waker");
    return &waker_;
  }

  /// Carries out the wait `step` asks for. Requires: step.kind is Step::Kind::wait.
  void carry_out(const Step& step) {
    if constexpr (Wakes) {
      if (step.reason == WaitReason::slot) {
        if constexpr (detail::may_keep_virtual_time<std::remove_cv_t<Sleep>>::value) {
          if (sleep_.moves_clock()) {
            sleep_for(std::min(step.wait, detail::slot_poll), step.reason);
            return;
          }
        }
        (void)waker_.wait(step.wait);
        return;
      }
    }
    sleep_for(step.wait, step.reason);
  }

  /// Carries out `step` and every wait `engine` asks for after it (CallEngine::resume) until it says
  /// attempt or done. Returns that step.
  template <class Engine>
  Step wait_out(Engine& engine, Step step) {
    if (step.kind != Step::Kind::wait) return step;  // the common case, kept apart from the loop below
    while (step.kind == Step::Kind::wait) {
      carry_out(step);
      step = engine.resume();
    }
    return step;
  }

 private:
  void sleep_for(std::chrono::milliseconds wait, WaitReason reason) {
    if constexpr (std::is_invocable_v<Sleep&, std::chrono::milliseconds, WaitReason>) sleep_(wait, reason);
    else sleep_(wait);
  }

  Sleep& sleep_;
  std::conditional_t<Wakes, BlockingWaker, bool> waker_{};
};

/// The default `on_retry`: does nothing.
struct NoRetryHook {
  void operator()(int /*attempt*/, const Failure& /*failure*/, std::chrono::milliseconds /*wait*/) const noexcept {}
};

/// A check of each successful answer, made by check_answer.
template <class Check>
struct AnswerCheck {
  Check check;  ///< `check(const R&)` returns the Failure of an answer to retry, or nullopt to accept it
};

/// Returns an argument for call_with_retry that looks at every successful answer: `check(answer)` returns
/// nullopt to accept it, or the Failure to treat it as (such as Failure::unusable_answer() for an empty
/// answer, one cut at max_tokens or JSON that does not parse), retried under the same policy. When the call
/// gives up after such a failure, the last answer is returned as it is, and CallStats::stopped, on_give_up
/// say why. For a result-like value, only a value with has_value() is checked.
template <class Check>
[[nodiscard]] AnswerCheck<std::decay_t<Check>> check_answer(Check&& check) {
  return {std::forward<Check>(check)};
}

namespace detail {

/// The answer check of a call that has none.
struct NoAnswerCheck {};

/// Returns the failure `error` means: `options.classify`'s answer, else failure_of; unknown when neither
/// recognises it.
template <class Options>
Failure classify_exception(const Options& options, const std::exception& error) {
  if constexpr (!std::is_same_v<Options, NoCallOptions>) {
    if (options.classify) return options.classify(error).value_or(Failure{});
  }
  return failure_of(error).value_or(Failure{});
}

template <class T>
struct is_answer_check : std::false_type {};
template <class Check>
struct is_answer_check<AnswerCheck<Check>> : std::true_type {};

template <class T, class = void>
struct is_random_generator : std::false_type {};
template <class T>
struct is_random_generator<
    T, std::void_t<typename T::result_type, decltype(T::min()), decltype(T::max()), decltype(std::declval<T&>()())>>
    : std::true_type {};

template <class T, class = void>
struct keeps_records : std::false_type {};
template <class T>
struct keeps_records<T, std::void_t<typename T::keeps_records>> : std::true_type {};

/// What an argument after the policy is, read from its type in this order.
enum class Part { options, answer_check, guard, rng, on_retry, sleep, none };

template <class T>
constexpr Part part_of() {
  using U = std::decay_t<T>;
  if constexpr (std::is_same_v<U, CallOptions>) return Part::options;
  else if constexpr (is_answer_check<U>::value) return Part::answer_check;
  else if constexpr (is_guard<U>::value) return Part::guard;
  else if constexpr (is_random_generator<U>::value) return Part::rng;
  else if constexpr (std::is_invocable_v<U&, int, const Failure&, std::chrono::milliseconds>) return Part::on_retry;
  else if constexpr (std::is_invocable_v<U&, std::chrono::milliseconds> ||
                     std::is_invocable_v<U&, std::chrono::milliseconds, WaitReason>)
    return Part::sleep;
  else return Part::none;
}

template <Part P, class... Parts>
constexpr int count_of() {
  return ((part_of<Parts>() == P ? 1 : 0) + ... + 0);
}

/// Returns the first of `parts` that is a P, or `fallback` when none is.
template <Part P, class Fallback>
Fallback& pick(Fallback& fallback) noexcept {
  return fallback;
}
template <Part P, class Fallback, class First, class... Rest>
decltype(auto) pick(Fallback& fallback, First& first, Rest&... rest) noexcept {
  if constexpr (part_of<First>() == P) return (first);
  else return pick<P>(fallback, rest...);
}

template <class Call>
constexpr bool takes_attempt_v = std::is_invocable_v<Call&, const Attempt&>;

template <class Call>
using attempt_result_t = typename std::conditional_t<takes_attempt_v<Call>, std::invoke_result<Call&, const Attempt&>,
                                                     std::invoke_result<Call&>>::type;

/// Makes one attempt: `call(attempt)` or `call()`, as the call takes.
template <class Call>
decltype(auto) invoke_attempt(Call& call, const Attempt& attempt) {
  if constexpr (takes_attempt_v<Call>) return std::invoke(call, attempt);
  else return std::invoke(call);
}

/// Returns the R a result-like call returns when its first attempt is refused: R(Error) for
/// llmretry::Result and any type constructible from an Error, R(Failure) for one constructible from a Failure.
template <class R>
R refused_result(const Refusal& refusal) {
  if constexpr (std::is_constructible_v<R, Error>) {
    return R(Error{refusal.failure, std::string("attempt refused: ") + to_string(refusal.reason)});
  } else {
    static_assert(std::is_constructible_v<R, Failure>,
                  "a guard or a deadline can refuse the first attempt: the call's result type must be "
                  "constructible from llmretry::Error or llmretry::Failure to report it");
    return R(refusal.failure);
  }
}

/// Returns the failure `check` finds in `answer`, or nullopt (always, without a check).
template <class Check, class Answer>
std::optional<Failure> rejected(const Check& check, const Answer& answer) {
  if constexpr (std::is_same_v<Check, NoAnswerCheck>) return std::nullopt;
  else return std::invoke(check.check, answer);
}

#if LLMRETRY_HAS_EXCEPTIONS
/// The blocking driver of a call that reports failures by throwing: carries out `engine`'s steps, its
/// waits with `waits`, telling `on_retry` before each wait after a failure.
template <class R, class Engine, class Call, class Check, class Options, class Waits, class Rng, class OnRetry>
R run_throwing(Engine& engine, Call& call, const Check& check, const Options& options, Waits& waits, Rng& rng,
               OnRetry& on_retry) {
  constexpr bool plain = std::is_same_v<Check, NoAnswerCheck> && !Engine::guarded;
  static_assert(!std::is_void_v<R> || std::is_same_v<Check, NoAnswerCheck>,
                "check_answer needs a call that returns a value");
  static_assert(plain || std::is_void_v<R> || std::is_move_constructible_v<R> || std::is_reference_v<R>,
                "with a guard or an answer check, the call's result must be movable");
  using Kept = std::conditional_t<std::is_reference_v<R>, std::reference_wrapper<std::remove_reference_t<R>>, R>;
  if (waits.wait_out(engine, engine.start()).kind == Step::Kind::done) throw AttemptRefused(*engine.first_refusal());
  for (;;) {
    // What the attempt left: its exception, or its answer (kept for the guard, or to return when the check
    // rejected it and the call stops). Both are new in every attempt, and the exception is held through a
    // pointer whose address never escapes, so that the compiler sees a plain success has nothing of them
    // to destroy (a failure allocates it).
    std::unique_ptr<std::exception_ptr> error;
    [[maybe_unused]] std::conditional_t<std::is_void_v<R> || plain, bool, std::optional<Kept>> answer{};
    Failure failure;
    // The guard hears a success outside the try: what it throws then is not the attempt's failure.
    [[maybe_unused]] bool answered = false;
    try {
      if constexpr (std::is_void_v<R>) {
        invoke_attempt(call, engine.attempt());
        answered = true;
      } else if constexpr (plain) {
        return invoke_attempt(call, engine.attempt());  // no copy, whatever R is
      } else {
        answer.emplace(invoke_attempt(call, engine.attempt()));
        if (const std::optional<Failure> rejection = rejected(check, static_cast<const R&>(*answer))) {
          failure = *rejection;
        } else {
          answered = true;
        }
      }
    } catch (const std::exception& exception) {
      // An exception nobody recognises is an unknown failure, which is never retried.
      failure = classify_exception(options, exception);
      error = std::make_unique<std::exception_ptr>(std::current_exception());
    } catch (...) {
      engine.abandoned();
      throw;
    }
    if constexpr (std::is_void_v<R>) {
      if (answered) {
        (void)engine.succeeded();
        return;
      }
    } else if constexpr (!plain) {
      if (answered) {
        (void)engine.succeeded(static_cast<const R&>(*answer));
        return static_cast<R>(*std::move(answer));
      }
    }
    // The last failure ends the call: the answer the check rejected comes back, an exception is rethrown.
    const auto end = [&]() -> R {
      if constexpr (!std::is_void_v<R> && !plain) {
        if (!error) return static_cast<R>(*std::move(answer));
      }
      std::rethrow_exception(*error);
    };
    const Step step = engine.failed(failure, rng);
    if (step.kind == Step::Kind::done) return end();
    on_retry(engine.attempts(), failure, step.wait);
    if (waits.wait_out(engine, step).kind == Step::Kind::done) return end();
  }
}
#endif

/// Returns the failure a result-like answer carries: its error, or what `check` finds in a value.
template <class R, class Check>
std::optional<Failure> failure_in(const R& result, const Check& check) {
  if (!result.has_value()) return failure_of_result(result);
  return rejected(check, result);
}

/// Whether `engine` may refuse the first attempt of `Call`: only a guard, or a deadline for a call that takes an
/// Attempt, refuses one.
template <class Engine, class Call>
constexpr bool may_refuse_first_v = Engine::guarded || takes_attempt_v<Call>;

/// Returns the result of the first attempt of `engine`'s call when `made` (start() and the waits after it let it
/// be made), else the result a refused first attempt returns.
template <class R, class Engine, class Call>
R first_result(Engine& engine, Call& call, [[maybe_unused]] bool made) {
  if constexpr (may_refuse_first_v<Engine, Call>) {
    if (!made) return refused_result<R>(*engine.first_refusal());
  }
  return invoke_attempt(call, engine.attempt());
}

/// Tells `engine` how the attempt that returned `result` went. Returns true when another attempt follows:
/// it failed (its error, or what `check` rejects), `on_retry` was told, and the waits before the next
/// attempt were carried out; false when the call ends with `result`.
template <class R, class Engine, class Check, class Waits, class Rng, class OnRetry>
bool another_attempt(Engine& engine, const R& result, const Check& check, Waits& waits, Rng& rng, OnRetry& on_retry) {
  const std::optional<Failure> failure = failure_in(result, check);
  if (!failure) {
    (void)engine.succeeded(result);
    return false;
  }
  const Step step = engine.failed(*failure, rng);
  if (step.kind == Step::Kind::done) return false;
  on_retry(engine.attempts(), *failure, step.wait);
  return waits.wait_out(engine, step).kind != Step::Kind::done;
}

/// run_results for a result that can be assigned: one result for every attempt, a later one assigned to it.
/// It is declared in the function's outermost scope, where compilers build it in the caller's place: a
/// success copies nothing.
template <class R, class Engine, class Call, class Check, class Waits, class Rng, class OnRetry>
R run_results_in_place(Engine& engine, Call& call, const Check& check, Waits& waits, Rng& rng, OnRetry& on_retry,
                       bool made) {
  R result = first_result<R>(engine, call, made);
  if constexpr (may_refuse_first_v<Engine, Call>) {
    if (!made) return result;
  }
  while (another_attempt(engine, result, check, waits, rng, on_retry)) result = invoke_attempt(call, engine.attempt());
  return result;
}

/// The blocking driver of a call that returns a result-like value: the last result comes back when it
/// gives up. Carries out `engine`'s steps as run_throwing does.
template <class R, class Engine, class Call, class Check, class Waits, class Rng, class OnRetry>
R run_results(Engine& engine, Call& call, const Check& check, Waits& waits, Rng& rng, OnRetry& on_retry) {
  [[maybe_unused]] const bool made = waits.wait_out(engine, engine.start()).kind != Step::Kind::done;
  if constexpr (std::is_move_assignable_v<R>) {
    return run_results_in_place<R>(engine, call, check, waits, rng, on_retry, made);
  } else {
    if constexpr (may_refuse_first_v<Engine, Call>) {
      if (!made) return first_result<R>(engine, call, made);
    }
    for (;;) {
      R result = invoke_attempt(call, engine.attempt());
      if (!another_attempt(engine, result, check, waits, rng, on_retry)) return result;
    }
  }
}

}  // namespace detail

/// Calls `call` until it succeeds or the policy says stop, waiting between attempts: the blocking driver
/// of a CallEngine, whose waits it carries out with `sleep` on the calling thread.
///
/// `call` takes no argument, or a `const Attempt&` (the attempt's number and the time left until the
/// deadline, to bound its own timeout). Failures come in one of two ways, chosen by its return type:
/// - the call throws: a ProviderError (or what `options.classify` recognises) is classified and retried
///   as the policy says; giving up rethrows the last exception unchanged. Any other std::exception is an
///   unknown failure: never retried, rethrown at once after on_give_up. An exception of a type not derived
///   from std::exception is rethrown at once, the attempt abandoned (CallEngine::abandoned: on_give_up is
///   not told, and CallStats stay as the attempt began).
/// - the call returns a result-like value (has_value() and error(), such as llmretry::Result,
///   std::expected<T, Failure>): a value without has_value() is a failure, read with `failure_of(error())`;
///   giving up returns the last result unchanged. Exceptions thrown by such a call are not retried.
///
/// After the policy come, in any order and each at most once, what you want to change (each recognised
/// by its type): a `sleep(std::chrono::milliseconds)` that carries out each wait, or a
/// `sleep(std::chrono::milliseconds, WaitReason)` that is told why too (backoff, provider, capacity, slot)
/// (default RealSleep; a recorder such as testing::FakeSleep must be passed as an lvalue). A wait for a
/// concurrency slot blocks the thread until the slot comes (or the wait runs out), whatever the sleep,
/// unless the sleep keeps virtual time (`moves_clock()` true, as FakeSleep with a clock): then it is slept
/// in pieces of at most 10 ms, the slot looked at after each; `rng`, any
/// UniformRandomBitGenerator, used by reference and only for jitter (default ThreadRng); `on_retry(attempt,
/// failure, wait)`, run before each wait after a failure; a guard (see guard.hpp), shared by reference,
/// that admits each attempt and learns its outcome; `check_answer(check)`; and CallOptions.
///
/// A first attempt that is not made (a guard refused it, or the deadline passed) ends the call at once:
/// AttemptRefused is thrown, or for a result-like call the result is built from an llmretry::Error (or a
/// Failure). A later attempt refused ends it like any give-up, with the last failure.
/// Nothing is allocated, drawn or read from a clock on a first attempt that succeeds; the clock is read
/// before attempts only with a deadline and a call taking an Attempt or a guard.
/// Returns what the successful (or last) call returned.
/// Throws std::invalid_argument naming the field when the policy makes no sense, as soon as the policy is
/// read: at the first failure, retryable or not (before any wait; the failure itself is not reported and
/// on_give_up not told), or at a wait for capacity before the first attempt (nothing sent). A first attempt
/// that succeeds, is refused or throws what is not a std::exception does not read it: validate a policy where
/// it is built (RetryPolicy::validate). Without exceptions, that is where the program aborts.
template <class Call, class... Parts>
detail::attempt_result_t<Call> call_with_retry(Call&& call, const RetryPolicy& policy, Parts&&... parts) {
  using R = detail::attempt_result_t<Call>;
  using detail::Part;
  static_assert(((detail::part_of<Parts>() != Part::none) && ...),
                "each argument after the policy must be a sleep, a random generator, an on_retry hook, a guard, "
                "check_answer(...) or CallOptions");
  static_assert(detail::count_of<Part::options, Parts...>() <= 1 && detail::count_of<Part::sleep, Parts...>() <= 1 &&
                    detail::count_of<Part::rng, Parts...>() <= 1 && detail::count_of<Part::on_retry, Parts...>() <= 1 &&
                    detail::count_of<Part::guard, Parts...>() <= 1 &&
                    detail::count_of<Part::answer_check, Parts...>() <= 1,
                "each kind of argument after the policy may be given once");
  static_assert(((!detail::keeps_records<std::decay_t<Parts>>::value || std::is_lvalue_reference_v<Parts>)&&...),
                "pass a recording sleep such as testing::FakeSleep as a variable: a temporary loses what it records");
  RealSleep real_sleep;
  ThreadRng thread_rng;
  NoRetryHook no_hook;
  NoGuard no_guard;
  detail::NoAnswerCheck no_check;
  detail::NoCallOptions no_options;
  auto& options = detail::pick<Part::options>(no_options, parts...);
  auto& sleep = detail::pick<Part::sleep>(real_sleep, parts...);
  auto& rng = detail::pick<Part::rng>(thread_rng, parts...);
  auto& on_retry = detail::pick<Part::on_retry>(no_hook, parts...);
  auto& guard = detail::pick<Part::guard>(no_guard, parts...);
  auto& check = detail::pick<Part::answer_check>(no_check, parts...);
  using Options = std::remove_const_t<std::remove_reference_t<decltype(options)>>;
  if constexpr (!std::is_same_v<Options, detail::NoCallOptions>) {
    if (options.hedging != nullptr)
      detail::throw_invalid_argument(
          "CallOptions::hedging: call_with_retry sends one request at a time; hedge with asio::async_call_with_retry");
  }
  using Engine = CallEngine<std::remove_reference_t<decltype(guard)>&, Options>;
  constexpr bool wakes = Engine::guarded && detail::may_wait<typename Engine::Ticket>::value;
  BlockingWaits<std::remove_reference_t<decltype(sleep)>, wakes> waits{sleep};  // outlives the engine
  Engine engine(detail::validate_later, policy, guard, options, detail::takes_attempt_v<Call>);
  if constexpr (wakes) engine.wake_with(waits.waker());
  if constexpr (is_result_like_v<R>) {
    return detail::run_results<R>(engine, call, check, waits, rng, on_retry);
  } else {
#if LLMRETRY_HAS_EXCEPTIONS
    return detail::run_throwing<R>(engine, call, check, options, waits, rng, on_retry);
#else
    static_assert(is_result_like_v<R>, "without exceptions, the call must return a result-like value");
#endif
  }
}

/// Returns call_with_retry(call, RetryPolicy{}): the default policy, sleep, generator and options.
template <class Call>
detail::attempt_result_t<Call> call_with_retry(Call&& call) {
  return call_with_retry(std::forward<Call>(call), RetryPolicy{});
}

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_RETRY_HPP
