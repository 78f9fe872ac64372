#ifndef LLMRETRY_ASIO_CALL_HPP
#define LLMRETRY_ASIO_CALL_HPP

#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/basic_waitable_timer.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/recycling_allocator.hpp>
#include <boost/asio/wait_traits.hpp>
#include <boost/system/system_error.hpp>

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "../attempt.hpp"
#include "../detail/config.hpp"
#include "../engine.hpp"
#include "../errors.hpp"
#include "../failure.hpp"
#include "../guard.hpp"
#include "../policy.hpp"
#include "../random.hpp"
#include "../retry.hpp"
#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace asio {

/// The completion signature of async_call_with_retry<R>: the exception that ended the call (null on
/// success) and the answer (R{} when there is none).
template <class R>
using CallSignature = void(std::exception_ptr, R);

/// A guard whose admissions and outcomes async_call_with_retry carries out on `executor`, a bounded pool
/// (such as a boost::asio::thread_pool of a few threads), never on the call's own executor: for a guard that
/// blocks on a network round trip, such as a Deployment pacing through Redis (DeploymentOptions::shared), so
/// that one slow round trip holds up no other call of the executor. The call hops to `executor` for each
/// admission and each outcome the guard learns, and back. Holds `guard` by reference: both must outlive the
/// calls that use it.
template <class Guard, class Executor>
class GuardOn {
 public:
  GuardOn(const Executor& executor, Guard& guard) noexcept : guard_(&guard), executor_(executor) {}

  /// Returns `guard`'s admission of `attempt`.
  [[nodiscard]] auto admit(const Attempt& attempt) { return guard_->admit(attempt); }
  /// Returns the executor the guard is called on.
  [[nodiscard]] const Executor& executor() const noexcept { return executor_; }

 private:
  Guard* guard_;
  Executor executor_;
};

/// Returns `guard` called on `executor` (see GuardOn): `asio::guard_on(pool.get_executor(), pacing)`.
template <class Executor, class Guard>
[[nodiscard]] GuardOn<Guard, Executor> guard_on(const Executor& executor, Guard& guard) noexcept {
  return GuardOn<Guard, Executor>(executor, guard);
}

namespace detail {

template <class Guard>
struct is_guard_on : std::false_type {};
template <class Guard, class Executor>
struct is_guard_on<GuardOn<Guard, Executor>> : std::true_type {};

/// What follows an engine call that reaches the guard.
enum class Then : unsigned char {
  next,       ///< carry out the step it returned
  answer,     ///< complete with the answer kept in the state
  cancelled,  ///< complete as cancelled
};

/// The result of an engine call that reaches the guard: its step, or what it threw.
struct Touched {
  Step step;
  std::exception_ptr thrown;
  Then then = Then::next;
};

/// The longest a wait for a concurrency slot lasts before the driver looks at the slot again, should a wake
/// be lost (it could not be posted): the call's Waker ends the wait as soon as the slot comes.
inline constexpr std::chrono::milliseconds slot_recheck{1000};

/// The guard and the options of a call that passes none (stateless or never written: shared).
inline const NoGuard no_guard{};
inline const CallOptions no_options{};

/// Returns the exception a cancelled call completes with: boost::system::system_error holding
/// boost::asio::error::operation_aborted, as Asio's own operations report a cancellation.
inline std::exception_ptr cancelled_error() {
  return std::make_exception_ptr(
      boost::system::system_error(boost::asio::error::operation_aborted, "llmretry: call cancelled"));
}

/// What one call keeps between its steps, allocated once per call: the engine (which holds the policy, the
/// guard and the options by reference), the attempt, the timer of its waits (made at the first wait only),
/// the Waker of its waits for a concurrency slot and the last failure's exception; for a hedged call, the
/// hedge's timer and the cancellation signals of its two requests.
template <class R, class Attempt, class Guard, class Executor>
struct CallState : std::enable_shared_from_this<CallState<R, Attempt, Guard, Executor>>, AnswerClaim {
  using Timer = boost::asio::basic_waitable_timer<std::chrono::steady_clock,
                                                  boost::asio::wait_traits<std::chrono::steady_clock>, Executor>;

