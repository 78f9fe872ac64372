#ifndef LLMRETRY_ADMISSION_DEPLOYMENT_HPP
#define LLMRETRY_ADMISSION_DEPLOYMENT_HPP

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "../attempt.hpp"
#include "../clock.hpp"
#include "../decision.hpp"
#include "../detail/config.hpp"
#include "../failure.hpp"
#include "../guard.hpp"
#include "../http/rate_limits.hpp"
#include "../version.hpp"
#include "concurrency.hpp"
#include "limits.hpp"
#include "priority.hpp"
#include "rate_limiter.hpp"
#include "settlement.hpp"
#include "shared_pacing.hpp"

LLMRETRY_BEGIN_NAMESPACE

namespace detail {
template <class T, class = void>
struct has_headers : std::false_type {};
template <class T>
struct has_headers<T, std::void_t<decltype(parse_rate_limits(std::declval<const T&>().headers,
                                                             std::chrono::system_clock::time_point{}))>>
    : std::true_type {};
/// An answer that says itself what it used and what limits were reported (a simulated one, or one whose
/// headers and body its client has read already): members `usage` (std::optional<Cost>) and `rate_limits`
/// (RateLimits).
template <class T, class = void>
struct says_usage_and_limits : std::false_type {};
template <class T>
struct says_usage_and_limits<T, std::void_t<decltype(std::optional<Cost>(std::declval<const T&>().usage)),
                                            decltype(RateLimits(std::declval<const T&>().rate_limits))>>
    : std::true_type {};
}  // namespace detail

/// How a deployment learns the provider's limits besides what it was configured with.
enum class Learning {
  from_headers,  ///< from each answer's rate-limit headers (OpenAI, Azure, Anthropic) and each 429's wait
  adaptive,      ///< also slows down on every 429 (x 0.7) and recovers slowly: providers that send no
                 ///< rate-limit headers (Gemini)
};

/// How one deployment (a provider, a model and a key) is paced.
struct DeploymentOptions {
  std::string name;                ///< for reports and metrics, such as "openai/gpt-4o-mini"
  Limits limits;                   ///< configured limits; unset dimensions are learned from the provider's headers
  std::optional<int> concurrency;  ///< the most calls in flight at once; empty: no limit
  Learning learning = Learning::from_headers;
  /// The most a call waits for capacity (rate, then a slot) before it is refused with
  /// StopReason::no_capacity; empty: for rate, as long as its deadline and wait budget allow; for a slot,
  /// as long as its deadline allows (a wait for a slot is not counted in the wait budget).
  std::optional<std::chrono::milliseconds> max_queue_wait;
  /// The clock of the pacing and of its waits for a slot; empty: the real one. A virtual-time driver passes
  /// its own, and then its waits must move it (testing::FakeSleep{clock}): with the real sleep, a manual
  /// clock never reaches the end of a wait.
  Clock clock;
  /// The wall clock for reset times the provider gives as dates; empty: the real one.
  WallClock wall_clock;
  /// Reads the actual usage from a successful answer's body (such as llmretry::json::usage_of), so that
  /// the reservation is settled with it; empty: the estimate stays charged.
  UsageReader read_usage;
  /// The pacing state shared with the other processes that pace this deployment (such as a
  /// redis::RateLimiter): reservations are made there and every attempt's end is told there, so that what
  /// one process learns or is refused, all hear; empty: this process paces alone. The deployment's own
  /// RateLimiter still learns every answer, for when_shared_fails.
  std::shared_ptr<SharedPacing> shared;
  /// What an attempt does when `shared` cannot be reached: refused (fail_closed), or paced by this process
  /// alone (fail_open).
  SharedFailure when_shared_fails = SharedFailure::fail_closed;
  /// What calls of each Priority leave to the classes above (pace(estimate, priority)). Every process
  /// that shares one pacing state should give it the same.
  PriorityOptions priorities;
  /// How capacity is shared out between the tenants of pace(estimate, priority, tenant): by this process's
  /// limiter (a shared pacing state has its own, such as redis::RateLimiter's).
  TenantShares tenants;
};

