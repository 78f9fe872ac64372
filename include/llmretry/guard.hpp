#ifndef LLMRETRY_GUARD_HPP
#define LLMRETRY_GUARD_HPP

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <exception>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "attempt.hpp"
#include "decision.hpp"
#include "detail/config.hpp"
#include "errors.hpp"
#include "failure.hpp"
#include "version.hpp"
#include "vocabulary.hpp"

/// Guards: what something shared by many calls (a rate limiter, a circuit breaker, a retry budget) does
/// around each attempt of call_with_retry. A guard is any object `g` with
///
///   Admission<Ticket> g.admit(const Attempt& attempt);
///
/// called before every attempt, the first one too. It lets the attempt go now, after a wait, or refuses
/// it. The Ticket it hands out travels with the attempt and learns how it ended:
///
///   ticket.succeeded(result);      // the attempt returned `result` (no argument when the call returns void)
///   ticket.failed(failure);        // the attempt failed with `failure`
///
/// A ticket may also have `ticket.lost()`, told instead of failed() when its request lost to the other
/// request of a hedged attempt (see Hedging); without one it hears failed() with FailureKind::unknown,
/// maybe processed (sent, answer unknown). Its destructor runs in every case, so that a ticket that heard
/// neither (the call threw something that is not a provider failure, or the loop did not send the attempt
/// after all) can give back what it held. A ticket may also have
///
///   Begin ticket.begin(const Attempt& attempt, Waker* waker);   // or, never waiting:
///   std::optional<Refusal> ticket.begin(const Attempt& attempt);
///
/// called after the admission's wait, just before the attempt is sent (to take a concurrency slot
/// without holding it while waiting for rate). It answers go; a refusal, which ends the call as a refusal
/// from admit; or a wait for a slot (WaitReason::slot): the driver waits at most that long, woken sooner
/// by `waker` (when not null) once the slot came, then calls begin again, which answers go, another wait,
/// or the refusal of a wait that ran out. A ticket destroyed while it waits leaves the line.
/// Pass a guard to call_with_retry among its trailing arguments, by reference: it is shared.

LLMRETRY_BEGIN_NAMESPACE

/// Wakes the driver of a call that waits for a concurrency slot (WaitReason::slot) when the slot came before
/// the wait ran out. wake() runs on the thread that gave the slot back, with the slot's lock held, maybe
/// before the driver began the wait: it only marks or schedules the call's resume (a flag and a notify, a
/// posted task, an event), never calls into the call or the guard. It must outlive the tickets it is given
/// to; a ticket that ends (destroyed, or begun after the slot came) waits for a wake() under way to return.
class Waker {
 public:
  Waker() = default;
  Waker(const Waker&) = delete;
  Waker& operator=(const Waker&) = delete;
  Waker(Waker&&) = delete;
  Waker& operator=(Waker&&) = delete;
  virtual ~Waker() = default;

  /// The slot came: resume the call.
  virtual void wake() noexcept = 0;
};

namespace detail {
/// How long a driver that cannot be woken (no Waker), or whose sleep keeps virtual time, waits before it
/// looks again whether a concurrency slot came.
inline constexpr std::chrono::milliseconds slot_poll{10};
}  // namespace detail

/// A ticket's answer to begin(): begin the attempt now, wait for a slot, or refuse.
class Begin {
 public:
  enum class Kind : unsigned char {
    go,      ///< send the attempt now
    wait,    ///< wait at most wait() (milliseconds::max(): no bound) for what reason() says, then begin again
    refuse,  ///< the attempt is refused: refusal()
  };

  /// Returns the answer to send the attempt now.
  [[nodiscard]] static Begin go() noexcept { return Begin{Kind::go, {}, {}, WaitReason::slot}; }
  /// Returns the answer to wait at most `at_most` (milliseconds::max(): no bound): for a slot (a wait that
  /// ends early when the Waker is told), or for capacity (a wait until that instant).
  [[nodiscard]] static Begin wait_at_most(std::chrono::milliseconds at_most,
                                          WaitReason reason = WaitReason::slot) noexcept {
    return Begin{Kind::wait, at_most, {}, reason};
  }
  /// Returns the answer refusing the attempt.
  [[nodiscard]] static Begin refuse(const Refusal& refusal) noexcept {
    return Begin{Kind::refuse, {}, refusal, WaitReason::slot};
  }

