#ifndef LLMRETRY_ENGINE_HPP
#define LLMRETRY_ENGINE_HPP

#include <algorithm>
#include <cassert>
#include <chrono>
#include <exception>
#include <functional>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>

#include "admission/hedging.hpp"
#include "attempt.hpp"
#include "clock.hpp"
#include "decision.hpp"
#include "detail/config.hpp"
#include "failure.hpp"
#include "guard.hpp"
#include "policy.hpp"
#include "version.hpp"
#include "vocabulary.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// Per-call settings beyond the policy. Every member is optional; the defaults cost nothing.
struct CallOptions {
  /// Whether the request may be sent again after it may have been processed (read timeout, 5xx).
  /// True by default: a completion is a read. Set false for a write without an idempotency key.
  bool safe_to_repeat = true;
  /// No wait may end after this point on `clock`, and a call that takes an Attempt is told the time left.
  /// Unset: no deadline, and the clock is never read.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  /// The clock for `deadline`; empty: the real one.
  Clock clock;
  /// Your own classifier for exceptions: return the Failure, or nullopt to leave the exception to
  /// propagate unretried. Empty: failure_of (ProviderError and its subclasses).
  std::function<std::optional<Failure>(const std::exception&)> classify;
  /// Runs once when the call gives up, just before the last error is rethrown or the last result returned.
  std::function<void(const GiveUp&)> on_give_up;
  /// Where to write what the call spent, on success too; null: nowhere. Must outlive the call.
  CallStats* stats = nullptr;
  /// Hedges the call's attempts (see Hedging and CallEngine::hedge); null: never. Only a driver that sends
  /// requests concurrently hedges (asio::async_call_with_retry); call_with_retry and call_with_fallback
  /// throw std::invalid_argument when it is set. Must outlive the call.
  Hedging* hedging = nullptr;
};

/// One step of a call, as its CallEngine returns it: make an attempt, wait, or stop.
struct Step {
  enum class Kind : unsigned char {
    attempt,  ///< make the attempt CallEngine::attempt() describes now, then tell the engine how it ended
    wait,     ///< wait `wait`, then call CallEngine::resume()
    done,     ///< the call is over: it succeeded, or gave up (CallEngine::gave_up() says why)
    pending,  ///< a request of a hedged attempt failed while the other one is in flight: wait for its outcome
  };
  Kind kind = Kind::done;
  std::chrono::milliseconds wait{0};        ///< for a wait: how long from when the step was returned (for a
                                            ///< slot: at most; milliseconds::max(): no bound)
  WaitReason reason = WaitReason::backoff;  ///< for a wait: why

  /// Returns a step to make the attempt now.
  [[nodiscard]] static constexpr Step attempt() noexcept { return {Kind::attempt, {}, WaitReason::backoff}; }
  /// Returns a step to wait `wait` for `reason`.
  [[nodiscard]] static constexpr Step wait_for(std::chrono::milliseconds wait, WaitReason reason) noexcept {
    return {Kind::wait, wait, reason};
  }
  /// Returns the step of a call that is over.
  [[nodiscard]] static constexpr Step done() noexcept { return {Kind::done, {}, WaitReason::backoff}; }
  /// Returns the step to wait for the other request of a hedged attempt.
  [[nodiscard]] static constexpr Step pending() noexcept { return {Kind::pending, {}, WaitReason::backoff}; }
};

namespace detail {

/// The options of a call that passes none: CallOptions' defaults, known at compile time so that the
/// engine's reads of them fold away.
struct NoCallOptions {
  static constexpr bool safe_to_repeat = true;
  static constexpr std::optional<std::chrono::steady_clock::time_point> deadline{};
};

/// Returns the time on `options`' clock (the real one without one).
template <class Options>
std::chrono::steady_clock::time_point clock_of(const Options& options) {
  if constexpr (std::is_same_v<Options, NoCallOptions>) return real_now();
  else return now_on(options.clock);
}

}  // namespace detail