/// One deployment's pacing, shared by every call to it: a RateLimiter (requests and tokens per minute,
/// per day...) or the SharedPacing of every process, an optional ConcurrencyLimit, and what the provider
/// taught it. Create one per (provider, model, key) and share it; `pace(estimate)` gives the guard of one
/// call for call_with_retry.
/// The building blocks (reserve, succeeded, failed) are public so that other drivers (a simulator in
/// virtual time, a queue worker) pace the same way. Thread-safe.
class Deployment {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  /// Throws std::invalid_argument naming the field when a limit or the concurrency makes no sense.
  explicit Deployment(DeploymentOptions options)
      : options_(std::move(options)),
        limiter_(options_.limits, options_.tenants),
        concurrency_(options_.concurrency ? std::make_unique<ConcurrencyLimit>(*options_.concurrency) : nullptr) {
    if (options_.max_queue_wait && *options_.max_queue_wait < std::chrono::milliseconds::zero())
      detail::throw_invalid_argument("DeploymentOptions::max_queue_wait must not be negative");
    options_.priorities.validate();
  }

  /// Returns the deployment's name.
  [[nodiscard]] const std::string& name() const noexcept { return options_.name; }
  /// Returns the options it was made with.
  [[nodiscard]] const DeploymentOptions& options() const noexcept { return options_; }
  /// Returns the time on the deployment's clock.
  [[nodiscard]] time_point now() const { return now_on(options_.clock); }
  /// Returns the rate limiter.
  [[nodiscard]] RateLimiter& limiter() noexcept { return limiter_; }
  [[nodiscard]] const RateLimiter& limiter() const noexcept { return limiter_; }
  /// Returns the concurrency limit, or null when there is none.
  [[nodiscard]] ConcurrencyLimit* concurrency() noexcept { return concurrency_.get(); }

  /// Returns a number for each call held back (Priority), one more each time: the same sequence on every run.
  [[nodiscard]] std::uint64_t hold_seed() noexcept { return holds_.fetch_add(1, std::memory_order_relaxed) + 1; }

  /// Returns what the last reservation on the shared pacing state said of it (SharedPacing::snapshot);
  /// nullopt without one, or before it said anything.
  [[nodiscard]] std::optional<SharedSnapshot> shared_snapshot() const noexcept {
    return options_.shared ? options_.shared->snapshot() : std::nullopt;
  }

  /// Returns how many exchanges with the shared pacing state failed (see DeploymentOptions::shared).
  [[nodiscard]] std::int64_t shared_failures() const noexcept {
    return shared_failures_.load(std::memory_order_relaxed);
  }

  /// Reserves `estimate` at `now`, waiting at most `max_wait` (and max_queue_wait), yielding as
  /// `precedence` says: on the shared pacing state when there is one; when it cannot be reached, an
  /// unavailable reservation (fail_closed) or one of this process's limiter (fail_open).
  [[nodiscard]] Reservation reserve(const Cost& estimate, time_point now,
                                    std::optional<std::chrono::milliseconds> max_wait = std::nullopt,
                                    const Precedence& precedence = {}) noexcept {
    const auto wait = shorter_wait(max_wait, options_.max_queue_wait);
    if (options_.shared) {
      Reservation reservation;
      if (with_shared([&] { reservation = options_.shared->reserve(estimate, now, wait, precedence); }))
        return reservation;
      if (options_.when_shared_fails == SharedFailure::fail_closed) {
        reservation = detail::ReservationAccess::make(estimate);
        detail::ReservationAccess::refuse(reservation, ReservationStatus::unavailable, now, std::nullopt);
        return reservation;
      }
    }
    return limiter_.reserve(estimate, now, wait, precedence);
  }

  /// Gives back what `reservation` holds: the attempt was not sent.
  void cancel(Reservation& reservation) noexcept {
    if (!reservation.open()) return;
    if (reservation.shared()) (void)with_shared([&] { options_.shared->finish(reservation, AttemptEnd{}, now()); });
    else limiter_.cancel(reservation);
  }

  /// Records a successful attempt at `now`: learns from `reported` (the answer's rate-limit headers),
  /// and settles `reservation` with the `usage` the answer reported (the estimate stays charged without).
  void succeeded(Reservation& reservation, const std::optional<Cost>& usage, const RateLimits* reported,
                 time_point now) noexcept {
    if (reported != nullptr) limiter_.learn(*reported, now);
    AttemptEnd end;
    end.charge = usage.value_or(reservation.cost());
    end.reported = reported;
    finish(reservation, end, now);
  }