  /// Ends the call's wait for a concurrency slot when the slot comes: posts to the call's executor (wake()
  /// runs on the thread that gave the slot back), where the wait's timer is cancelled if the call still
  /// waits for the slot.
  class SlotWaker final : public Waker {
   public:
    explicit SlotWaker(CallState& state) noexcept : state_(state) {}
    void wake() noexcept override {
      try {
        boost::asio::post(state_.executor, [weak = state_.weak_from_this()] {
          if (auto state = weak.lock(); state && state->waiting_for_slot) state->timer->cancel();
        });
      } catch (...) {  // not posted: the wait ends at its bound (slot_recheck) and looks again
      }
    }

   private:
    CallState& state_;
  };

  CallState(const RetryPolicy& policy, Guard& guard, const CallOptions& options, Attempt&& attempt_in,
            const Executor& executor_in)
      : executor(executor_in),
        waker(*this),
        engine(::llmretry::detail::validate_later, policy, guard, options),
        attempt(std::move(attempt_in)),
        hedged(options.hedging != nullptr) {
    engine.wake_with(&waker);
  }

  /// A request of the attempt begins to stream: the first to ask wins, the other one is cancelled (even
  /// when telling its ticket it lost throws).
  bool claim(bool hedge) override {
    class StopLoser {
     public:
      StopLoser(CallState& state, bool winner_is_hedge) noexcept : state_(&state), loser_(!winner_is_hedge) {}
      StopLoser(const StopLoser&) = delete;
      StopLoser& operator=(const StopLoser&) = delete;
      StopLoser(StopLoser&&) = delete;
      StopLoser& operator=(StopLoser&&) = delete;
      ~StopLoser() {
        if (!state_->engine.in_flight(loser_)) state_->stop_hedging(loser_);
      }

     private:
      CallState* state_;
      bool loser_;
    } stop_loser{*this, hedge};
    return engine.claim(hedge);
  }

  /// Stops what the hedging of the attempt has under way: the hedge's timer, and the request that lost
  /// (the hedge when `hedge`) if the engine awaits it no more.
  void stop_hedging(bool hedge) {
    if (hedge_timer_out) hedge_timer->cancel();
    if (hedge ? hedge_out : first_out)
      (hedge ? hedge_signal : first_signal).emit(boost::asio::cancellation_type::terminal);
  }

  /// Returns true when no request, and no hedge timer, of the attempt is under way besides `self`'s own.
  [[nodiscard]] bool quiet() const noexcept { return !hedge_out && !hedge_timer_out; }

  Executor executor;  ///< before the waker and the engine: a wake under way reads it until the ticket ends
  SlotWaker waker;    ///< before the engine: outlives the ticket it is given to
  CallEngine<Guard&, CallOptions> engine;
  Attempt attempt;
  std::optional<Timer> timer;
  std::exception_ptr error;  ///< the last failure's exception: what the call ends with when it gives up
  std::optional<R> answer;   ///< the answer, kept while the guard learns it on its own executor
  ThreadRng rng;
  bool waiting_for_slot = false;  ///< the timer's wait is one for a concurrency slot
  // A hedged call (CallOptions::hedging).
  bool hedged;                                    ///< the call may be hedged
  std::optional<Timer> hedge_timer;               ///< the wait before the hedge (made at the first one)
  boost::asio::cancellation_signal first_signal;  ///< cancels the attempt's own request
  boost::asio::cancellation_signal hedge_signal;  ///< cancels its hedge
  bool first_out = false;                         ///< the attempt's own request is under way
  bool hedge_out = false;                         ///< the hedge is under way
  bool hedge_timer_out = false;                   ///< the hedge's timer is under way
  bool stopping = false;                          ///< the caller cancelled: no hedge may start
  bool parked = false;                            ///< the operation waits on `timer` for the hedging to settle
  std::optional<Touched> settled;                 ///< how the attempt ended, once decided: carried out when quiet()
};

/// The composed operation of async_call_with_retry: carries out the engine's steps, each wait on a timer.
template <class R, class Attempt, class Guard, class Executor>
class CallOp {
 public:
  using State = CallState<R, Attempt, Guard, Executor>;
  using Timer = typename State::Timer;

  CallOp(const RetryPolicy& policy, Guard& guard, const CallOptions& options, Attempt attempt, const Executor& executor)
      : policy_(&policy), guard_(&guard), options_(&options), attempt_(std::move(attempt)), executor_(executor) {}