/// The step engine of one call: every driver (call_with_retry, call_with_fallback, a timer-based driver,
/// a simulator in virtual time, a queue worker) asks it what to do next and carries the step out. It
/// admits each attempt through the guard (the first one too), tells the guard's ticket how the attempt
/// ended, asks the policy's RetryState what follows a failure, and says why the call stopped. It never
/// sleeps and never blocks: a guard's wait for capacity and the wait after a failure are steps, which the
/// driver carries out its own way (a sleep, a timer, a job queue's not_before, virtual time) before
/// resume(). It reads only the clock of `options` (CallOptions::clock), and only for a deadline. What a
/// guard does is the guard's: its own clock. A wait for capacity is tied to its instant: carry it out on
/// time. A wait for a concurrency slot (WaitReason::slot) lasts at most its `wait` (milliseconds::max():
/// no bound) and ends sooner when the slot comes, which the guard tells the Waker given to wake_with().
/// No wait step ends after the deadline: a wait for capacity that would is refused (StopReason::deadline,
/// nothing sent), a wait for a slot is cut to it; a negative wait a guard or ticket asks for is 0.
///
/// The steps: start() once, then for an attempt step make attempt() and report it with succeeded() or
/// failed() (or abandoned() for an outcome that is not a failure), and after a wait step call resume().
/// A done step ends the call: gave_up() is null after a success. A step that throws ends it too.
///
/// Hedging (CallOptions::hedging, for a driver that sends requests concurrently): after an attempt step,
/// hedge_delay() says when a hedge of it may go; then hedge() admits it or not, and when it goes the
/// driver sends hedge_attempt() too and reports it with hedge_succeeded() or hedge_failed(). The first
/// answer wins: the other request's ticket is told it lost (lost(), or failed() with FailureKind::unknown,
/// maybe processed: a rate limiter charges it as sent, a breaker records nothing) and the driver cancels
/// that request and
/// reports nothing more of it (in_flight() says which request is still awaited). A request that fails
/// while the other is in flight returns a pending step: wait for the other one. A request that streams
/// claims the answer first (claim()).
/// The engine allocates nothing, draws nothing and reads no clock when the first attempt succeeds (with a
/// deadline, it reads the clock before an attempt of a guarded call, before its admission and again as it
/// begins, or once before an attempt told the time left).
/// Not thread-safe: one call, one driver at a time (the guard may be shared, as its own contract says). Steps
/// out of order (an outcome with no attempt under way, a resume after done) are a bug, caught by assert in a
/// build without NDEBUG.
///
/// `Guard`: a guard (see guard.hpp) held by value, or a reference type to share one (`CallEngine<G&>`;
/// the deduction guide picks it for an lvalue). `Options`: CallOptions, held by reference.
template <class Guard = NoGuard, class Options = CallOptions>
class CallEngine {
 public:
  using GuardType = std::remove_reference_t<Guard>;
  using Ticket = detail::ticket_t<GuardType>;
  /// True when the guard is not NoGuard: then admission may wait, refuse or begin.
  static constexpr bool guarded = !std::is_same_v<std::decay_t<Guard>, NoGuard>;
  /// True when the call may be hedged: its options are CallOptions (CallOptions::hedging says whether it is).
  static constexpr bool hedgeable = !std::is_same_v<Options, detail::NoCallOptions>;

  /// An engine for one call under `policy` (which must outlive it), admitted by `guard` and following
  /// `options` (which must outlive it). The policy is not validated now but when the engine first reads it:
  /// at the first failure, or a wait for capacity at the first admission. The step that reads a policy that
  /// makes no sense throws std::invalid_argument naming the field and ends the call: on_give_up is not told,
  /// gave_up() stays null, CallOptions::stats stay as the attempt began, and the ticket of an attempt
  /// admitted but not begun is given back. A call whose first attempt succeeds, is refused or is abandoned
  /// never reads it. `tells_time_left`:
  /// whether an attempt of a call with a deadline is told the time left (one clock read before it; a
  /// guarded call always is).
  CallEngine(detail::validate_later_t /*later*/, const RetryPolicy& policy, Guard&& guard, const Options& options,
             bool tells_time_left = true) noexcept(std::is_nothrow_constructible_v<Guard, Guard&&>)
      : policy_(policy), guard_(std::forward<Guard>(guard)), options_(options), tells_time_left_(tells_time_left) {}