  /// Returns what the answer says to do.
  [[nodiscard]] Kind kind() const noexcept { return kind_; }
  /// Returns the longest wait. Requires kind() == Kind::wait.
  [[nodiscard]] std::chrono::milliseconds wait() const noexcept { return wait_; }
  /// Returns what is waited for: WaitReason::slot or WaitReason::capacity. Requires kind() == Kind::wait.
  [[nodiscard]] WaitReason reason() const noexcept { return reason_; }
  /// Returns the refusal. Requires kind() == Kind::refuse.
  [[nodiscard]] const Refusal& refusal() const noexcept { return refusal_; }

 private:
  Begin(Kind kind, std::chrono::milliseconds wait, const Refusal& refusal, WaitReason reason) noexcept
      : kind_(kind), wait_(wait), refusal_(refusal), reason_(reason) {}

  Kind kind_;
  std::chrono::milliseconds wait_;
  Refusal refusal_;
  WaitReason reason_;
};

/// A guard's answer before an attempt: go (after `wait`, zero for at once) holding a ticket, or refuse.
template <class Ticket>
class Admission {
 public:
  /// Admits the attempt after `wait`; `ticket` learns how it ends.
  static Admission go(Ticket ticket, std::chrono::milliseconds wait = std::chrono::milliseconds::zero()) {
    return Admission(std::move(ticket), wait);
  }
  /// Refuses the attempt.
  static Admission refuse(const Refusal& refusal) { return Admission(refusal); }

  /// Returns true when the attempt may go.
  [[nodiscard]] bool admitted() const noexcept { return ticket_.has_value(); }
  /// Returns how long to wait before the attempt. Requires admitted().
  [[nodiscard]] std::chrono::milliseconds wait() const noexcept { return wait_; }
  /// Returns the ticket. Requires admitted().
  [[nodiscard]] Ticket& ticket() noexcept { return *ticket_; }
  /// Returns the refusal. Requires !admitted().
  [[nodiscard]] const Refusal& refusal() const noexcept { return refusal_; }

 private:
  Admission(Ticket ticket, std::chrono::milliseconds wait) : ticket_(std::move(ticket)), wait_(wait) {}
  explicit Admission(const Refusal& refusal) : refusal_(refusal) {}

  std::optional<Ticket> ticket_;
  std::chrono::milliseconds wait_{0};
  Refusal refusal_;
};

/// The guard of a call that has none: admits every attempt at once and learns nothing. Compiles away.
struct NoGuard {
  /// A ticket that ignores the outcome.
  struct Ticket {
    template <class... Result>
    void succeeded(const Result&... /*result*/) const noexcept {}
    void failed(const Failure& /*failure*/) const noexcept {}
  };
  /// Returns an admission to go at once.
  [[nodiscard]] Admission<Ticket> admit(const Attempt& /*attempt*/) const noexcept {
    return Admission<Ticket>::go(Ticket{});
  }
};