  /// The start: allocates the call's state and carries out the first step. Called again through post
  /// when the first step was the end (a refusal), so that the handler never runs inside the initiation.
  template <class Self>
  void operator()(Self& self) {
    if (state_) {
      next(self, Step::done());
      return;
    }
    allocate(self);
    if constexpr (is_guard_on<Guard>::value) {
      through_guard(self, Then::next, [](State& state) { return state.engine.start(); });
    } else {
      const Touched touched = touch(*state_, Then::next, [](State& state) { return state.engine.start(); });
      if (touched.step.kind == Step::Kind::done) {  // never completed inside the initiation: posted first
        state_->error = touched.thrown;
        boost::asio::post(state_->executor, std::move(self));
        return;
      }
      proceed(self, touched);
    }
  }

  /// An engine call that reached the guard came back.
  template <class Self>
  void operator()(Self& self, const Touched& touched) {
    proceed(self, touched);
  }

  /// An attempt completed: `error` null and `answer` the answer, or `error` the failure.
  template <class Self>
  void operator()(Self& self, std::exception_ptr error, R answer) {
    State& state = *state_;
    if (state.hedged) {
      first_answered(self, std::move(error), std::move(answer));
      return;
    }
    if (!error) {  // an answer is delivered, even when a cancel came too late to stop it
      state.answer.emplace(std::move(answer));
      through_guard(self, Then::answer, [](State& s) { return s.engine.succeeded(std::as_const(*s.answer)); });
      return;
    }
    if (self.cancelled() != boost::asio::cancellation_type::none) {  // the attempt may have been processed
      through_guard(self, Then::cancelled, [options = options_, error](State& s) {
        return s.engine.cancelled(failure_of(*options, error, Sent::maybe_processed));
      });
      return;
    }
    if (!is_std_exception(error)) {  // not even a std::exception: never retried, passed on unchanged
      state.engine.abandoned();
      finish(self, std::move(error), R{});
      return;
    }
    state.error = std::move(error);
    through_guard(self, Then::next, [options = options_](State& s) {
      return s.engine.failed(failure_of(*options, s.error, Sent::maybe_processed), s.rng);
    });
  }

  /// A wait ended: on time, or cancelled.
  template <class Self>
  void operator()(Self& self, boost::system::error_code /*ended*/) {
    State& state = *state_;
    if (std::exchange(state.parked, false)) {
      if (self.cancelled() != boost::asio::cancellation_type::none && !state.settled) {
        state.stopping = true;
        // The request still running (the hedge) hears it lost; the call's record keeps the failure of
        // this attempt's own request, when it failed.
        state.settled = touch(state, Then::cancelled, [options = options_](State& s) {
          return s.engine.cancelled(s.error ? failure_of(*options, s.error, Sent::maybe_processed)
                                            : Failure::of(FailureKind::unknown, Sent::maybe_processed));
        });
        state.stop_hedging(true);
      }
      settle(self);
      return;
    }
    state.waiting_for_slot = false;
    if (self.cancelled() != boost::asio::cancellation_type::none) {
      cancel_unsent(self);
      return;
    }
    through_guard(self, Then::next, [](State& s) { return s.engine.resume(); });
  }

 private:
  /// Returns what `call(state)`, an engine call that reaches the guard, returned or threw.
  template <class Call>
  static Touched touch(State& state, Then then, Call&& call) {
    try {
      return {call(state), nullptr, then};
    } catch (...) {
      return {Step::done(), std::current_exception(), then};
    }
  }

  /// Makes `call(state)`, an engine call that reaches the guard, then goes on as `then` says: at once, or for
  /// a GuardOn on the guard's executor, coming back to the call's.
  template <class Self, class Call>
  void through_guard(Self& self, Then then, Call call) {
    if constexpr (is_guard_on<Guard>::value) {
      State& state = *state_;
      boost::asio::post(guard_->executor(), [self = std::move(self), &state, then, call]() mutable {
        const Touched touched = touch(state, then, call);
        boost::asio::post(state.executor, [self = std::move(self), touched]() mutable { self(touched); });
      });
    } else {
      proceed(self, touch(*state_, then, call));
    }
  }