  /// An engine for one call under `policy` (which must outlive it), admitted by `guard`, following
  /// `options` (which must outlive it). Throws std::invalid_argument naming the field when the policy
  /// makes no sense.
  CallEngine(const RetryPolicy& policy, Guard&& guard, const Options& options)
      : CallEngine((policy.validate(), detail::validate_later), policy, std::forward<Guard>(guard), options) {}

  /// The policy and the options are held by reference: a temporary would dangle.
  CallEngine(const RetryPolicy&& policy, Guard&& guard, const Options& options) = delete;
  CallEngine(const RetryPolicy& policy, Guard&& guard, const Options&& options) = delete;
  CallEngine(detail::validate_later_t, const RetryPolicy&& policy, Guard&& guard, const Options& options,
             bool tells_time_left = true) = delete;
  CallEngine(detail::validate_later_t, const RetryPolicy& policy, Guard&& guard, const Options&& options,
             bool tells_time_left = true) = delete;
  CallEngine(const CallEngine&) = delete;
  CallEngine& operator=(const CallEngine&) = delete;
  CallEngine(CallEngine&&) = delete;
  CallEngine& operator=(CallEngine&&) = delete;
  ~CallEngine() = default;

  /// Returns the first step: the first attempt, or a wait for capacity before it, or done when the guard
  /// refused it or the deadline had passed. Call it once, first. Throws std::invalid_argument when the
  /// guard asks for a wait for capacity and the policy, validated later, makes no sense.
  [[nodiscard]] Step start() {
    assert(phase_ == Phase::idle && "CallEngine::start: call it once, first");
    return admit();
  }

  /// Returns the step after a wait step was carried out (or a wait for a slot was woken): the attempt
  /// (admitted again after a failure's wait), another wait, or done when it was refused.
  [[nodiscard]] Step resume() {
    assert((phase_ == Phase::waiting || phase_ == Phase::waiting_to_begin) &&
           "CallEngine::resume: no wait step to resume after");
    if (phase_ == Phase::waiting_to_begin) return begin();
    return admit();
  }

  /// Sets the driver's Waker, told when a wait for a concurrency slot can end sooner (see Waker); it must
  /// outlive the call. Give it before start(): a ticket keeps the one it had at its first begin. Without
  /// one (null), the guard answers short waits (Deployment::Pacing: 10 ms at most) for the driver to look again.
  void wake_with(Waker* waker) noexcept { waker_ = waker; }

  /// Records that the attempt succeeded with `answer` (nothing for a call that returns void): the
  /// guard's ticket learns it (the hedge in flight, if any, lost). Returns done. Throws what the ticket
  /// throws (the call is over all the same).
  template <class... Answer>
  Step succeeded(const Answer&... answer) {
    return answered(false, answer...);
  }

  /// Records that the attempt failed with `failure` (the guard's ticket learns it) and decides: a wait
  /// before the next attempt (backoff, or the provider's wait; `rng` draws its jitter), or done when the
  /// call gives up (options.on_give_up has been told, gave_up() says why); pending while its hedge is in
  /// flight. Throws std::invalid_argument, once the ticket has learned the failure, when the policy,
  /// validated later, makes no sense.
  template <class Rng>
  Step failed(const Failure& failure, Rng& rng) {
    return failed_request(false, failure, rng);
  }

  /// Records that the attempt ended with something that is not a failure (an exception nobody
  /// recognised): its tickets (its hedge's too) learn nothing and give back what they hold. The call is over.
  void abandoned() noexcept {
    assert(phase_ == Phase::attempting && "CallEngine::abandoned: no attempt is under way");
    phase_ = Phase::over;
    if constexpr (guarded) ticket_.reset();
    if constexpr (hedgeable) {
      if constexpr (guarded) hedge_.ticket.reset();
      hedge_.in_flight = 0;
    }
  }

  /// Ends the call because its caller cancelled it, in any state but done: the guard's ticket is given
  /// back unused when the attempt was admitted and has not begun (a wait for capacity or a slot); the
  /// ticket of a request under way, its hedge's too, is told it lost (detail::tell_lost: it may have been
  /// processed, and says nothing of the deployment's health). gave_up() then says StopReason::cancelled
  /// with `failure` (the last failure the call saw, or one of the caller's); options.on_give_up is told.
  /// Returns done. Throws what a ticket throws (the call is over all the same).
  Step cancelled(const Failure& failure) { return cancel(failure, false); }

