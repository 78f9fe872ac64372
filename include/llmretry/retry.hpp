#ifndef LLMRETRY_RETRY_HPP
#define LLMRETRY_RETRY_HPP

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

#include "attempt.hpp"
#include "decision.hpp"
#include "detail/config.hpp"
#include "errors.hpp"
#include "failure.hpp"
#include "guard.hpp"
#include "policy.hpp"
#include "random.hpp"
#include "result.hpp"

namespace llmretry {

/// What a call that gave up reports: why it stopped, the last failure, and what it had spent.
struct GiveUp {
  StopReason reason;
  Failure failure;  ///< the last failure, or the refusal's (kind unknown for an unrecognised exception)
  int attempts;     ///< attempts made, the last one included
  std::chrono::milliseconds waited;      ///< total time waited between and before attempts
  LimitType limit = LimitType::unknown;  ///< the limit of the guard's refusal that stopped it, when it said
};

/// What one call to call_with_retry spent, whether it succeeded or gave up.
struct CallStats {
  int attempts = 0;                     ///< attempts made
  std::chrono::milliseconds waited{0};  ///< total time waited between and before attempts
  std::optional<StopReason> stopped;    ///< why it gave up; nullopt when it succeeded
};

/// Per-call settings beyond the policy. Every member is optional; the defaults cost nothing.
struct CallOptions {
  /// Whether the request may be sent again after it may have been processed (read timeout, 5xx).
  /// True by default: a completion is a read. Set false for a write without an idempotency key.
  bool safe_to_repeat = true;
  /// No wait may end after this point on `clock`, and a call that takes an Attempt is told the time left.
  /// Unset: no deadline, and the clock is never read.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  /// The clock for `deadline`; empty: std::chrono::steady_clock::now.
  std::function<std::chrono::steady_clock::time_point()> clock;
  /// Your own classifier for exceptions: return the Failure, or nullopt to leave the exception to
  /// propagate unretried. Empty: failure_of (ProviderError and its subclasses).
  std::function<std::optional<Failure>(const std::exception&)> classify;
  /// Runs once when the call gives up, just before the last error is rethrown or the last result returned.
  std::function<void(const GiveUp&)> on_give_up;
  /// Where to write what the call spent, on success too; null: nowhere. Must outlive the call.
  CallStats* stats = nullptr;
};

/// Sleeps the calling thread for the given duration: the default `sleep` of call_with_retry.
struct RealSleep {
  template <class Rep, class Period>
  void operator()(std::chrono::duration<Rep, Period> wait) const {
    std::this_thread::sleep_for(wait);
  }
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

/// The options of a call that passes none: CallOptions' defaults, known at compile time so that the
/// loop's reads of them fold away.
struct NoCallOptions {
  static constexpr bool safe_to_repeat = true;
  static constexpr std::optional<std::chrono::steady_clock::time_point> deadline{};
};

/// Returns the time on `options`' clock (steady_clock without one).
template <class Options>
std::chrono::steady_clock::time_point now_on(const Options& options) {
  if constexpr (!std::is_same_v<Options, NoCallOptions>) {
    if (options.clock) return options.clock();
  }
  return std::chrono::steady_clock::now();
}

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
  else if constexpr (std::is_invocable_v<U&, std::chrono::milliseconds>) return Part::sleep;
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

/// The retry loop of one call: the decision (RetryState), the guard's admission before each attempt and
/// the outcome after, and the waits, carried out with the caller's sleep. The drivers below only say
/// what an attempt returned; every decision is made here, outside any catch block, so that another
/// driver (a coroutine) can reuse it.
template <class Options, class Sleep, class Rng, class OnRetry, class Guard>
class RetryLoop {
 public:
  using Ticket = std::decay_t<decltype(std::declval<Guard&>().admit(std::declval<const Attempt&>()).ticket())>;
  static constexpr bool guarded = !std::is_same_v<std::decay_t<Guard>, NoGuard>;

  RetryLoop(const RetryPolicy& policy, const Options& options, Sleep& sleep, Rng& rng, OnRetry& on_retry,
            Guard& guard) noexcept
      : policy_(policy), options_(options), sleep_(sleep), rng_(rng), on_retry_(on_retry), guard_(guard) {}