  /// Goes on after an engine call that reached the guard: a ticket or guard that threw ends the call with
  /// what it threw.
  template <class Self>
  void proceed(Self& self, const Touched& touched) {
    if (touched.thrown) {
      finish(self, touched.thrown, R{});
      return;
    }
    switch (touched.then) {
      case Then::next: next(self, touched.step); return;
      case Then::answer: {
        R answer = std::move(*state_->answer);
        finish(self, nullptr, std::move(answer));
        return;
      }
      case Then::cancelled: finish(self, cancelled_error(), R{}); return;
    }
  }

  /// Allocates the state with the handler's allocator (Asio's recycling allocator when it has none, so that
  /// a thread running calls one after another reuses the memory).
  template <class Self>
  void allocate(Self& self) {
    using HandlerAllocator = decltype(self.get_allocator());
    if constexpr (std::is_same_v<HandlerAllocator, std::allocator<void>>) {
      state_ = std::allocate_shared<State>(boost::asio::recycling_allocator<State>(), *policy_, *guard_, *options_,
                                           std::move(attempt_), executor_);
    } else {
      using Rebound = typename std::allocator_traits<HandlerAllocator>::template rebind_alloc<State>;
      state_ = std::allocate_shared<State>(Rebound(self.get_allocator()), *policy_, *guard_, *options_,
                                           std::move(attempt_), executor_);
    }
  }

  /// Ends the call as cancelled before its next request was sent (its ticket, if any, given back unused):
  /// the failure before it, if any, is its last.
  template <class Self>
  void cancel_unsent(Self& self) {
    through_guard(self, Then::cancelled, [options = options_](State& s) {
      return s.engine.cancelled_unsent(s.error ? failure_of(*options, s.error, Sent::maybe_processed)
                                               : Failure::of(FailureKind::unknown, Sent::not_sent));
    });
  }

  /// Carries out `step` after the start: an attempt, a wait on the timer, or the end.
  template <class Self>
  void next(Self& self, const Step& step) {
    State& state = *state_;
    switch (step.kind) {
      case Step::Kind::attempt: {
        if (self.cancelled() != boost::asio::cancellation_type::none) {  // it came while the guard admitted it
          cancel_unsent(self);
          return;
        }
        if (state.hedged) {
          start_hedged(self);
          return;
        }
        Attempt& attempt = state.attempt;
        attempt(state.engine.attempt(), std::move(self));  // the state stays where it is: only `self` moves
        return;
      }
      case Step::Kind::pending: park(self); return;
      case Step::Kind::wait: {
        if (self.cancelled() != boost::asio::cancellation_type::none) {  // it came while the attempt settled
          cancel_unsent(self);
          return;
        }
        if (!state.timer) state.timer.emplace(state.executor);
        state.waiting_for_slot = step.reason == WaitReason::slot;
        state.timer->expires_after(state.waiting_for_slot ? std::min(step.wait, slot_recheck) : step.wait);
        state.timer->async_wait(std::move(self));
        return;
      }
      case Step::Kind::done: break;
    }
    const GiveUp* gave_up = state.engine.gave_up();
    if (state.error) {
      finish(self, std::exchange(state.error, nullptr), R{});
    } else {  // refused before a failure with an exception: the refusal
      finish(self, std::make_exception_ptr(AttemptRefused(Refusal{gave_up->reason, gave_up->failure, gave_up->limit})),
             R{});
    }
  }

  /// Starts an attempt of a hedged call: its own request, which `self` travels with (cancelled through the
  /// state's first_signal, to which the caller's cancel is passed on, with the hedge's), and the hedge's
  /// timer when the engine says when a hedge may go.
  /// The hedge's timer and request complete on the executor the operation's own steps run on (`self`'s,
  /// the completion handler's when it has one), so that they never run beside them.
  template <class Self>
  void start_hedged(Self& self) {
    State& state = *state_;
    state.settled.reset();
    state.error = nullptr;  // this attempt's own failure, once it has one
    state.first_out = true;
    if (const std::optional<std::chrono::milliseconds> delay = state.engine.hedge_delay(); delay && !state.stopping) {
      if (!state.hedge_timer) state.hedge_timer.emplace(state.executor);
      state.hedge_timer->expires_after(*delay);
      state.hedge_timer_out = true;
      // Untracked: the timer and the request hold the work while they are under way, not the Hedger's copies.
      const auto steps = boost::asio::prefer(boost::asio::get_associated_executor(self, state.executor),
                                             boost::asio::execution::outstanding_work.untracked);
      state.hedge_timer->async_wait(
          boost::asio::bind_executor(steps, [hedger = Hedger<std::decay_t<decltype(steps)>>{state_, options_, steps}](
                                                boost::system::error_code ended) { hedger.timer_ended(ended); }));
    }
    if (auto slot = self.get_cancellation_state().slot(); slot.is_connected()) {
      slot.assign([weak = state.weak_from_this()](boost::asio::cancellation_type /*terminal*/) {
        if (const auto held = weak.lock()) {
          held->stopping = true;
          held->stop_hedging(false);
          held->stop_hedging(true);
        }
      });
    }
    ::llmretry::Attempt first = state.engine.attempt();
    first.claims = &state;
    Attempt& attempt = state.attempt;
    attempt(std::as_const(first), boost::asio::bind_cancellation_slot(state.first_signal.slot(), std::move(self)));
  }