  /// Ends the call as cancelled() does, when the driver got an attempt step and sent nothing (the cancel
  /// came before it started the request): that attempt's ticket is given back unused, as for a wait; a
  /// hedge in flight is still told it lost.
  Step cancelled_unsent(const Failure& failure) { return cancel(failure, true); }

  /// Returns how long after the attempt just begun (an attempt step) its hedge may go (see hedge()), or
  /// nullopt when it may not: the call is not hedged or not safe to repeat, the delay is not learned yet,
  /// or the deadline comes first.
  [[nodiscard]] std::optional<std::chrono::milliseconds> hedge_delay() const {
    Hedging* const hedging_of_call = hedging();
    if (hedging_of_call == nullptr || !options_.safe_to_repeat || hedge_.closed) return std::nullopt;
    const std::optional<std::chrono::milliseconds> delay = hedging_of_call->delay();
    if (!delay || (attempt_.time_left && *delay >= *attempt_.time_left)) return std::nullopt;
    return delay;
  }

  /// Asks for the hedge of the attempt under way (at the end of hedge_delay()). Returns true when it goes:
  /// send hedge_attempt() now and report it with hedge_succeeded() or hedge_failed(). Returns false, and
  /// the attempt goes on alone, unless: the call is hedged and safe to repeat; the attempt is in flight,
  /// has no hedge yet and has streamed nothing (claim()); the deadline has not passed; the hedging budget
  /// allows one more hedge; and the guard admits the hedge at once (no wait for capacity, a concurrency
  /// slot free: a hedge never waits, so it never goes ahead of an attempt that waits). At most one hedge
  /// per attempt. Throws what the guard throws (the attempt goes on alone).
  [[nodiscard]] bool hedge() {
    Hedging* const hedging_of_call = hedging();
    assert(phase_ == Phase::attempting && "CallEngine::hedge: no attempt is under way");
    if (hedging_of_call == nullptr || !options_.safe_to_repeat || hedge_.closed || hedge_.in_flight != first_request)
      return false;
    hedge_.closed = true;
    hedge_.attempt = attempt_;
    hedge_.attempt.hedge = true;
    if (options_.deadline) {
      hedge_.attempt.time_left = time_left();
      if (*hedge_.attempt.time_left <= std::chrono::milliseconds::zero()) return false;
    }
    const auto now = hedging_of_call->now();
    if (!hedging_of_call->try_hedge(now)) return false;
    Unsent unsent{hedging_of_call, now};  // gives the hedge back unless it goes
    if constexpr (guarded) {
      auto admission = guard_.admit(std::as_const(hedge_.attempt));
      if (!admission.admitted() || admission.wait() > std::chrono::milliseconds::zero()) return false;
      Ticket ticket(std::move(admission.ticket()));
      if constexpr (detail::has_begin<Ticket>::value) {
        if (detail::begin_ticket(ticket, std::as_const(hedge_.attempt), nullptr).kind() != Begin::Kind::go)
          return false;
      }
      hedge_.ticket.emplace(std::move(ticket));
    }
    unsent.hedging = nullptr;
    hedge_.in_flight |= hedge_request;
    ++hedge_.sent;
    report(std::nullopt);
    return true;
  }

  /// Records that the hedge succeeded with `answer`: its ticket learns it, the attempt's own request lost.
  /// Returns done.
  template <class... Answer>
  Step hedge_succeeded(const Answer&... answer) {
    return answered(true, answer...);
  }

  /// Records that the hedge failed with `failure`: pending while the attempt's own request is in flight,
  /// else as failed() (and throws as it does).
  template <class Rng>
  Step hedge_failed(const Failure& failure, Rng& rng) {
    return failed_request(true, failure, rng);
  }