  /// Prepares the next attempt: its number and time left (read from the clock only for a call that
  /// takes an Attempt or a guarded one, with a deadline), then the guard's admission and wait.
  /// Returns the refusal when the attempt is not to be made (reported through on_give_up and stats).
  template <bool TakesAttempt>
  std::optional<Refusal> admit(Attempt& attempt) {
    attempt.number = made_ + 1;
    if constexpr (TakesAttempt || guarded) {
      if (options_.deadline) {
        attempt.time_left = time_left();
        if (*attempt.time_left <= std::chrono::milliseconds::zero())
          return refuse(Refusal{StopReason::deadline, Failure::timed_out(Sent::not_sent)});
      }
    }
    if constexpr (guarded) {
      auto admission = guard_.admit(std::as_const(attempt));
      if (!admission.admitted()) return refuse(admission.refusal());
      ticket_.emplace(std::move(admission.ticket()));
      if (admission.wait() > std::chrono::milliseconds::zero()) {
        if (const auto stop = state().add_guard_wait(admission.wait(), attempt.time_left)) {
          ticket_.reset();
          return refuse(Refusal{*stop, Failure::timed_out(Sent::not_sent)});
        }
        sleep_(admission.wait());
        if (options_.deadline) {
          attempt.time_left = time_left();
          if (*attempt.time_left <= std::chrono::milliseconds::zero()) {
            ticket_.reset();
            return refuse(Refusal{StopReason::deadline, Failure::timed_out(Sent::not_sent)});
          }
        }
      }
      if constexpr (has_begin<Ticket>::value) {
        if (auto refusal = ticket_->begin(std::as_const(attempt))) {
          ticket_.reset();
          return refuse(*refusal);
        }
      }
    }
    ++made_;
    // What the call spent should this attempt succeed; a failure writes it again.
    report(CallStats{made_, waited(), std::nullopt});
    return std::nullopt;
  }

  /// Records the success of the attempt, with its answer (none for void).
  template <class... Answer>
  void succeeded(const Answer&... answer) {
    if constexpr (guarded) {
      if (auto ticket = take_ticket()) ticket->succeeded(answer...);
    }
  }

  /// Records the failure of the attempt and returns what to do next; runs on_give_up when that is to stop.
  Decision failed(const Failure& failure) {
    if constexpr (guarded) {
      if (auto ticket = take_ticket()) ticket->failed(failure);
    }
    const Decision decision = state().next(failure, rng_, options_.deadline ? time_left() : std::nullopt);
    if (!decision.retry) give_up(decision.reason, failure);
    return decision;
  }

  /// Carries out a decision to retry after `failure`: runs on_retry, then sleeps.
  void wait(const Failure& failure, const Decision& decision) {
    on_retry_(made_, failure, decision.wait);
    sleep_(decision.wait);
  }

  /// Records that the attempt ended with something that is not a std::exception: its ticket learns nothing.
  void abandoned() noexcept {
    if constexpr (guarded) ticket_.reset();
  }

  /// Returns the attempt's ticket, leaving none behind: it is destroyed (and gives back what it holds)
  /// when the caller is done with it, even if telling it the outcome throws.
  std::optional<Ticket> take_ticket() noexcept {
    std::optional<Ticket> ticket;
    if (ticket_) {
      ticket.emplace(std::move(*ticket_));
      ticket_.reset();
    }
    return ticket;
  }

  /// Returns the policy the loop follows.
  const RetryPolicy& policy() const noexcept { return policy_; }

 private:
  /// Returns the retry state, set up at the first failure (or guard wait) so that a success sets up nothing.
  RetryState& state() {
    if (!state_) state_.emplace(prevalidated, policy_, options_.safe_to_repeat);
    return *state_;
  }

  std::chrono::milliseconds waited() const noexcept { return state_ ? state_->waited() : std::chrono::milliseconds{0}; }

  std::optional<std::chrono::milliseconds> time_left() const {
    using namespace std::chrono;
    const auto now = now_on(options_);
    return *options_.deadline > now ? floor<milliseconds>(*options_.deadline - now) : milliseconds::zero();
  }

  Refusal refuse(const Refusal& refusal) {
    give_up(refusal.reason, refusal.failure, refusal.limit);
    return refusal;
  }

  void report(const CallStats& stats) {
    if constexpr (!std::is_same_v<Options, NoCallOptions>) {
      if (options_.stats != nullptr) *options_.stats = stats;
    }
  }

  void give_up(StopReason reason, const Failure& failure, LimitType limit = LimitType::unknown) {
    report(CallStats{made_, waited(), reason});
    if constexpr (!std::is_same_v<Options, NoCallOptions>) {
      if (options_.on_give_up) options_.on_give_up(GiveUp{reason, failure, made_, waited(), limit});
    }
  }