  /// Records a failed attempt at `now`. A 429 pauses every call of the deployment for the provider's
  /// wait and sets every limit's level back by it (RateLimiter::set_back), slows the rate down under
  /// Learning::adaptive, and keeps only the request charged (no tokens
  /// were used); a request never sent gives everything back; one refused without work keeps the request;
  /// one that may have been processed keeps its estimate (it may have been billed).
  void failed(Reservation& reservation, const Failure& failure, time_point now) noexcept {
    AttemptEnd end;
    if (failure.kind == FailureKind::rate_limited) {
      if (failure.provider_wait) {
        const auto wait = at_most_a_day(*failure.provider_wait);
        limiter_.pause_until(now + wait);
        limiter_.set_back(wait, now);
        end.refused_for = wait;
      }
      if (options_.learning == Learning::adaptive) {
        (void)limiter_.slow_down(now);
        end.slow_down = true;  // the shared state counts one slow-down per interval for every process
      }
    }
    end.charge = charge_after(failure, reservation.cost());
    finish(reservation, end, now);
  }

  class Pacing;
  /// Returns the guard that paces one call of estimated cost `estimate`, class `priority` and `tenant` of
  /// `weight` (empty: none; see Precedence::tenant) through this deployment: pass it to call_with_retry.
  /// The deployment must outlive it.
  [[nodiscard]] Pacing pace(const Cost& estimate, Priority priority = Priority::interactive,
                            std::string_view tenant = {}, double weight = 1.0);

 private:
  /// Runs `exchange` with the shared state. Returns false, the failure counted, when it threw.
  template <class Exchange>
  bool with_shared(Exchange&& exchange) noexcept {
#if LLMRETRY_HAS_EXCEPTIONS
    try {
      std::forward<Exchange>(exchange)();
    } catch (...) {
      shared_failures_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
#else
    std::forward<Exchange>(exchange)();
#endif
    return true;
  }

  /// Tells `end` where `reservation` was made: the shared state (its failures counted, never thrown), or
  /// this process's limiter, which has learned `end.reported` already.
  void finish(Reservation& reservation, const AttemptEnd& end, time_point now) noexcept {
    if (reservation.shared()) {
      (void)with_shared([&] { options_.shared->finish(reservation, end, now); });
      return;
    }
    if (options_.shared && end.has_news()) {
      // Paced here while the shared state was out of reach: what the answer taught goes there too.
      Reservation none;
      (void)with_shared([&] { options_.shared->finish(none, end, now); });
    }
    if (end.charge) limiter_.settle(reservation, *end.charge, now);
    else limiter_.cancel(reservation);
  }

  DeploymentOptions options_;
  RateLimiter limiter_;
  std::unique_ptr<ConcurrencyLimit> concurrency_;
  std::atomic<std::int64_t> shared_failures_{0};
  std::atomic<std::uint64_t> holds_{0};
};

/// The guard of one call through a Deployment. Before each attempt it reserves the estimate (the wait
/// until capacity comes is a step of the call's driver), then takes a concurrency slot just before
/// sending, so that waiting for rate holds no slot; a slot not free is a wait in line (WaitReason::slot),
/// never a blocked thread. A call of a class below interactive (Priority) whose reservation is held back
/// is admitted holding nothing, and its ticket's begin asks again each time capacity may be free
/// (waits of WaitReason::capacity, bounded by max_queue_wait and the deadline, not counted in the
/// policy's wait budget, like a wait for a slot); held back PriorityOptions::longest_hold in all, it
/// reserves as an interactive call. After the attempt it settles: the answer's usage and
/// rate-limit headers (read from its `body` and `headers` members, when it has them, such as
/// curl::Response) on success; what the failure says was used otherwise. Refuses with
/// StopReason::no_capacity a cost above a limit or a wait beyond max_queue_wait, with
/// StopReason::deadline a wait beyond the call's deadline, and with StopReason::pacing_unavailable when
/// the shared pacing state is out of reach and the deployment fails closed.
class Deployment::Pacing {
 public:
  /// What one attempt holds: its reservation and its slot (or its place in line for one), given back or
  /// settled however it ends.
  class Ticket {
   public:
    /// What a held-back attempt asks again with.
    struct Hold {
      Cost estimate;
      Precedence precedence;  ///< how it yields until `promoted`, its tenant in `tenant`
      std::string tenant;
      time_point admitted;  ///< when it was first held back
      time_point ask_at;    ///< when asking again may find capacity
      time_point promoted;  ///< from when it reserves as an interactive call
      std::uint64_t seed;   ///< spreads its asks from those of the calls held back with it (Deployment::hold_seed)
      int asked = 0;        ///< how many times it asked again and was held back
    };