  /// Returns true when the request (the hedge when `hedge`) may pass its streamed answer to the caller:
  /// the first of a hedged attempt's requests to ask wins (the other one lost: cancel it), and no hedge
  /// starts after. Always true for a call that is not hedged.
  [[nodiscard]] bool claim(bool hedge) {
    Hedging* const hedging_of_call = hedging();
    if (hedging_of_call == nullptr) return true;
    if (hedge_.claimed) return hedge_.claimed_by_hedge == hedge && (hedge_.in_flight & request(hedge)) != 0;
    if ((hedge_.in_flight & request(hedge)) == 0) return false;
    hedge_.claimed = true;
    hedge_.claimed_by_hedge = hedge;
    hedge_.closed = true;
    learn(*hedging_of_call);
    if ((hedge_.in_flight & request(!hedge)) != 0) lose(!hedge);  // what its ticket throws: the claim stands
    return true;
  }

  /// Returns true while the outcome of the attempt's own request (the hedge's when `hedge`) is awaited:
  /// false once it lost.
  [[nodiscard]] bool in_flight(bool hedge) const noexcept { return (hedge_.in_flight & request(hedge)) != 0; }

  /// Returns the hedge to send after hedge() said it goes.
  [[nodiscard]] const Attempt& hedge_attempt() const noexcept { return hedge_.attempt; }
  /// Returns how many hedges were sent.
  [[nodiscard]] int hedges() const noexcept { return hedge_.sent; }

  /// Returns the attempt to make: its number and the time left until the deadline.
  [[nodiscard]] const Attempt& attempt() const noexcept { return attempt_; }
  /// Returns how many attempts were made (the current one included once it was admitted).
  [[nodiscard]] int attempts() const noexcept { return made_; }
  /// Returns the total of the waits so far that count toward max_total_wait: after failures and for capacity
  /// at admission (a wait for a slot, which may end early, and a wait a ticket asks for as it begins, such as
  /// a held-back attempt's, are not counted).
  [[nodiscard]] std::chrono::milliseconds waited() const noexcept {
    return state_ ? state_->waited() : std::chrono::milliseconds{0};
  }
  /// Returns how the call gave up, or null while it goes on, after a success, and after a step threw.
  [[nodiscard]] const GiveUp* gave_up() const noexcept { return gave_up_ ? &*gave_up_ : nullptr; }
  /// Returns the refusal that ended the call before any attempt was made, or nullopt.
  [[nodiscard]] std::optional<Refusal> first_refusal() const noexcept {
    if (!gave_up_ || made_ > 0) return std::nullopt;
    return Refusal{gave_up_->reason, gave_up_->failure, gave_up_->limit};
  }
  /// Returns the policy the engine follows.
  [[nodiscard]] const RetryPolicy& policy() const noexcept { return policy_; }

 private:
  /// Admits the next attempt: the deadline, then the guard's admission (a wait for capacity is a step).
  Step admit() {
    attempt_.number = made_ + 1;
    if (options_.deadline && (guarded || tells_time_left_)) {
      attempt_.time_left = time_left();
      if (*attempt_.time_left <= std::chrono::milliseconds::zero())
        return refuse(Refusal{StopReason::deadline, Failure::timed_out(Sent::not_sent)});
    }
    if constexpr (guarded) {
      auto admission = guard_.admit(std::as_const(attempt_));
      if (!admission.admitted()) return refuse(admission.refusal());
      ticket_.emplace(std::move(admission.ticket()));
      if (admission.wait() > std::chrono::milliseconds::zero()) {
        if (options_.deadline) attempt_.time_left = time_left();  // read again: the admission took time
        if (const auto stop = state().add_guard_wait(admission.wait(), attempt_.time_left)) return refuse_unsent(*stop);
        return wait_step(admission.wait(), WaitReason::capacity);
      }
    }
    return begin();
  }