namespace detail {

template <class T, class = void>
struct has_plain_begin : std::false_type {};
template <class T>
struct has_plain_begin<T, std::void_t<decltype(std::declval<T&>().begin(std::declval<const Attempt&>()))>>
    : std::true_type {};
template <class T, class = void>
struct has_waiting_begin : std::false_type {};
template <class T>
struct has_waiting_begin<
    T, std::void_t<decltype(std::declval<T&>().begin(std::declval<const Attempt&>(), std::declval<Waker*>()))>>
    : std::true_type {};

template <class T>
struct has_begin : std::bool_constant<has_plain_begin<T>::value || has_waiting_begin<T>::value> {};

template <class T, class = void>
struct has_lost : std::false_type {};
template <class T>
struct has_lost<T, std::void_t<decltype(std::declval<T&>().lost())>> : std::true_type {};

/// Tells `ticket` its request lost to the other request of a hedged attempt: lost() when it has one, else
/// failed() with FailureKind::unknown, maybe processed.
template <class Ticket>
void tell_lost(Ticket& ticket) {
  if constexpr (has_lost<Ticket>::value) ticket.lost();
  else ticket.failed(Failure::of(FailureKind::unknown, Sent::maybe_processed));
}

/// Whether a ticket's begin may answer a wait for a slot: its `may_wait` when it says, else whether its
/// begin takes a Waker.
template <class T, class = void>
struct may_wait : has_waiting_begin<T> {};
template <class T>
struct may_wait<T, std::void_t<decltype(T::may_wait)>> : std::bool_constant<T::may_wait> {};

/// Returns what `ticket`'s begin answers (go for a ticket without one; the form with a Waker when it has both).
template <class Ticket>
Begin begin_ticket(Ticket& ticket, const Attempt& attempt, Waker* waker) {
  if constexpr (has_waiting_begin<Ticket>::value) {
    return ticket.begin(attempt, waker);
  } else if constexpr (has_plain_begin<Ticket>::value) {
    if (const std::optional<Refusal> refusal = ticket.begin(attempt)) return Begin::refuse(*refusal);
    return Begin::go();
  } else {
    return Begin::go();
  }
}

template <class T, class = void>
struct is_guard : std::false_type {};
template <class T>
struct is_guard<T, std::void_t<decltype(std::declval<T&>().admit(std::declval<const Attempt&>()))>> : std::true_type {};

template <class Guard>
using ticket_t = std::decay_t<decltype(std::declval<Guard&>().admit(std::declval<const Attempt&>()).ticket())>;

}  // namespace detail

/// A guard that may be absent (an empty optional): then it admits every attempt at once and learns
/// nothing; otherwise it is the guard it holds. For a guard that only some calls or routes have.
template <class Guard>
class OptionalGuard {
 public:
  /// The held guard's ticket, or none.
  class Ticket {
   public:
    /// Whether begin may answer a wait: the held guard's ticket may.
    static constexpr bool may_wait = detail::may_wait<detail::ticket_t<Guard>>::value;

    explicit Ticket(std::optional<detail::ticket_t<Guard>> inner) : inner_(std::move(inner)) {}
    /// Returns what the held guard's ticket answers, or go.
    [[nodiscard]] Begin begin(const Attempt& attempt, Waker* waker) {
      return inner_ ? detail::begin_ticket(*inner_, attempt, waker) : Begin::go();
    }
    template <class... Answer>
    void succeeded(const Answer&... answer) {
      if (inner_) inner_->succeeded(answer...);
    }
    void failed(const Failure& failure) {
      if (inner_) inner_->failed(failure);
    }
    /// Tells the held guard's ticket its request lost (see detail::tell_lost).
    void lost() {
      if (inner_) detail::tell_lost(*inner_);
    }

   private:
    std::optional<detail::ticket_t<Guard>> inner_;
  };

  /// Holds `guard`, or none.
  explicit OptionalGuard(std::optional<Guard> guard) : guard_(std::move(guard)) {}

  /// Returns the held guard's admission, or an admission to go at once when there is none.
  [[nodiscard]] Admission<Ticket> admit(const Attempt& attempt) {
    if (!guard_) return Admission<Ticket>::go(Ticket{std::nullopt});
    auto admission = guard_->admit(attempt);
    if (!admission.admitted()) return Admission<Ticket>::refuse(admission.refusal());
    return Admission<Ticket>::go(Ticket{std::move(admission.ticket())}, admission.wait());
  }

 private:
  std::optional<Guard> guard_;
};

/// Several guards acting as one (made by guards()): each attempt is admitted by every guard in order and
/// waits for the longest of their waits. A refusal by one gives back what the earlier ones handed out
/// (their tickets are destroyed) and asks nothing of the later ones. The ticket tells each guard's ticket
/// how the attempt ended, in the same order.
template <class... Guards>
class GuardSet {
 public:
  /// The tickets of every guard, travelling together.
  class Ticket {
   public:
    /// Whether begin may answer a wait: one of the tickets may.
    static constexpr bool may_wait = (detail::may_wait<detail::ticket_t<Guards>>::value || ...);

    explicit Ticket(detail::ticket_t<Guards>&&... tickets) : tickets_(std::move(tickets)...) {}