    Ticket(Deployment& deployment, Reservation reservation, std::optional<std::chrono::milliseconds> slot_wait,
           std::optional<Hold> hold = std::nullopt)
        : deployment_(&deployment),
          reservation_(std::move(reservation)),
          slot_wait_(slot_wait),
          hold_(std::move(hold)) {}
    Ticket(Ticket&& other) noexcept
        : deployment_(other.deployment_),
          reservation_(std::move(other.reservation_)),
          slot_wait_(other.slot_wait_),
          hold_(std::move(other.hold_)),
          slot_(std::exchange(other.slot_, false)),
          line_(std::move(other.line_)) {}
    Ticket& operator=(Ticket&&) = delete;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket() {
      deployment_->cancel(reservation_);
      if (line_ && !deployment_->concurrency()->withdraw(*line_)) slot_ = true;  // granted as it left
      release();
    }

    /// Takes a concurrency slot: at once when one is free and nobody waits; otherwise it gets in line and
    /// answers a wait of at most the call's time left and what max_queue_wait leaves (`waker`, when not
    /// null, is told when the slot came; without one, waits of at most detail::slot_poll, to look again).
    /// Begun again after the wait, it answers go once the slot came, the rest of the wait, or the refusal
    /// (deadline or no_capacity) once the wait ran out. The waker is the one given to the first begin.
    [[nodiscard]] Begin begin(const Attempt& attempt, Waker* waker) {
      if (hold_)
        if (const std::optional<Begin> answer = reserve_again(attempt)) return *answer;
      ConcurrencyLimit* limit = deployment_->concurrency();
      if (limit == nullptr || slot_) return Begin::go();
      if (!line_) {
        const std::optional<std::chrono::milliseconds> wait = shorter_wait(slot_wait_, attempt.time_left);
        const StopReason reason = reason_for_wait(attempt.time_left, slot_wait_);
        if (limit->try_acquire()) return took_slot();
        if (wait && *wait <= std::chrono::milliseconds::zero()) return Begin::refuse(refusal(reason));
        auto line = std::make_unique<Line>(waker, reason);
        if (wait) {
          const time_point now = deployment_->now();
          const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(time_point::max() - now);
          line->until = now + std::min(*wait, room);
        }
        if (limit->enqueue(*line)) return took_slot();
        line_ = std::move(line);  // only a Line in line is withdrawn by the destructor
        return wait_answer(wait.value_or(std::chrono::milliseconds::max()));
      }
      if (line_->granted_slot.load(std::memory_order_acquire)) return took_slot();
      if (!line_->until) return wait_answer(std::chrono::milliseconds::max());
      if (const time_point now = deployment_->now(); now < *line_->until)
        return wait_answer(std::chrono::ceil<std::chrono::milliseconds>(*line_->until - now));
      if (!limit->withdraw(*line_)) return took_slot();  // granted as the wait ran out
      const StopReason reason = line_->reason;
      line_.reset();
      return Begin::refuse(refusal(reason));
    }

    /// Settles with the answer's usage and learns from its rate-limit headers; an answer with `usage` and
    /// `rate_limits` members says them itself.
    template <class Answer>
    void succeeded(const Answer& answer) {
      if constexpr (detail::says_usage_and_limits<Answer>::value) {
        deployment_->succeeded(reservation_, answer.usage, &answer.rate_limits, deployment_->now());
      } else {
        const std::optional<Cost> usage = reported_usage(answer, deployment_->options().read_usage);
        std::optional<RateLimits> reported;
        if constexpr (detail::has_headers<Answer>::value)
          reported = parse_rate_limits(answer.headers, now_on(deployment_->options().wall_clock));
        deployment_->succeeded(reservation_, usage, reported ? &*reported : nullptr, deployment_->now());
      }
      release();
    }
    /// Settles a call that returned nothing: the estimate stays charged.
    void succeeded() {
      deployment_->succeeded(reservation_, std::nullopt, nullptr, deployment_->now());
      release();
    }
    /// Records the failure (see Deployment::failed).
    void failed(const Failure& failure) {
      deployment_->failed(reservation_, failure, deployment_->now());
      release();
    }