  /// Begins the admitted attempt (at once, or after a wait for capacity or a slot): the deadline
  /// again, then the ticket's begin (a concurrency slot).
  Step begin() {
    if constexpr (guarded) {
      if (options_.deadline) {  // read again: the admission, or the wait, took time
        attempt_.time_left = time_left();
        if (*attempt_.time_left <= std::chrono::milliseconds::zero()) return refuse_unsent(StopReason::deadline);
      }
      if constexpr (detail::has_begin<Ticket>::value) {
        const Begin answer = detail::begin_ticket(*ticket_, std::as_const(attempt_), waker_);
        if (answer.kind() == Begin::Kind::refuse) {
          ticket_.reset();
          return refuse(answer.refusal());
        }
        if (answer.kind() == Begin::Kind::wait) {
          // No wait ends after the deadline: a slot's is cut to it (it may end sooner anyway), another is refused.
          std::chrono::milliseconds wait = std::max(answer.wait(), std::chrono::milliseconds::zero());
          if (attempt_.time_left && wait > *attempt_.time_left) {
            if (answer.reason() != WaitReason::slot) return refuse_unsent(StopReason::deadline);
            wait = *attempt_.time_left;
          }
          return wait_step(wait, answer.reason());
        }
      }
    }
    ++made_;
    if constexpr (hedgeable) {
      if (Hedging* hedging_of_call = hedging()) {
        const auto now = hedging_of_call->now();
        if (made_ == 1) hedging_of_call->called(now);
        hedge_.started = now;
        hedge_.in_flight = first_request;
        hedge_.closed = false;
        hedge_.claimed = false;
      }
    }
    // What the call spent should this attempt succeed; a failure writes it again.
    report(std::nullopt);
    phase_ = Phase::attempting;
    return Step::attempt();
  }

  /// Returns a wait step for the admitted attempt, which then begins at resume().
  Step wait_step(std::chrono::milliseconds wait, WaitReason reason) noexcept {
    phase_ = Phase::waiting_to_begin;
    return Step::wait_for(wait, reason);
  }

  /// The requests of an attempt, as bits of HedgeState::in_flight.
  static constexpr unsigned char first_request = 1;
  static constexpr unsigned char hedge_request = 2;
  [[nodiscard]] static constexpr unsigned char request(bool hedge) noexcept {
    return hedge ? hedge_request : first_request;
  }

  /// Gives back a hedge taken from the budget unless `hedging` was cleared (it was sent).
  struct Unsent {
    Unsent(Hedging* taken_from, std::chrono::steady_clock::time_point taken_at) noexcept
        : hedging(taken_from), at(taken_at) {}
    Unsent(const Unsent&) = delete;
    Unsent& operator=(const Unsent&) = delete;
    Unsent(Unsent&&) = delete;
    Unsent& operator=(Unsent&&) = delete;
    ~Unsent() {
      if (hedging != nullptr) hedging->give_back(at);
    }
    Hedging* hedging;
    std::chrono::steady_clock::time_point at;
  };

  /// Returns the call's Hedging (CallOptions::hedging), or null when it is not hedged.
  [[nodiscard]] Hedging* hedging() const noexcept {
    if constexpr (std::is_same_v<Options, detail::NoCallOptions>) return nullptr;
    else return options_.hedging;
  }

  /// A request (the hedge when `hedge`) answered: its ticket learns it.
  template <class... Answer>
  Step answered(bool hedge, const Answer&... answer) {
    assert(phase_ == Phase::attempting && "CallEngine::succeeded: no attempt is under way");
    phase_ = Phase::over;
    if constexpr (hedgeable) {
      if (Hedging* const hedging_of_call = hedging()) return answered_hedged(*hedging_of_call, hedge, answer...);
    }
    if constexpr (guarded) {
      if (auto ticket = take_ticket(hedge)) ticket->succeeded(answer...);
    }
    return Step::done();
  }

  /// A request of a hedged call answered: the other one, in flight, lost. The loser is told first (an
  /// observer's last word on the call is then the success); what its ticket throws is thrown once the
  /// winner's ticket was told.
  template <class... Answer>
  Step answered_hedged(Hedging& hedging_of_call, bool hedge, const Answer&... answer) {
    assert(in_flight(hedge) && "CallEngine::succeeded: that request is not in flight");
    [[maybe_unused]] std::exception_ptr loser_threw;
    if (!hedge_.claimed) learn(hedging_of_call);
    if (in_flight(!hedge)) {
#if LLMRETRY_HAS_EXCEPTIONS
      try {
        lose(!hedge);
      } catch (...) {
        loser_threw = std::current_exception();
      }
#else
      lose(!hedge);
#endif
    }
    hedge_.in_flight = 0;
    if (hedge) hedging_of_call.won();
    if constexpr (guarded) {
      if (auto ticket = take_ticket(hedge)) ticket->succeeded(answer...);
    }
#if LLMRETRY_HAS_EXCEPTIONS
    if (loser_threw) std::rethrow_exception(loser_threw);
#endif
    return Step::done();
  }