  /// The attempt's own request of a hedged call completed: decides unless the hedge did, then settles.
  template <class Self>
  void first_answered(Self& self, std::exception_ptr error, R answer) {
    State& state = *state_;
    state.first_out = false;
    if (error && self.cancelled() != boost::asio::cancellation_type::none && undecided(state, false)) {
      state.settled = touch(state, Then::cancelled, [options = options_, error](State& s) {
        return s.engine.cancelled(failure_of(*options, error, Sent::maybe_processed));
      });
      state.stop_hedging(true);
    } else if (decide(state, *options_, false, std::move(error), std::move(answer)) == Step::Kind::pending) {
      park(self);  // the hedge decides
      return;
    }
    settle(self);
  }

  /// Returns true when request `hedge` of a hedged attempt is still the one to hear from: the attempt is
  /// not decided, the request did not lose, the call is not over.
  static bool undecided(const State& state, bool hedge) {
    return !state.settled && state.engine.in_flight(hedge) && state.engine.gave_up() == nullptr;
  }

  /// Tells the engine how request `hedge` of a hedged attempt ended (`error` null: with `answer`) unless
  /// undecided() is false, and keeps the decision in state.settled, stopping the other request when it
  /// lost. Returns Step::Kind::pending when the other request decides, else the step decided (done when
  /// nothing was told).
  static Step::Kind decide(State& state, const CallOptions& options, bool hedge, std::exception_ptr error, R answer) {
    if (!undecided(state, hedge)) return Step::Kind::done;
    if (!error) {
      state.answer.emplace(std::move(answer));
      state.settled = touch(state, Then::answer, [hedge](State& s) {
        return hedge ? s.engine.hedge_succeeded(std::as_const(*s.answer))
                     : s.engine.succeeded(std::as_const(*s.answer));
      });
    } else if (!is_std_exception(error)) {  // not even a std::exception: the call ends with it
      state.engine.abandoned();
      state.settled = Touched{Step::done(), std::move(error), Then::next};
    } else {
      state.error = std::move(error);  // the call ends with the last failure's exception
      const Touched touched = touch(state, Then::next, [&options, hedge](State& s) {
        const Failure failure = failure_of(options, s.error, Sent::maybe_processed);
        return hedge ? s.engine.hedge_failed(failure, s.rng) : s.engine.failed(failure, s.rng);
      });
      if (!touched.thrown && touched.step.kind == Step::Kind::pending) return Step::Kind::pending;
      state.settled = touched;
    }
    state.stop_hedging(!hedge);
    return state.settled->step.kind;
  }

  /// Carries out how the attempt ended once nothing else of it is under way; until then waits (parks).
  template <class Self>
  void settle(Self& self) {
    State& state = *state_;
    if (state.settled && state.quiet()) {
      const Touched touched = *state.settled;
      state.settled.reset();
      proceed(self, touched);
      return;
    }
    park(self);
  }

  /// Waits on the state's timer, without a bound, until the hedging unparks it (Hedger::unpark).
  template <class Self>
  void park(Self& self) {
    State& state = *state_;
    if (!state.timer) state.timer.emplace(state.executor);
    state.parked = true;
    state.timer->expires_at(Timer::time_point::max());
    state.timer->async_wait(std::move(self));
  }

  /// What completes outside the operation's own steps, on their executor (`steps`): the hedge's timer and
  /// the hedge. It holds the state until they are done: the operation completes only after them.
  template <class StepsExecutor>
  struct Hedger {
    std::shared_ptr<State> state;
    const CallOptions* options;
    StepsExecutor steps;