   private:
    /// Asks again for the capacity a held-back attempt waits for, once it may be free. Returns the wait or
    /// the refusal to answer, or nullopt once the reservation is granted and starts now.
    std::optional<Begin> reserve_again(const Attempt& attempt) {
      Hold& hold = *hold_;
      const time_point now = deployment_->now();
      const std::optional<std::chrono::milliseconds> max_queue_wait = deployment_->options().max_queue_wait;
      std::optional<std::chrono::milliseconds> queue_left;
      if (max_queue_wait)
        queue_left = std::max(std::chrono::milliseconds::zero(),
                              *max_queue_wait - std::chrono::ceil<std::chrono::milliseconds>(now - hold.admitted));
      const std::optional<std::chrono::milliseconds> bound = shorter_wait(attempt.time_left, queue_left);
      const StopReason reason = reason_for_wait(attempt.time_left, queue_left);
      if (!reservation_.open()) {
        if (now < hold.ask_at) return held(hold.ask_at, now, bound, reason);
        Precedence precedence = now >= hold.promoted ? promoted(hold.precedence) : hold.precedence;
        precedence.tenant = hold.tenant;
        Reservation again = deployment_->reserve(hold.estimate, now, bound, precedence);
        if (again.status() == ReservationStatus::held_back) {  // never once promoted
          hold.ask_at = std::min(std::max(again.start(), now + spread(hold)), hold.promoted);
          if (!bound || hold.ask_at - now <= *bound) return held(hold.ask_at, now, bound, reason);
        }
        if (!again.granted()) return Begin::refuse(refusal_of(again, now, attempt.time_left, queue_left));
        reservation_ = std::move(again);
      }
      if (reservation_.start() > now) return Begin::wait_at_most(reservation_.wait_after(now), WaitReason::capacity);
      slot_wait_ = queue_left;
      hold_.reset();
      return std::nullopt;
    }

    /// Returns how long after now `hold` asks again at the soonest: from 10 ms, twice as long each time it was
    /// held back again, up to 1 s, each between half and all of it (a hash of its seed and the count), so
    /// that the calls held back together do not all ask again at the instant capacity frees.
    [[nodiscard]] static std::chrono::milliseconds spread(Hold& hold) noexcept {
      const int doublings = std::min(hold.asked++, 7);
      const std::int64_t most = std::min<std::int64_t>(10LL << doublings, 1000);
      std::uint64_t mixed = hold.seed ^ (static_cast<std::uint64_t>(hold.asked) << 32U);
      mixed = (mixed ^ (mixed >> 33U)) * 0xff51afd7ed558ccdULL;
      mixed ^= mixed >> 33U;
      return std::chrono::milliseconds{most / 2 +
                                       static_cast<std::int64_t>(mixed % static_cast<std::uint64_t>(most / 2 + 1))};
    }

    /// Returns the wait until `until` (at least 1 ms) of a held-back attempt, or its refusal for `reason`
    /// when that passes `bound`.
    static Begin held(time_point until, time_point now, std::optional<std::chrono::milliseconds> bound,
                      StopReason reason) {
      const auto wait =
          std::max(std::chrono::milliseconds{1}, std::chrono::ceil<std::chrono::milliseconds>(until - now));
      if (bound && wait > *bound) {
        Failure failure = Failure::of(FailureKind::rate_limited, Sent::not_sent);
        failure.provider_wait = wait;
        return Begin::refuse(Refusal{reason, failure, LimitType::unknown});
      }
      return Begin::wait_at_most(wait, WaitReason::capacity);
    }