  /// A request (the hedge when `hedge`) failed: pending while the other one is in flight, else decides.
  template <class Rng>
  Step failed_request(bool hedge, const Failure& failure, Rng& rng) {
    assert(phase_ == Phase::attempting && "CallEngine::failed: no attempt is under way");
    [[maybe_unused]] bool other_in_flight = false;
    if constexpr (hedgeable) {
      if (hedging() != nullptr) {
        assert(in_flight(hedge) && "CallEngine::failed: that request is not in flight");
        hedge_.in_flight = static_cast<unsigned char>(hedge_.in_flight & ~request(hedge));
        other_in_flight = hedge_.in_flight != 0;
      }
    }
    if constexpr (guarded) {
      if (auto ticket = take_ticket(hedge)) ticket->failed(failure);
    }
    if (other_in_flight) return Step::pending();
    const Decision decision = state().next(failure, rng, options_.deadline ? time_left() : std::nullopt);
    if (!decision.retry) {
      give_up(decision.reason, failure);
      return Step::done();
    }
    phase_ = Phase::waiting;
    return Step::wait_for(decision.wait, decision.why);
  }

  /// The request (the hedge when `hedge`) lost: its ticket hears it (detail::tell_lost), and its outcome
  /// is awaited no more.
  void lose(bool hedge) {
    hedge_.in_flight = static_cast<unsigned char>(hedge_.in_flight & ~request(hedge));
    if constexpr (guarded) {
      if (auto ticket = take_ticket(hedge)) detail::tell_lost(*ticket);
    }
  }

  /// Records a latency when a request of the attempt answered or began to stream: the attempt's own
  /// request's, still waiting when its hedge won (a lower bound, so that the slow tail the delay is learned
  /// from is not lost).
  void learn(Hedging& hedging_of_call) {
    using namespace std::chrono;
    hedging_of_call.record(floor<milliseconds>(hedging_of_call.now() - hedge_.started));
  }

  /// cancelled() and cancelled_unsent(): `unsent` true when the attempt step was not carried out.
  Step cancel(const Failure& failure, [[maybe_unused]] bool unsent) {
    assert(phase_ != Phase::over && "CallEngine::cancelled, cancelled_unsent: the call is over");
    if constexpr (guarded) {
      if (phase_ == Phase::waiting_to_begin || unsent) ticket_.reset();
      else if (auto ticket = take_ticket(false)) detail::tell_lost(*ticket);
      if constexpr (hedgeable) {
        if (auto ticket = take_ticket(true)) detail::tell_lost(*ticket);
      }
    }
    give_up(StopReason::cancelled, failure);
    return Step::done();
  }

  /// Returns the ticket of the attempt's request (of its hedge when `hedge`), leaving none behind: it is
  /// destroyed (and gives back what it holds) when the caller is done with it, even if telling it the
  /// outcome throws.
  std::optional<Ticket> take_ticket([[maybe_unused]] bool hedge) noexcept {
    std::optional<Ticket>* from = &ticket_;
    if constexpr (hedgeable) {
      if (hedge) from = &hedge_.ticket;
    }
    std::optional<Ticket>& held = *from;
    std::optional<Ticket> ticket;
    if (held) {
      ticket.emplace(std::move(*held));
      held.reset();
    }
    return ticket;
  }

  /// Returns the retry state, set up at the first failure (or wait for capacity at admission) so that a
  /// success sets up nothing.
  RetryState& state() {
    if (!state_) set_up_state();
    return *state_;
  }