  const RetryPolicy& policy_;
  const Options& options_;
  Sleep& sleep_;
  Rng& rng_;
  OnRetry& on_retry_;
  Guard& guard_;
  std::optional<RetryState> state_;
  std::optional<Ticket> ticket_;
  int made_ = 0;
};

/// Returns the failure `check` finds in `answer`, or nullopt (always, without a check).
template <class Check, class Answer>
std::optional<Failure> rejected(const Check& check, const Answer& answer) {
  if constexpr (std::is_same_v<Check, NoAnswerCheck>) return std::nullopt;
  else return std::invoke(check.check, answer);
}

#if LLMRETRY_HAS_EXCEPTIONS
/// The driver of a call that reports failures by throwing.
template <class R, class Loop, class Call, class Check, class Options>
R run_throwing(Loop& loop, Call& call, const Check& check, const Options& options) {
  constexpr bool plain = std::is_same_v<Check, NoAnswerCheck> && !Loop::guarded;
  static_assert(!std::is_void_v<R> || std::is_same_v<Check, NoAnswerCheck>,
                "check_answer needs a call that returns a value");
  static_assert(plain || std::is_void_v<R> || std::is_move_constructible_v<R> || std::is_reference_v<R>,
                "with a guard or an answer check, the call's result must be movable");
  using Kept = std::conditional_t<std::is_reference_v<R>, std::reference_wrapper<std::remove_reference_t<R>>, R>;
  Attempt attempt;
  if (const auto refusal = loop.template admit<takes_attempt_v<Call>>(attempt)) throw AttemptRefused(*refusal);
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
        invoke_attempt(call, attempt);
        answered = true;
      } else if constexpr (plain) {
        return invoke_attempt(call, attempt);  // no copy, whatever R is
      } else {
        answer.emplace(invoke_attempt(call, attempt));
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
      loop.abandoned();
      throw;
    }
    if constexpr (std::is_void_v<R>) {
      if (answered) return loop.succeeded();
    } else if constexpr (!plain) {
      if (answered) {
        loop.succeeded(static_cast<const R&>(*answer));
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
    const Decision decision = loop.failed(failure);
    if (!decision.retry) return end();
    loop.wait(failure, decision);
    if (loop.template admit<takes_attempt_v<Call>>(attempt)) return end();
  }
}
#endif

/// Returns the failure a result-like answer carries: its error, or what `check` finds in a value.
template <class R, class Check>
std::optional<Failure> failure_in(const R& result, const Check& check) {
  if (!result.has_value()) return failure_of_result(result);
  return rejected(check, result);
}

/// The driver of a call that returns a result-like value: the last result comes back when it gives up.
template <class R, class Loop, class Call, class Check>
R run_results(Loop& loop, Call& call, const Check& check) {
  constexpr bool can_refuse = Loop::guarded || takes_attempt_v<Call>;
  Attempt attempt;
  if (const auto refusal = loop.template admit<takes_attempt_v<Call>>(attempt)) {
    if constexpr (can_refuse) return refused_result<R>(*refusal);
  }
  if constexpr (std::is_move_assignable_v<R>) {
    // One result for every attempt, built where the caller receives it: a success copies nothing, and a
    // later attempt refused returns the last result as it stands.
    R result = invoke_attempt(call, attempt);
    for (;;) {
      const std::optional<Failure> failure = failure_in(result, check);
      if (!failure) {
        loop.succeeded(result);
        return result;
      }
      const Decision decision = loop.failed(*failure);
      if (!decision.retry) return result;
      loop.wait(*failure, decision);
      if (loop.template admit<takes_attempt_v<Call>>(attempt)) return result;
      result = invoke_attempt(call, attempt);
    }
  } else {
    std::optional<R> last;  // a result that cannot be assigned: the last failed one, kept to return it
    for (;;) {
      R result = invoke_attempt(call, attempt);
      const std::optional<Failure> failure = failure_in(result, check);
      if (!failure) {
        loop.succeeded(result);
        return result;
      }
      const Decision decision = loop.failed(*failure);
      if (!decision.retry) return result;
      loop.wait(*failure, decision);
      last.reset();
      last.emplace(std::move(result));
      if (loop.template admit<takes_attempt_v<Call>>(attempt)) return *std::move(last);
    }
  }
}

}  // namespace detail

/// Calls `call` until it succeeds or the policy says stop, waiting between attempts.
///
/// `call` takes no argument, or a `const Attempt&` (the attempt's number and the time left until the
/// deadline, to bound its own timeout). Failures come in one of two ways, chosen by its return type:
/// - the call throws: a ProviderError (or what `options.classify` recognises) is classified and retried
///   as the policy says; giving up rethrows the last exception unchanged. Any other exception is an
///   unknown failure: never retried, rethrown at once after on_give_up.
/// - the call returns a result-like value (has_value() and error(), such as llmretry::Result,
///   std::expected<T, Failure>): a value without has_value() is a failure, read with `to_failure(error())`;
///   giving up returns the last result unchanged. Exceptions thrown by such a call are not retried.
///
/// After the policy come, in any order and each at most once, what you want to change (each recognised
/// by its type): a `sleep(std::chrono::milliseconds)` that carries out each wait (default RealSleep; a
/// recorder such as testing::FakeSleep must be passed as an lvalue); `rng`, any
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
/// Throws std::invalid_argument naming the field, before the first call, when the policy makes no sense.
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
  policy.validate();
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
  using Loop = detail::RetryLoop<std::remove_const_t<std::remove_reference_t<decltype(options)>>,
                                 std::remove_reference_t<decltype(sleep)>, std::remove_reference_t<decltype(rng)>,
                                 std::remove_reference_t<decltype(on_retry)>, std::remove_reference_t<decltype(guard)>>;
  Loop loop{policy, options, sleep, rng, on_retry, guard};
  if constexpr (is_result_like_v<R>) {
    return detail::run_results<R>(loop, call, check);
  } else {
#if LLMRETRY_HAS_EXCEPTIONS
    return detail::run_throwing<R>(loop, call, check, options);
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

}  // namespace llmretry

#endif  // LLMRETRY_RETRY_HPP
