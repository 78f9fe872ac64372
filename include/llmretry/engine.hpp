#ifndef LLMRETRY_ENGINE_HPP
#define LLMRETRY_ENGINE_HPP

#include <cassert>
#include <chrono>
#include <exception>
#include <functional>
#include <optional>
#include <type_traits>
#include <utility>

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
};

/// One step of a call, as its CallEngine returns it: make an attempt, wait, or stop.
struct Step {
  enum class Kind : unsigned char {
    attempt,  ///< make the attempt CallEngine::attempt() describes now, then tell the engine how it ended
    wait,     ///< wait `wait`, then call CallEngine::resume()
    done,     ///< the call is over: it succeeded, or gave up (CallEngine::gave_up() says why)
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
///
/// The steps: start() once, then for an attempt step make attempt() and report it with succeeded() or
/// failed() (or abandoned() for an outcome that is not a failure), and after a wait step call resume().
/// A done step ends the call: gave_up() is null after a success.
/// The engine allocates nothing, draws nothing and reads no clock when the first attempt succeeds (with a
/// deadline, it reads the clock before an attempt of a guarded call, or of one told the time left).
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

  /// An engine for one call under `policy` (validated already, see RetryPolicy::validate; it must outlive
  /// the engine), admitted by `guard` and following `options` (which must outlive it). `tells_time_left`:
  /// whether an attempt of a call with a deadline is told the time left (one clock read before it; a
  /// guarded call always is).
  CallEngine(detail::prevalidated_t /*validated*/, const RetryPolicy& policy, Guard&& guard, const Options& options,
             bool tells_time_left = true) noexcept(std::is_nothrow_constructible_v<Guard, Guard&&>)
      : policy_(policy), guard_(std::forward<Guard>(guard)), options_(options), tells_time_left_(tells_time_left) {}

  /// An engine for one call under `policy` (which must outlive it), admitted by `guard`, following
  /// `options` (which must outlive it). Throws std::invalid_argument naming the field when the policy
  /// makes no sense.
  CallEngine(const RetryPolicy& policy, Guard&& guard, const Options& options)
      : CallEngine((policy.validate(), detail::prevalidated), policy, std::forward<Guard>(guard), options) {}

  /// The policy and the options are held by reference: a temporary would dangle.
  CallEngine(const RetryPolicy&& policy, Guard&& guard, const Options& options) = delete;
  CallEngine(const RetryPolicy& policy, Guard&& guard, const Options&& options) = delete;
  CallEngine(const CallEngine&) = delete;
  CallEngine& operator=(const CallEngine&) = delete;
  CallEngine(CallEngine&&) = delete;
  CallEngine& operator=(CallEngine&&) = delete;
  ~CallEngine() = default;

  /// Returns the first step: the first attempt, or a wait for capacity before it, or done when the guard
  /// refused it or the deadline had passed. Call it once, first.
  [[nodiscard]] Step start() {
    assert(made_ == 0 && !gave_up_ && !admitted_ && "CallEngine::start: call it once, first");
    return admit();
  }

  /// Returns the step after a wait step was carried out (or a wait for a slot was woken): the attempt
  /// (admitted again after a failure's wait), another wait, or done when it was refused.
  [[nodiscard]] Step resume() {
    assert(!gave_up_ && "CallEngine::resume: the call is over");
    if (std::exchange(admitted_, false)) return begin(true);
    return admit();
  }

  /// Sets the driver's Waker, told when a wait for a concurrency slot can end sooner (see Waker); it must
  /// outlive the call. Give it before start(): a ticket keeps the one it had at its first begin. Without
  /// one (null), the guard answers short waits (Deployment::Pacing: 10 ms at most) for the driver to look again.
  void wake_with(Waker* waker) noexcept { waker_ = waker; }

  /// Records that the attempt succeeded with `answer` (nothing for a call that returns void): the
  /// guard's ticket learns it. Returns done. Throws what the ticket throws (the call is over all the same).
  template <class... Answer>
  Step succeeded(const Answer&... answer) {
    assert(made_ > 0 && !gave_up_ && !admitted_ && "CallEngine::succeeded: no attempt is under way");
    if constexpr (guarded) {
      if (auto ticket = take_ticket()) ticket->succeeded(answer...);
    }
    return Step::done();
  }

  /// Records that the attempt failed with `failure` (the guard's ticket learns it) and decides: a wait
  /// before the next attempt (backoff, or the provider's wait; `rng` draws its jitter), or done when the
  /// call gives up (options.on_give_up has been told, gave_up() says why).
  template <class Rng>
  Step failed(const Failure& failure, Rng& rng) {
    assert(made_ > 0 && !gave_up_ && !admitted_ && "CallEngine::failed: no attempt is under way");
    if constexpr (guarded) {
      if (auto ticket = take_ticket()) ticket->failed(failure);
    }
    const Decision decision = state().next(failure, rng, options_.deadline ? time_left() : std::nullopt);
    if (!decision.retry) {
      give_up(decision.reason, failure);
      return Step::done();
    }
    return Step::wait_for(decision.wait, decision.why);
  }