  /// Sets up the retry state. Throws std::invalid_argument naming the field when the policy makes no sense:
  /// the call is then over, on_give_up not told, the tickets of requests not begun given back. Not kept out
  /// of line: an engine whose address reaches a call the compiler cannot see into is kept in memory, and a
  /// success would pay for writing it.
  void set_up_state() {
#if LLMRETRY_HAS_EXCEPTIONS
    try {
      state_.emplace(policy_, options_.safe_to_repeat);
    } catch (...) {
      phase_ = Phase::over;
      ticket_.reset();
      if constexpr (hedgeable) {
        hedge_.ticket.reset();
        hedge_.in_flight = 0;
      }
      throw;
    }
#else
    state_.emplace(policy_, options_.safe_to_repeat);  // aborts when the policy makes no sense
#endif
  }

  /// Returns the time from now to the deadline, 0 once it passed, without overflow whatever the two are.
  std::optional<std::chrono::milliseconds> time_left() const {
    using namespace std::chrono;
    using Ticks = steady_clock::duration::rep;
    const Ticks now = detail::clock_of(options_).time_since_epoch().count();
    const Ticks deadline = options_.deadline->time_since_epoch().count();
    if (deadline <= now) return milliseconds::zero();
    // deadline - now > 0 overflows only when now < 0 and deadline > max + now.
    const Ticks left = now < 0 && deadline > std::numeric_limits<Ticks>::max() + now ? std::numeric_limits<Ticks>::max()
                                                                                     : deadline - now;
    return floor<milliseconds>(steady_clock::duration{left});
  }

  Step refuse(const Refusal& refusal) {
    give_up(refusal.reason, refusal.failure, refusal.limit);
    return Step::done();
  }

  /// Gives the admitted attempt's ticket back and ends the call for `reason` before anything was sent.
  Step refuse_unsent(StopReason reason) {
    ticket_.reset();
    return refuse(Refusal{reason, Failure::timed_out(Sent::not_sent)});
  }

  /// Writes what the call spent, and why it stopped (nullopt: it has not, or it succeeded).
  void report(std::optional<StopReason> stopped) {
    if constexpr (!std::is_same_v<Options, detail::NoCallOptions>) {
      if (options_.stats != nullptr) *options_.stats = CallStats{made_, waited(), stopped, hedge_.sent};
    }
  }

  void give_up(StopReason reason, const Failure& failure, LimitType limit = LimitType::unknown) {
    phase_ = Phase::over;
    if constexpr (hedgeable) hedge_.in_flight = 0;
    gave_up_.emplace(GiveUp{reason, failure, made_, waited(), limit});
    report(reason);
    if constexpr (!std::is_same_v<Options, detail::NoCallOptions>) {
      if (options_.on_give_up) options_.on_give_up(*gave_up_);
    }
  }

  const RetryPolicy& policy_;
  Guard guard_;
  const Options& options_;
  std::optional<RetryState> state_;
  std::optional<Ticket> ticket_;
  std::optional<GiveUp> gave_up_;
  Attempt attempt_;
  int made_ = 0;
  Waker* waker_ = nullptr;
  bool tells_time_left_ = true;
  /// Where the call stands: before start(); an attempt under way; waiting before the next admission (after a
  /// failure); admitted, waiting (for capacity or a slot) to begin; over.
  enum class Phase : unsigned char { idle, attempting, waiting, waiting_to_begin, over };
  Phase phase_ = Phase::idle;
  /// What a hedged call keeps (CallOptions::hedging); nothing for the options of a call that passes none.
  struct HedgeState {
    std::optional<Ticket> ticket;                     ///< the hedge's
    Attempt attempt;                                  ///< the hedge
    std::chrono::steady_clock::time_point started{};  ///< on the hedging's clock: the attempt's start
    int sent = 0;                                     ///< hedges sent
    unsigned char in_flight = 0;                      ///< the requests whose outcome is awaited
    bool closed = false;                              ///< the attempt may have no (more) hedge
    bool claimed = false;                             ///< a request of the attempt streams its answer
    bool claimed_by_hedge = false;                    ///< the hedge does
  };
  struct NoHedgeState {};
  std::conditional_t<hedgeable, HedgeState, NoHedgeState> hedge_;
};

/// An lvalue guard is shared (held by reference), a temporary one moved in.
template <class Guard, class Options>
CallEngine(const RetryPolicy&, Guard&&, const Options&) -> CallEngine<Guard, Options>;

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_ENGINE_HPP