    /// Calls begin on each ticket that has one, in order, from the first that has not answered go yet.
    /// Returns the first wait or refusal (the tickets that began give back when this ticket is destroyed),
    /// or go.
    [[nodiscard]] Begin begin(const Attempt& attempt, Waker* waker) {
      Begin answer = Begin::go();
      std::size_t index = 0;
      std::apply([&](auto&... ticket) { (void)(begin_one(ticket, index++, attempt, waker, answer) && ...); }, tickets_);
      return answer;
    }
    /// Tells every ticket the attempt succeeded with `answer`. When one throws, the tickets after it are
    /// still told; then the first exception is rethrown.
    template <class... Answer>
    void succeeded(const Answer&... answer) {
      tell_each([&](auto& ticket) { ticket.succeeded(answer...); });
    }
    /// Tells every ticket the attempt failed with `failure`. When one throws, the tickets after it are
    /// still told; then the first exception is rethrown.
    void failed(const Failure& failure) {
      tell_each([&](auto& ticket) { ticket.failed(failure); });
    }
    /// Tells every ticket its request lost (see detail::tell_lost), in the same way.
    void lost() {
      tell_each([&](auto& ticket) { detail::tell_lost(ticket); });
    }

   private:
    template <class Tell>
    void tell_each(const Tell& tell) {
#if LLMRETRY_HAS_EXCEPTIONS
      std::exception_ptr first;
      const auto tell_one = [&](auto& ticket) {
        try {
          tell(ticket);
        } catch (...) {
          if (!first) first = std::current_exception();
        }
      };
      std::apply([&](auto&... ticket) { (tell_one(ticket), ...); }, tickets_);
      if (first) std::rethrow_exception(first);
#else
      std::apply([&](auto&... ticket) { (tell(ticket), ...); }, tickets_);
#endif
    }

    /// Begins the ticket at `index` unless it began already. Returns true when it goes.
    template <class One>
    bool begin_one(One& ticket, std::size_t index, const Attempt& attempt, Waker* waker, Begin& answer) {
      if (index < begun_) return true;
      answer = detail::begin_ticket(ticket, attempt, waker);
      if (answer.kind() != Begin::Kind::go) return false;
      begun_ = index + 1;
      return true;
    }

    std::tuple<detail::ticket_t<Guards>...> tickets_;
    std::size_t begun_ = 0;  ///< the tickets before this one answered go
  };

  /// Holds each guard: by reference when given as a variable, by value when given as a temporary.
  explicit GuardSet(Guards&&... guards) : guards_(std::forward<Guards>(guards)...) {}

  /// Admits the attempt by every guard in order. Returns the tickets and the longest wait, or the first
  /// refusal.
  [[nodiscard]] Admission<Ticket> admit(const Attempt& attempt) { return admit_from<0>(attempt, {}); }

 private:
  template <std::size_t I, class... Held>
  Admission<Ticket> admit_from(const Attempt& attempt, std::chrono::milliseconds wait, Held&&... held) {
    if constexpr (I == sizeof...(Guards)) {
      return Admission<Ticket>::go(Ticket{std::move(held)...}, wait);
    } else {
      auto admission = std::get<I>(guards_).admit(attempt);
      if (!admission.admitted()) return Admission<Ticket>::refuse(admission.refusal());
      return admit_from<I + 1>(attempt, std::max(wait, admission.wait()), std::move(held)...,
                               std::move(admission.ticket()));
    }
  }

  std::tuple<Guards...> guards_;
};

/// Returns one guard made of `guards`, admitted in the order given (put the cheapest refusals first:
/// a circuit breaker, a retry budget, then pacing). Variables are held by reference and must outlive
/// it; temporaries (such as `deployment.pace(cost)`) are moved in.
template <class... Guards>
[[nodiscard]] GuardSet<Guards...> guards(Guards&&... guards) {
  static_assert(sizeof...(Guards) > 0, "guards() needs at least one guard");
  static_assert((detail::is_guard<std::remove_reference_t<Guards>>::value && ...),
                "each argument of guards() must have admit(const Attempt&)");
  return GuardSet<Guards...>(std::forward<Guards>(guards)...);
}

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_GUARD_HPP