    /// The hedge's timer ended: asks the engine for the hedge, and sends it when it goes.
    void timer_ended(boost::system::error_code ended) const {
      State& s = *state;
      s.hedge_timer_out = false;
      if (!ended && !s.stopping && s.first_out && !s.settled) {
        const Touched touched =
            touch(s, Then::next, [](State& st) { return st.engine.hedge() ? Step::attempt() : Step::done(); });
        if (!touched.thrown && touched.step.kind == Step::Kind::attempt) {  // what the guard threw: no hedge
          send();
          return;
        }
      }
      unpark();
    }

    /// Sends the hedge the engine admitted.
    void send() const {
      State& s = *state;
      ::llmretry::Attempt hedge = s.engine.hedge_attempt();
      hedge.claims = &s;
      s.hedge_out = true;
      Attempt& attempt = s.attempt;
      attempt(std::as_const(hedge),
              boost::asio::bind_cancellation_slot(
                  s.hedge_signal.slot(),
                  boost::asio::bind_executor(steps, [hedger = *this](std::exception_ptr error, R answer) {
                    hedger.answered(std::move(error), std::move(answer));
                  })));
    }

    /// The hedge completed: decides unless the attempt's own request did (or the hedge lost).
    void answered(std::exception_ptr error, R answer) const {
      state->hedge_out = false;
      (void)decide(*state, *options, true, std::move(error), std::move(answer));  // pending: the first decides
      unpark();
    }

    /// Resumes the parked operation once the attempt is decided and nothing else of it is under way.
    void unpark() const {
      State& s = *state;
      if (s.parked && s.settled && s.quiet()) s.timer->cancel();
    }
  };

  /// Frees the call's state (giving back what its guard's ticket holds), then completes.
  template <class Self>
  void finish(Self& self, std::exception_ptr error, R answer) {
    self.get_cancellation_state().slot().clear();  // nothing of the call stays in the caller's slot
    state_.reset();
    self.complete(std::move(error), std::move(answer));
  }

  /// Returns the failure `error` means (options.classify, else failure_of); unknown, with `sent`, when it is
  /// not a std::exception. Throws what options.classify throws.
  static Failure failure_of(const CallOptions& options, const std::exception_ptr& error, Sent sent) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& exception) {
      return ::llmretry::detail::classify_exception(options, exception);
    } catch (...) {
      return Failure::of(FailureKind::unknown, sent);
    }
  }

  static bool is_std_exception(const std::exception_ptr& error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception&) {
      return true;
    } catch (...) {
      return false;
    }
  }

  const RetryPolicy* policy_;
  Guard* guard_;
  const CallOptions* options_;
  Attempt attempt_;
  Executor executor_;
  std::shared_ptr<State> state_;
};

}  // namespace detail