  /// Records that the attempt ended with something that is not a failure (an exception nobody
  /// recognised): its ticket learns nothing and gives back what it holds. The call is over.
  void abandoned() noexcept {
    if constexpr (guarded) ticket_.reset();
  }

  /// Ends the call because its caller cancelled it, in any state but done: the guard's ticket is given
  /// back unused when the attempt was admitted and has not begun (a wait for capacity or a slot), and told
  /// `failure` when the attempt is under way (it may have been processed: say so in `failure.sent`).
  /// gave_up() then says StopReason::cancelled with `failure`; options.on_give_up is told. Returns done.
  Step cancelled(const Failure& failure) {
    assert(!gave_up_ && "CallEngine::cancelled: the call is over");
    if constexpr (guarded) {
      if (std::exchange(admitted_, false)) ticket_.reset();
      else if (auto ticket = take_ticket()) ticket->failed(failure);
    }
    give_up(StopReason::cancelled, failure);
    return Step::done();
  }

  /// Returns the attempt to make: its number and the time left until the deadline.
  [[nodiscard]] const Attempt& attempt() const noexcept { return attempt_; }
  /// Returns how many attempts were made (the current one included once it was admitted).
  [[nodiscard]] int attempts() const noexcept { return made_; }
  /// Returns the total of the waits so far: after failures and for capacity (a wait for a slot, which may
  /// end early, is not counted).
  [[nodiscard]] std::chrono::milliseconds waited() const noexcept {
    return state_ ? state_->waited() : std::chrono::milliseconds{0};
  }
  /// Returns how the call gave up, or null while it goes on and after a success.
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
        if (const auto stop = state().add_guard_wait(admission.wait(), attempt_.time_left)) {
          ticket_.reset();
          return refuse(Refusal{*stop, Failure::timed_out(Sent::not_sent)});
        }
        admitted_ = true;
        return Step::wait_for(admission.wait(), WaitReason::capacity);
      }
    }
    return begin(false);
  }

  /// Begins the admitted attempt (after a wait for capacity or a slot, when `after_wait`): the deadline
  /// again, then the ticket's begin (a concurrency slot).
  Step begin([[maybe_unused]] bool after_wait) {
    if constexpr (guarded) {
      if (after_wait && options_.deadline) {
        attempt_.time_left = time_left();
        if (*attempt_.time_left <= std::chrono::milliseconds::zero()) {
          ticket_.reset();
          return refuse(Refusal{StopReason::deadline, Failure::timed_out(Sent::not_sent)});
        }
      }
      if constexpr (detail::has_begin<Ticket>::value) {
        const Begin answer = detail::begin_ticket(*ticket_, std::as_const(attempt_), waker_);
        if (answer.kind() == Begin::Kind::refuse) {
          ticket_.reset();
          return refuse(answer.refusal());
        }
        if (answer.kind() == Begin::Kind::wait) {
          admitted_ = true;
          return Step::wait_for(answer.wait(), WaitReason::slot);
        }
      }
    }
    ++made_;
    // What the call spent should this attempt succeed; a failure writes it again.
    report(CallStats{made_, waited(), std::nullopt});
    return Step::attempt();
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

  /// Returns the retry state, set up at the first failure (or guard wait) so that a success sets up nothing.
  RetryState& state() {
    if (!state_) state_.emplace(detail::prevalidated, policy_, options_.safe_to_repeat);
    return *state_;
  }

  std::optional<std::chrono::milliseconds> time_left() const {
    using namespace std::chrono;
    const auto now = detail::clock_of(options_);
    return *options_.deadline > now ? floor<milliseconds>(*options_.deadline - now) : milliseconds::zero();
  }

  Step refuse(const Refusal& refusal) {
    give_up(refusal.reason, refusal.failure, refusal.limit);
    return Step::done();
  }

  void report(const CallStats& stats) {
    if constexpr (!std::is_same_v<Options, detail::NoCallOptions>) {
      if (options_.stats != nullptr) *options_.stats = stats;
    }
  }

  void give_up(StopReason reason, const Failure& failure, LimitType limit = LimitType::unknown) {
    gave_up_.emplace(GiveUp{reason, failure, made_, waited(), limit});
    report(CallStats{made_, waited(), reason});
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
  bool admitted_ = false;  ///< the attempt was admitted and waits (for capacity or a slot) to begin
};

/// An lvalue guard is shared (held by reference), a temporary one moved in.
template <class Guard, class Options>
CallEngine(const RetryPolicy&, Guard&&, const Options&) -> CallEngine<Guard, Options>;

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_ENGINE_HPP