    /// A place in line for a slot: on the heap, so that it stays put while the ticket moves.
    struct Line final : ConcurrencyLimit::Waiter {
      Line(Waker* to_wake, StopReason why) noexcept : waker(to_wake), reason(why) {}
      void granted() override {
        Waker* const to_wake = waker;  // read first: once granted_slot is seen, the driver may free *this
        granted_slot.store(true, std::memory_order_release);
        if (to_wake != nullptr) to_wake->wake();
      }
      Waker* waker;
      StopReason reason;                ///< why the call stops if the wait runs out
      std::optional<time_point> until;  ///< when the wait runs out, on the deployment's clock; none: never
      std::atomic<bool> granted_slot{false};
    };

    /// Returns a wait of at most `wait`, or of detail::slot_poll for a driver that cannot be woken.
    [[nodiscard]] Begin wait_answer(std::chrono::milliseconds wait) const noexcept {
      return Begin::wait_at_most(line_->waker != nullptr ? wait : std::min(wait, detail::slot_poll));
    }
    Begin took_slot() noexcept {
      line_.reset();
      slot_ = true;
      return Begin::go();
    }
    static Refusal refusal(StopReason reason) noexcept {
      return Refusal{reason, Failure::of(FailureKind::rate_limited, Sent::not_sent), LimitType::concurrency};
    }
    void release() {
      if (std::exchange(slot_, false)) deployment_->concurrency()->release();
    }

    Deployment* deployment_;
    Reservation reservation_;
    std::optional<std::chrono::milliseconds> slot_wait_;
    std::optional<Hold> hold_;  ///< set while a held-back attempt asks again
    bool slot_ = false;
    std::unique_ptr<Line> line_;  ///< set while it waits in line
  };

  Pacing(Deployment& deployment, const Cost& estimate, Priority priority = Priority::interactive,
         std::string_view tenant = {}, double weight = 1.0)
      : deployment_(&deployment),
        estimate_(estimate),
        precedence_(deployment.options().priorities.precedence(priority)),
        tenant_(tenant) {
    precedence_.weight = weight;
  }

  /// Reserves the estimate for the attempt. Returns the ticket and the wait until capacity comes, or the
  /// refusal: no_capacity for a cost above a limit or a wait beyond max_queue_wait, deadline for a wait
  /// beyond the call's time left, pacing_unavailable for shared pacing state out of reach (fail_closed). A
  /// hedge (Attempt::hedge) is admitted only when capacity is there now: it reserves nothing otherwise.
  [[nodiscard]] Admission<Ticket> admit(const Attempt& attempt) {
    const time_point now = deployment_->now();
    const DeploymentOptions& options = deployment_->options();
    Precedence precedence =
        options.priorities.longest_hold <= std::chrono::milliseconds::zero() ? promoted(precedence_) : precedence_;
    precedence.tenant = tenant_;
    Reservation reservation = deployment_->reserve(
        estimate_, now, attempt.hedge ? std::chrono::milliseconds::zero() : attempt.time_left, precedence);
    if (reservation.status() == ReservationStatus::held_back && !attempt.hedge) {
      const time_point until = now + options.priorities.longest_hold;
      Ticket::Hold hold{
          estimate_, precedence_, tenant_, now, std::min(reservation.start(), until), until, deployment_->hold_seed()};
      return Admission<Ticket>::go(
          Ticket{*deployment_, std::move(reservation), options.max_queue_wait, std::move(hold)});
    }
    if (!reservation.granted())
      return Admission<Ticket>::refuse(
          refusal_of(reservation, now, attempt.time_left, deployment_->options().max_queue_wait));
    const auto wait = reservation.wait_after(now);
    std::optional<std::chrono::milliseconds> slot_wait = deployment_->options().max_queue_wait;
    if (slot_wait) slot_wait = std::max(std::chrono::milliseconds::zero(), *slot_wait - wait);
    return Admission<Ticket>::go(Ticket{*deployment_, std::move(reservation), slot_wait}, wait);
  }

 private:
  Deployment* deployment_;
  Cost estimate_;
  Precedence precedence_;  ///< its class's, and the tenant's weight
  std::string tenant_;
};

inline Deployment::Pacing Deployment::pace(const Cost& estimate, Priority priority, std::string_view tenant,
                                           double weight) {
  return Pacing{*this, estimate, priority, tenant, weight};
}

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_ADMISSION_DEPLOYMENT_HPP