/// Calls `attempt` until it succeeds or `policy` says stop, asynchronously: the Asio driver of a
/// CallEngine. Every wait (the backoff, the provider's Retry-After, a guard's wait for capacity, a
/// concurrency slot, ended as soon as the slot comes) is a timer on `executor`, never a blocked thread.
/// `executor` runs one handler at a time (one io_context thread, or a strand); a completion handler with
/// an executor of its own (a coroutine's) must run on the same thread or strand.
///
/// `attempt(const llmretry::Attempt&, Handler handler)` starts one attempt, an asynchronous operation that
/// completes with `handler(std::exception_ptr error, R answer)`: `error` null on success, else the failure
/// (a ProviderError or what CallOptions::classify recognises is retried as the policy says; any other
/// std::exception is an unknown failure, never retried; anything else is passed on unchanged). It must not
/// call `handler` inside its own call (post it), and should honour the handler's cancellation slot (Asio's
/// own operations do). Bound its timeout by Attempt::time_left when the call has a deadline.
///
/// Completes with CallSignature<R>: `(nullptr, answer)` on success; `(error, R{})` when it gives up: the
/// last failure's exception, AttemptRefused when a guard or the deadline refused an attempt before any
/// failure, boost::system::system_error(boost::asio::error::operation_aborted) when the caller cancelled it
/// (per-operation cancellation: bind_cancellation_slot, or the parallel group / awaitable operators that
/// emit it). A cancel stops the wait under way, or is passed to the attempt in flight through its handler;
/// the call then stops, never retries, and gives back what its guard holds (the stop reason is
/// StopReason::cancelled, in CallOptions::stats and on_give_up). `token` is any completion token: a
/// callback, boost::asio::use_future, boost::asio::deferred, boost::asio::use_awaitable.
///
/// `policy`, `guard` and `options` are held by reference and must outlive the operation; `attempt` is moved
/// in. The call's state (its engine and attempt) is allocated once, with the handler's associated allocator
/// (Asio's recycling allocator when it has none); a first attempt that succeeds starts no timer, draws no
/// random number and reads no clock (with a deadline, the clock is read before each attempt).
/// What the guard (its admission or its ticket), options.on_give_up or options.classify throws ends the call
/// with that exception, through the handler (never inside the initiating function); what the guard throws
/// when it admits a hedge only keeps the hedge from going. `attempt` itself must not throw (what it throws
/// leaves the call's handler never run).
///
/// Hedging (CallOptions::hedging): when the engine says a hedge may go (CallEngine::hedge_delay, then
/// CallEngine::hedge: safe to repeat, nothing streamed yet, capacity now, within the hedging budget),
/// `attempt` is called a second time for the same attempt, with Attempt::hedge true, while the first
/// request is in flight: it must take two requests at once. The first answer wins; the other request is
/// cancelled through its handler's cancellation slot, and the operation completes once both handlers ran.
/// A request that streams calls Attempt::claim() (on the call's executor) before it passes its first piece
/// to the caller. A call whose guard is a GuardOn is not hedged (std::invalid_argument).
/// Requires: R is default-constructible and movable.
/// Throws std::invalid_argument naming the field, before anything starts, when the policy makes no sense
/// or a GuardOn call is hedged.
template <class R, class Executor, class AsyncAttempt, class Guard, class Token,
          class = std::enable_if_t<::llmretry::detail::is_guard<Guard>::value>>
auto async_call_with_retry(const Executor& executor, AsyncAttempt&& attempt, const RetryPolicy& policy, Guard& guard,
                           const CallOptions& options, Token&& token) {
  static_assert(std::is_default_constructible_v<R> && std::is_move_constructible_v<R>,
                "async_call_with_retry<R>: R must be default-constructible and movable");
  policy.validate();
  if constexpr (detail::is_guard_on<Guard>::value) {
    if (options.hedging != nullptr)
      ::llmretry::detail::throw_invalid_argument(
          "CallOptions::hedging: a call whose guard is on another executor "
          "(guard_on) is not hedged");
  }
  using Op = detail::CallOp<R, std::decay_t<AsyncAttempt>, Guard, Executor>;
  return boost::asio::async_compose<Token, CallSignature<R>>(
      Op(policy, guard, options, std::forward<AsyncAttempt>(attempt), executor), token, executor);
}

/// async_call_with_retry with a guard and default CallOptions.
template <class R, class Executor, class AsyncAttempt, class Guard, class Token,
          class = std::enable_if_t<::llmretry::detail::is_guard<Guard>::value>>
auto async_call_with_retry(const Executor& executor, AsyncAttempt&& attempt, const RetryPolicy& policy, Guard& guard,
                           Token&& token) {
  return async_call_with_retry<R>(executor, std::forward<AsyncAttempt>(attempt), policy, guard, detail::no_options,
                                  std::forward<Token>(token));
}

/// async_call_with_retry with CallOptions and no guard.
template <class R, class Executor, class AsyncAttempt, class Token>
auto async_call_with_retry(const Executor& executor, AsyncAttempt&& attempt, const RetryPolicy& policy,
                           const CallOptions& options, Token&& token) {
  return async_call_with_retry<R>(executor, std::forward<AsyncAttempt>(attempt), policy, detail::no_guard, options,
                                  std::forward<Token>(token));
}

/// async_call_with_retry with no guard and default CallOptions.
template <class R, class Executor, class AsyncAttempt, class Token>
auto async_call_with_retry(const Executor& executor, AsyncAttempt&& attempt, const RetryPolicy& policy, Token&& token) {
  return async_call_with_retry<R>(executor, std::forward<AsyncAttempt>(attempt), policy, detail::no_guard,
                                  detail::no_options, std::forward<Token>(token));
}

}  // namespace asio
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_ASIO_CALL_HPP
