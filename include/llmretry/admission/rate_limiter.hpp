#ifndef LLMRETRY_ADMISSION_RATE_LIMITER_HPP
#define LLMRETRY_ADMISSION_RATE_LIMITER_HPP

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "../detail/config.hpp"
#include "../detail/saturate.hpp"
#include "../detail/spin_lock.hpp"
#include "../http/rate_limits.hpp"
#include "../version.hpp"
#include "limits.hpp"
#include "priority.hpp"

LLMRETRY_BEGIN_NAMESPACE

namespace detail {
struct ReservationAccess;
}  // namespace detail

/// How a reservation ended.
enum class ReservationStatus {
  granted,      ///< the call may start at start(); cancel or settle it later
  too_large,    ///< the cost exceeds a limit: it can never fit (limited_by() says which)
  too_long,     ///< it would have to wait longer than the caller allows (start() says until when)
  unavailable,  ///< the shared pacing state could not be reached (SharedPacing): nothing is held
  held_back,    ///< a reservation that may not reserve ahead (Precedence::ahead false) finds too little free
                ///< now: nothing is held; start() says when asking again may find enough
};

/// Returns the snake_case name of a status, such as "too_large".
[[nodiscard]] constexpr const char* to_string(ReservationStatus status) noexcept {
  switch (status) {
    case ReservationStatus::granted: return "granted";
    case ReservationStatus::too_large: return "too_large";
    case ReservationStatus::too_long: return "too_long";
    case ReservationStatus::unavailable: return "unavailable";
    case ReservationStatus::held_back: return "held_back";
  }
  return "unknown";
}

/// Capacity a call reserved on every limited dimension at once: when it may start, and what it holds
/// until it is cancelled (given back) or settled (the actual usage charged instead). Movable, not copyable.
class Reservation {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  Reservation() = default;
  Reservation(Reservation&& other) noexcept { *this = std::move(other); }
  Reservation& operator=(Reservation&& other) noexcept {
    start_ = other.start_;
    cost_ = other.cost_;
    held_ = other.held_;
    generation_ = other.generation_;
    status_ = other.status_;
    limited_by_ = other.limited_by_;
    paced_ = other.paced_;
    shared_ = other.shared_;
    open_ = std::exchange(other.open_, false);
    return *this;
  }
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;
  ~Reservation() = default;

  /// Returns how the reservation ended.
  [[nodiscard]] ReservationStatus status() const noexcept { return status_; }
  /// Returns true when the capacity was granted.
  [[nodiscard]] bool granted() const noexcept { return status_ == ReservationStatus::granted; }
  /// Returns when the call may start (granted), would have started (too_long), or may ask again (held_back).
  [[nodiscard]] time_point start() const noexcept { return start_; }
  /// Returns how long after `now` the call may start; zero when it may start at once.
  [[nodiscard]] std::chrono::milliseconds wait_after(time_point now) const noexcept {
    return start_ > now ? std::chrono::ceil<std::chrono::milliseconds>(start_ - now)
                        : std::chrono::milliseconds::zero();
  }
  /// Returns the cost reserved.
  [[nodiscard]] const Cost& cost() const noexcept { return cost_; }
  /// Returns the dimension that decided: the one the cost exceeds (too_large), or the one that made the
  /// call wait longest (granted, too_long); nullopt when nothing made it wait.
  [[nodiscard]] std::optional<Dimension> limited_by() const noexcept {
    if (limited_by_ == no_dimension) return std::nullopt;
    return static_cast<Dimension>(limited_by_);
  }
  /// Returns true while the capacity is held: granted, and neither cancelled nor settled yet.
  [[nodiscard]] bool open() const noexcept { return open_; }
  /// Returns true when it was made on pacing state shared with other processes (SharedPacing), false when
  /// by this process's RateLimiter.
  [[nodiscard]] bool shared() const noexcept { return shared_; }

 private:
  friend class RateLimiter;
  friend struct detail::ReservationAccess;
  explicit Reservation(const Cost& cost) noexcept : cost_(cost) {}

  static constexpr std::uint8_t no_dimension = 0xff;  ///< limited_by_ when no dimension decided

  /// Sets the dimension that decided, or none.
  void limit_by(std::optional<Dimension> dimension) noexcept {
    limited_by_ = dimension ? static_cast<std::uint8_t>(*dimension) : no_dimension;
  }

  time_point start_{};
  Cost cost_{0, 0, 0};
  std::array<std::int64_t, dimension_count> held_{};  ///< nanoseconds of capacity held per dimension
  std::uint64_t generation_ = 0;  ///< the limiter's limits when it was reserved (RateLimiter::generation_)
  // The small fields last, side by side, so that making a reservation writes them together.
  ReservationStatus status_ = ReservationStatus::too_large;
  std::uint8_t limited_by_ = no_dimension;  ///< a Dimension, or no_dimension
  std::uint8_t paced_ = 0;                  ///< the dimensions paced when it was reserved, one bit each
  bool shared_ = false;
  bool open_ = false;
};

namespace detail {

/// What a limiter other than RateLimiter (one whose state lives elsewhere) writes into the reservations it
/// makes and reads back when they end.
struct ReservationAccess {
  using time_point = Reservation::time_point;
  /// Returns a reservation of `cost` on shared state that holds nothing: too_large until granted or refused
  /// otherwise.
  [[nodiscard]] static Reservation make(const Cost& cost) noexcept {
    Reservation reservation(cost);
    reservation.shared_ = true;
    return reservation;
  }
  /// Returns the nanoseconds of capacity `reservation` holds per dimension, to fill in before granting it.
  [[nodiscard]] static std::array<std::int64_t, dimension_count>& held(Reservation& reservation) noexcept {
    return reservation.held_;
  }
  /// Ends `reservation` with `status` (not granted): it holds nothing.
  static void refuse(Reservation& reservation, ReservationStatus status, time_point start,
                     std::optional<Dimension> limited_by) noexcept {
    reservation.status_ = status;
    reservation.start_ = start;
    reservation.limit_by(limited_by);
    reservation.held_ = {};
  }
  /// Grants `reservation` from `start`: it is open until closed.
  static void grant(Reservation& reservation, time_point start, std::optional<Dimension> limited_by) noexcept {
    reservation.status_ = ReservationStatus::granted;
    reservation.start_ = start;
    reservation.limit_by(limited_by);
    reservation.open_ = true;
  }
  /// Closes `reservation`. Returns true when it was open (what it holds is the caller's to give back).
  static bool close(Reservation& reservation) noexcept { return std::exchange(reservation.open_, false); }
  /// Marks `reservation` as made on shared state (true) or by a RateLimiter (false): a SharedPacing that
  /// keeps its state in a RateLimiter hands out that limiter's reservations marked shared, and unmarks one
  /// to settle or cancel it there.
  static void mark_shared(Reservation& reservation, bool shared) noexcept { reservation.shared_ = shared; }
};

}  // namespace detail

/// Counters of a RateLimiter since it was made, for reports and metrics.
struct RateLimiterStats {
  std::int64_t granted = 0;          ///< reservations granted
  std::int64_t refused = 0;          ///< reservations refused (too large or too long)
  std::int64_t tokens_reserved = 0;  ///< tokens reserved by granted reservations (estimates)
  std::int64_t tokens_used = 0;      ///< tokens charged when settled (actual usage)
  std::int64_t tokens_released = 0;  ///< tokens given back by cancelled reservations
  std::int64_t held_back = 0;        ///< reservations held back for calls of higher classes (Precedence)
};

/// Admits calls at the rate a provider can take, on several dimensions at once (requests and tokens per
/// minute, input and output tokens, per day), with continuous refill and a burst per dimension. Each
/// dimension is a generic cell rate algorithm (GCRA) over a "theoretical arrival time": a reservation
/// takes its cost from every dimension at once and says when the call may start.
/// Reservations may be cancelled (the capacity comes back) or settled with the actual usage (the
/// difference is refunded, an overrun charged up to the limit). It also learns: the provider's reported limits and
/// levels (learn), a deployment-wide pause after a 429 (pause_until), and a multiplicative slow-down
/// for providers that report nothing (slow_down).
/// Thread-safe: every operation holds one lock for its whole length, so that each sees and leaves all the
/// limits and levels of every dimension together. Allocates only when made (the tenants' accounts); reads no
/// clock (every call takes `now`).
class RateLimiter {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  /// Slow-down factor on a 429 without rate-limit headers, in thousandths: the rate is multiplied by 0.7.
  static constexpr std::int64_t slow_down_per_mille = 700;
  /// Recovery after a slow-down: 1 % of the configured limit per second, back to it in at most 100 s.
  static constexpr std::int64_t recovery_per_mille_per_second = 10;
  /// The least time between two slow-downs, so that a burst of 429s from one overload counts once.
  static constexpr std::chrono::seconds slow_down_interval{1};

  /// A limiter with `limits`, sharing capacity between tenants as `shares` says; a dimension left unset is
  /// not paced until learn() reports a limit for it. Throws std::invalid_argument naming the dimension and
  /// field when a limit or a share makes no sense.
  explicit RateLimiter(const Limits& limits = {}, const TenantShares& shares = {}) : shares_(shares) {
    limits.validate();
    shares.validate();
    tenants_.resize(static_cast<std::size_t>(shares.max_tenants) + 1);  // the last one: "other"
    for (std::size_t i = 0; i < dimension_count; ++i)
      if (limits.by_dimension[i]) configure(i, *limits.by_dimension[i]);
  }
  RateLimiter(const RateLimiter&) = delete;
  RateLimiter& operator=(const RateLimiter&) = delete;
  RateLimiter(RateLimiter&&) = delete;
  RateLimiter& operator=(RateLimiter&&) = delete;
  ~RateLimiter() = default;

  /// Reserves `cost` on every limited dimension at `now`, yielding as `precedence` says. Returns a granted
  /// reservation saying when the call may start; too_large (holding nothing) when the cost exceeds a
  /// dimension's limit; too_long (holding nothing) when the start would be more than `max_wait` after
  /// `now`; held_back (holding nothing, start() when to ask again) when `precedence` may not reserve ahead
  /// and some dimension has not `cost` free now beyond the share of its burst kept free (a cost above
  /// what the burst leaves waits for a full bucket), or a pause holds every call. A reservation for a
  /// tenant past what it is owed yields as Precedence::tenant says.
  [[nodiscard]] Reservation reserve(const Cost& cost, time_point now,
                                    std::optional<std::chrono::milliseconds> max_wait = std::nullopt,
                                    const Precedence& precedence = {}) noexcept {
    Reservation reservation(cost);
    const std::int64_t now_ns = ns(now);
    const bool may_yield = !precedence.ahead || !precedence.tenant.empty();
    const Guard guard(lock_);
    if (!within_least_limits(cost) && too_large(reservation, cost)) return reservation;
    Yield yield;
    if (may_yield) {
      yield = yield_to_others(reservation, cost, now_ns, precedence);
      if (yield.held_back) return reservation;
    }
    if (slowed_) recover(now_ns);
    std::int64_t latest_cell = now_ns;
    unsigned waits = 0;  // the dimensions on which it waits, one bit each
    for (std::size_t k = 0; k < active_count_; ++k) {
      const std::size_t i = active_[k];
      Cell& cell = cells_[i];
      const std::int64_t charge = charge_of(cost, static_cast<Dimension>(i));
      if (charge == 0) continue;
      const std::int64_t starts = cell.take(charge, now_ns, reservation.held_[i]);
      if (starts > now_ns) {
        cell.note_start(starts);
        waits |= 1U << i;
      }
      if (starts > latest_cell) {
        latest_cell = starts;
        reservation.limit_by(static_cast<Dimension>(i));
      }
    }
    const std::int64_t start_ns = std::max(paused_until_, latest_cell);
    reservation.start_ = time_point{std::chrono::nanoseconds{start_ns}};
    // A bound beyond what nanoseconds hold (milliseconds::max(), centuries) bounds nothing.
    if (max_wait && *max_wait < detail::longest_wait &&
        start_ns - now_ns > std::chrono::nanoseconds{*max_wait}.count()) {
      refuse_too_long(reservation, waits);
      return reservation;
    }
    if (yield.tenant != nullptr)
      charge_tenant(*yield.tenant, reservation, detail::weight_in_thousandths(precedence.weight), yield.owed_weight,
                    now_ns);
    reservation.status_ = ReservationStatus::granted;
    reservation.generation_ = generation_.load(std::memory_order_relaxed);
    reservation.paced_ = paced_;
    reservation.open_ = true;
    ++stats_.granted;
    if ((cost.input_tokens | cost.output_tokens) != 0)
      stats_.tokens_reserved += charge_of(cost, Dimension::tokens_per_minute);
    return reservation;
  }

  /// Gives back what an open reservation holds (the call was not sent, or was refused without any
  /// work). Does nothing for a reservation that is not open.
  void cancel(Reservation& reservation) noexcept {
    if (!reservation.open_) return;
    const Guard guard(lock_);
    give_back(reservation);
    reservation.open_ = false;
    stats_.tokens_released += charge_of(reservation.cost_, Dimension::tokens_per_minute);
  }

  /// Charges `actual` (the usage the response reported at `now`) instead of the estimate an open
  /// reservation holds: an overrun is charged; what was not used is given back only on a dimension where no
  /// reservation granted on it (cancelled since or not) was to start after `now`, a wait for a pause alone not
  /// counted (capacity promised to calls that wait is already spoken for, and a provider whose window is full loses
  /// a refund, so crediting it then could overbook: it stays charged). A dimension is charged at most its limit: a
  /// provider refuses a call larger than its limit, so a usage reported above it (untrusted) counts as the limit.
  /// Does nothing for a reservation that is not open.
  /// Takes no lock when `actual` charges every paced dimension what the reservation holds and no limit changed since:
  /// there is nothing to adjust.
  void settle(Reservation& reservation, const Cost& actual, time_point now) noexcept {
    if (!reservation.open_) return;
    reservation.open_ = false;
    if ((actual.input_tokens | actual.output_tokens) != 0)
      tokens_used_.fetch_add(charge_of(actual, Dimension::tokens_per_minute), std::memory_order_relaxed);
    if (reservation.generation_ != generation_.load(std::memory_order_acquire) ||
        (actual != reservation.cost_ && !charges_as_reserved(reservation, actual)))
      adjust(reservation, actual, ns(now));
  }

  /// Holds every reservation made from now on until `until` at least, and raises every dimension's level
  /// so that the calls after it are spread at the limit's rate, not let go together: one refusal (a 429
  /// and its Retry-After) slows every caller of the deployment at once. An earlier `until` than the
  /// current pause changes nothing.
  void pause_until(time_point until) noexcept {
    const std::int64_t target = ns(until);
    const Guard guard(lock_);
    paused_until_ = std::max(paused_until_, target);
    for (std::size_t k = 0; k < active_count_; ++k)
      cells_[active_[k]].raise_to(target);  // after the pause, starts are spread at the limit's rate again
  }
  /// Moves every dimension's level back by `wait` at `now`: the provider refused a call that the limiter
  /// thought it had room for, and asked for `wait` more (a request reaches the provider a little after it
  /// is reserved, and what the provider refills while full in between is lost to it, not to the limiter).
  /// Refusals that arrive within `wait` of the last one counted are the same overload: they do not add up.
  void set_back(std::chrono::milliseconds wait, time_point now) noexcept {
    const std::int64_t now_ns = ns(now);
    const std::int64_t delta = std::chrono::nanoseconds{wait}.count();
    const Guard guard(lock_);
    if (now_ns < set_back_until_) return;
    set_back_until_ = now_ns + delta;
    for (std::size_t k = 0; k < active_count_; ++k) cells_[active_[k]].take_time(delta, now_ns);
  }

  /// Returns when the current pause ends (in the past when there is none).
  [[nodiscard]] time_point paused_until() const noexcept {
    const Guard guard(lock_);
    return time_point{std::chrono::nanoseconds{paused_until_}};
  }

  /// Follows what the provider reported on a response at `now`: a dimension with no limit yet takes the
  /// reported one (requests and tokens per minute, input and output tokens per minute), with a burst of
  /// one second's worth (limit / 60), since providers enforce per-minute limits over shorter slices; a configured
  /// limit above the reported one comes down to it; and a dimension's level is raised to what the provider
  /// says is left (at most `remaining` units free now; without `remaining`, full again after
  /// `reset_after`), so that capacity other clients of the same key used is not spent twice. Never lowers
  /// a level.
  void learn(const RateLimits& reported, time_point now) noexcept {
    const std::int64_t now_ns = ns(now);
    const Guard guard(lock_);
    learn_window(reported.requests, Dimension::requests_per_minute, now_ns);
    learn_window(reported.tokens, Dimension::tokens_per_minute, now_ns);
    learn_window(reported.input_tokens, Dimension::input_tokens_per_minute, now_ns);
    learn_window(reported.output_tokens, Dimension::output_tokens_per_minute, now_ns);
  }

  /// Lowers the rate of every dimension whose period is at most a minute to 0.7 of what it is (at least 1
  /// per period; per-day limits are left alone), at most
  /// once per slow_down_interval: for a 429 from a provider that sends no rate-limit headers. The rate
  /// then recovers by 1 % of its limit per second. Returns true when it slowed down.
  bool slow_down(time_point now) noexcept {
    const std::int64_t now_ns = ns(now);
    const std::int64_t interval = std::chrono::nanoseconds{slow_down_interval}.count();
    const Guard guard(lock_);
    if (last_slow_down_ != no_time && now_ns - last_slow_down_ < interval) return false;
    last_slow_down_ = now_ns;
    for (std::size_t k = 0; k < active_count_; ++k) {
      Cell& cell = cells_[active_[k]];
      if (cell.per_minute()) cell.slow_down(now_ns);
    }
    slowed_ = true;
    limits_changed();
    return true;
  }

  /// Returns the limit `dimension` paces with now (after learning and slowing down), or nullopt when it
  /// is not paced.
  [[nodiscard]] std::optional<Limit> limit(Dimension dimension) const noexcept {
    const Guard guard(lock_);
    const Cell& cell = cells_[static_cast<std::size_t>(dimension)];
    if (!cell.active()) return std::nullopt;
    return Limit{cell.limit(), std::chrono::duration_cast<std::chrono::milliseconds>(cell.period()), cell.burst()};
  }

  /// Returns the share of `dimension`'s burst free at `now`, in [0, 1]; 1 when it is not paced.
  [[nodiscard]] double headroom(Dimension dimension, time_point now) const noexcept {
    const Guard guard(lock_);
    const Cell& cell = cells_[static_cast<std::size_t>(dimension)];
    return cell.active() ? cell.headroom(ns(now)) : 1.0;
  }

  /// Returns how long a call taking one unit of every paced dimension would wait at `now`, the pause
  /// included: the queue ahead of a new call; zero when it could start at once.
  [[nodiscard]] std::chrono::milliseconds queue_wait(time_point now) const noexcept {
    const std::int64_t now_ns = ns(now);
    const Guard guard(lock_);
    std::int64_t start = std::max(now_ns, paused_until_);
    for (std::size_t k = 0; k < active_count_; ++k) start = std::max(start, cells_[active_[k]].start_of_one(now_ns));
    return std::chrono::ceil<std::chrono::milliseconds>(std::chrono::nanoseconds{start - now_ns});
  }

  /// Returns the counters so far.
  [[nodiscard]] RateLimiterStats stats() const noexcept {
    RateLimiterStats stats;
    {
      const Guard guard(lock_);
      stats = stats_;
    }
    stats.tokens_used = tokens_used_.load(std::memory_order_relaxed);
    return stats;
  }

 private:
  static constexpr std::int64_t no_time = std::numeric_limits<std::int64_t>::min();
  /// A least limit when no dimension of its kind is paced: any part is within it.
  static constexpr std::uint64_t no_least = std::numeric_limits<std::uint64_t>::max();

  static std::int64_t ns(time_point when) noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(when.time_since_epoch()).count();
  }

  /// One dimension: its limit, burst and period, and its theoretical arrival time (TAT), the instant at
  /// which everything taken so far has been refilled. Taking `n` units moves the TAT by n x period /
  /// limit; a call may start once the TAT is at most the burst's worth of time ahead of it.
  /// Not thread-safe: the limiter's lock guards every cell. On cache lines of its own, what a reservation
  /// reads and writes first.
  class alignas(64) Cell {
   public:
    void configure(const Limit& limit) noexcept {
      configured_ = limit.limit;
      limit_ = limit.limit;
      burst_ = limit.burst_or_limit();
      period_ = std::chrono::nanoseconds{limit.period}.count();
      active_ = true;
      refresh();
    }
    [[nodiscard]] bool active() const noexcept { return active_; }
    [[nodiscard]] std::int64_t limit() const noexcept { return limit_; }
    /// Returns the limit it was configured with (or learned), which slowing down never lowers.
    [[nodiscard]] std::int64_t configured() const noexcept { return configured_; }
    [[nodiscard]] std::int64_t burst() const noexcept { return std::min(burst_, limit_); }
    [[nodiscard]] std::chrono::nanoseconds period() const noexcept { return std::chrono::nanoseconds{period_}; }
    [[nodiscard]] bool per_minute() const noexcept { return period() <= std::chrono::minutes{1}; }

    /// Returns the time `units` (at least 0) take to refill, rounded up.
    [[nodiscard]] std::int64_t time_of(std::int64_t units) const noexcept {
      if (units == 1) return unit_time_;
      // Within 64 bits when units x period + limit - 1 fits: the same quotient, without 128-bit division.
      if (units <= narrow_units_) return (units * period_ + limit_ - 1) / limit_;
      return detail::mul_div_up(units, period_, limit_);
    }

    /// Takes `units` at `now_ns` and sets `held` to the nanoseconds of capacity taken. Returns when the
    /// call may start: once the TAT is within the burst, or, for more than the burst, once the bucket is full.
    std::int64_t take(std::int64_t units, std::int64_t now_ns, std::int64_t& held) noexcept {
      held = time_of(units);
      const std::int64_t from = std::max(tat_, now_ns);
      tat_ = detail::saturated_sum(from, held);
      return from + std::min<std::int64_t>(held - tolerance_, 0);
    }

    /// Returns the time a full burst takes to refill.
    [[nodiscard]] std::int64_t tolerance() const noexcept { return tolerance_; }

    /// Returns the instant from which `units` can be taken at once leaving `kept_free` (in [0, 1)) of the
    /// burst free: once the TAT is that far back. Taking more than the rest of the burst needs it full.
    [[nodiscard]] std::int64_t free_from(std::int64_t units, double kept_free) const noexcept {
      const auto usable = static_cast<std::int64_t>(static_cast<double>(tolerance_) * detail::usable_share(kept_free));
      return tat_ - std::max<std::int64_t>(usable - time_of(units), 0);
    }

    /// Records that a reservation waits to start at `start_ns`, until forget_start().
    void note_start(std::int64_t start_ns) noexcept {
      noted_over_ = latest_start_;
      latest_start_ = std::max(latest_start_, start_ns);
    }
    /// Undoes the last note_start(). Requires: no note_start() since.
    void forget_start() noexcept { latest_start_ = noted_over_; }
    /// Returns the latest start of any granted reservation that waited, so far.
    [[nodiscard]] std::int64_t latest_start() const noexcept { return latest_start_; }

    /// Takes `delta` nanoseconds of capacity at `now_ns` (from a full bucket too): the TAT moves from
    /// max(TAT, now) by `delta`.
    void take_time(std::int64_t delta, std::int64_t now_ns) noexcept {
      tat_ = detail::saturated_sum(std::max(tat_, now_ns), delta);
    }

    /// Moves the TAT by `delta` nanoseconds (negative: gives capacity back), saturating.
    void adjust(std::int64_t delta) noexcept { tat_ = detail::saturated_sum(tat_, delta); }

    /// Raises the TAT to `at_least` (never lowers it).
    void raise_to(std::int64_t at_least) noexcept { tat_ = std::max(tat_, at_least); }

    /// Takes a reported per-minute limit: as the dimension's limit when it had none, paced as enforced
    /// over one-second slices (a burst of limit / 60), as providers enforce per-minute limits; otherwise
    /// only when it is lower than the one configured. Returns true when the limit changed.
    bool adopt(std::int64_t reported) noexcept {
      if (!active_) {
        configure(Limit::per_minute(reported, std::max<std::int64_t>(1, reported / 60)));
        return true;
      }
      if (reported >= configured_) return false;
      configured_ = reported;
      limit_ = std::min(limit_, reported);
      refresh();
      return true;
    }

    void slow_down(std::int64_t now_ns) noexcept {
      limit_ = std::max<std::int64_t>(1, limit_ * slow_down_per_mille / 1000);
      changed_ = now_ns;
      refresh();
    }

    /// Raises a slowed-down limit back toward the configured one, by 1 % of it per whole second since the
    /// last change. Returns true when the limit changed.
    bool recover(std::int64_t now_ns) noexcept { return limit_ < configured_ && raise_limit(now_ns); }

    /// Returns when one unit taken at `now_ns` could start, without taking it.
    [[nodiscard]] std::int64_t start_of_one(std::int64_t now_ns) const noexcept {
      return std::max(tat_, now_ns) + std::min<std::int64_t>(unit_time_ - tolerance_, 0);
    }

    [[nodiscard]] double headroom(std::int64_t now_ns) const noexcept {
      const std::int64_t debt = std::max<std::int64_t>(0, tat_ - now_ns);
      return debt >= tolerance_ ? 0.0 : 1.0 - static_cast<double>(debt) / static_cast<double>(tolerance_);
    }

   private:
    /// recover() once the limit is below the configured one.
    LLMRETRY_NOINLINE bool raise_limit(std::int64_t now_ns) noexcept {
      const std::int64_t seconds = (now_ns - changed_) / 1'000'000'000;
      if (seconds < 1) return false;
      const std::int64_t step = std::max<std::int64_t>(1, configured_ * recovery_per_mille_per_second / 1000);
      limit_ = seconds >= (configured_ - limit_ + step - 1) / step ? configured_ : limit_ + step * seconds;
      changed_ += seconds * 1'000'000'000;
      refresh();
      return true;
    }

    /// Recomputes what follows from the limit, burst and period.
    void refresh() noexcept {
      unit_time_ = detail::mul_div_up(1, period_, limit_);
      tolerance_ = detail::mul_div_up(burst(), period_, limit_);
      narrow_units_ = (std::numeric_limits<std::int64_t>::max() - (limit_ - 1)) / period_;
    }

    std::int64_t tat_ = std::numeric_limits<std::int64_t>::min() / 2;
    std::int64_t latest_start_ = std::numeric_limits<std::int64_t>::min();
    std::int64_t noted_over_ = std::numeric_limits<std::int64_t>::min();  ///< latest_start_ before the last note
    std::int64_t limit_ = 1;
    std::int64_t configured_ = 1;
    std::int64_t unit_time_ = 0;     ///< time_of(1)
    std::int64_t tolerance_ = 0;     ///< time_of(burst()): how far ahead of now the TAT may be for a start now
    std::int64_t narrow_units_ = 0;  ///< the most units whose time of refill fits 64 bits before rounding
    bool active_ = false;
    std::int64_t burst_ = 1;
    std::int64_t period_ = 60'000'000'000;
    std::int64_t changed_ = 0;
  };

  /// The lock: a spin on one atomic flag, yielding the processor when the holder does not let go soon.
  using Guard = std::lock_guard<detail::SpinLock>;

  /// A tenant's account: how far ahead of now what it reserved puts it, at its owed share of the capacity.
  struct TenantEntry {
    std::uint64_t key = 0;             ///< a hash of its name; 0: unused
    std::int64_t owed_from = no_time;  ///< from when it is owed capacity again
    std::int64_t last = no_time;       ///< when it last reserved
    std::int64_t weight = 1000;        ///< thousandths
  };

  /// Returns the account of tenant `name` of `weight` at `now_ns` (taking a free or lapsed one, or the
  /// shared "other" when max_tenants are counted) and sets `owed_weight` to the weights of every tenant
  /// counted, this one included. Requires the lock.
  TenantEntry& tenant_entry(std::string_view name, std::int64_t weight, std::int64_t now_ns,
                            std::int64_t& owed_weight) noexcept {
    const std::uint64_t key = detail::tenant_hash(name);
    const std::int64_t lapsed = now_ns - std::chrono::nanoseconds{shares_.window}.count();
    TenantEntry* found = nullptr;
    TenantEntry* free = nullptr;
    owed_weight = 0;
    for (std::size_t t = 0; t + 1 < tenants_.size(); ++t) {
      TenantEntry& entry = tenants_[t];
      if (entry.key != 0 && entry.last < lapsed) entry = TenantEntry{};
      if (entry.key == key) found = &entry;
      if (entry.key == 0 && free == nullptr) free = &entry;
      if (entry.key != 0) owed_weight += entry.weight;
    }
    TenantEntry& other = tenants_.back();
    if (other.key != 0 && other.last < lapsed) other = TenantEntry{};
    if (other.key != 0) owed_weight += other.weight;
    if (found == nullptr) {
      found = free != nullptr ? free : &other;
      if (found->key == 0) {
        found->key = found == &other ? 1 : key;
        found->weight = weight;
        owed_weight += weight;
      }
    }
    return *found;
  }

  /// Charges `actual` at `now_ns` instead of what `reservation` holds, as settle() says. Takes the lock.
  LLMRETRY_NOINLINE void adjust(const Reservation& reservation, const Cost& actual, std::int64_t now_ns) noexcept {
    const Charges charges = charges_of(actual);
    const Guard guard(lock_);
    for (std::size_t k = 0; k < active_count_; ++k) {
      const std::size_t i = active_[k];
      Cell& cell = cells_[i];
      const std::int64_t delta = cell.time_of(std::min(charges[i], cell.configured())) - reservation.held_[i];
      if (delta > 0 || cell.latest_start() <= now_ns) cell.adjust(delta);
    }
  }

  /// The least configured limit of the paced dimensions that count each part of a cost, no_least where none
  /// does: a cost whose parts are within them (each part at least 0) exceeds no dimension's limit.
  struct LeastLimits {
    std::uint64_t requests = no_least;  ///< requests per minute and per day
    std::uint64_t input = no_least;     ///< input tokens, tokens per minute and per day
    std::uint64_t output = no_least;    ///< output tokens, tokens per minute and per day
    std::uint64_t tokens = no_least;    ///< tokens per minute and per day (input + output)
  };

  /// Returns true when `cost` is within least_: then no dimension's charge exceeds its limit; false when a
  /// part, or input + output, is above the least limit of a paced dimension that counts it, or a part so
  /// counted is negative (too_large then walks the limits). Requires the lock.
  [[nodiscard]] bool within_least_limits(const Cost& cost) const noexcept {
    const auto units = [](std::int64_t part) { return static_cast<std::uint64_t>(part); };  // negative: huge
    // input <= least_.input <= least_.tokens, so the subtraction does not wrap around.
    return units(cost.requests) <= least_.requests && units(cost.input_tokens) <= least_.input &&
           units(cost.output_tokens) <= least_.output &&
           units(cost.output_tokens) <= least_.tokens - units(cost.input_tokens);
  }

  /// Lowers least_ to dimension `i`'s configured limit where it counts: when it becomes paced or its limit
  /// is lowered (a configured limit never rises). Requires the lock.
  void note_least_limit(std::size_t i) noexcept {
    const auto limit = static_cast<std::uint64_t>(cells_[i].configured());
    const auto lower = [limit](std::uint64_t& least) { least = std::min(least, limit); };
    switch (static_cast<Dimension>(i)) {
      case Dimension::requests_per_minute:
      case Dimension::requests_per_day: lower(least_.requests); break;
      case Dimension::tokens_per_minute:
      case Dimension::tokens_per_day:
        lower(least_.input);
        lower(least_.output);
        lower(least_.tokens);
        break;
      case Dimension::input_tokens_per_minute: lower(least_.input); break;
      case Dimension::output_tokens_per_minute: lower(least_.output); break;
    }
  }

  /// Returns true when `cost` charges a paced dimension more than its configured limit: `reservation`
  /// (still too_large) is limited by the first such, and counted refused. Requires the lock.
  LLMRETRY_NOINLINE bool too_large(Reservation& reservation, const Cost& cost) noexcept {
    const Charges charges = charges_of(cost);
    for (std::size_t k = 0; k < active_count_; ++k) {
      const std::size_t i = active_[k];
      if (charges[i] <= cells_[i].configured()) continue;
      reservation.limit_by(static_cast<Dimension>(i));
      ++stats_.refused;
      return true;
    }
    return false;
  }

  /// Gives back what `reservation` took, which would start too late, forgets the starts it noted on the
  /// dimensions `waits` has a bit for, makes it too_long and counts it refused. Requires the lock, held since
  /// it was taken.
  LLMRETRY_NOINLINE void refuse_too_long(Reservation& reservation, unsigned waits) noexcept {
    give_back(reservation);
    for (std::size_t k = 0; k < active_count_; ++k)
      if ((waits >> active_[k] & 1U) != 0) cells_[active_[k]].forget_start();
    reservation.status_ = ReservationStatus::too_long;
    ++stats_.refused;
  }

  /// How a reservation yielded to others: held back, or not, and its tenant's account.
  struct Yield {
    TenantEntry* tenant = nullptr;  ///< its tenant's account; null when it has no tenant
    std::int64_t owed_weight = 0;   ///< the weights of every tenant counted in the sharing, thousandths
    bool held_back = false;         ///< true: the reservation is held back and holds nothing
  };

  /// Returns the account of `precedence.tenant` (null without one), and held_back true when `reservation`
  /// may not reserve ahead (not ahead, or a tenant past its share) and some dimension has not `cost` free
  /// at `now_ns` beyond the share of its burst kept free, or a pause holds every call: `reservation` is then
  /// held_back, start() when to ask again, limited_by() the dimension, and counted. Recovers slowed-down
  /// limits. Requires the lock.
  LLMRETRY_NOINLINE Yield yield_to_others(Reservation& reservation, const Cost& cost, std::int64_t now_ns,
                                          const Precedence& precedence) noexcept {
    const Charges charges = charges_of(cost);
    Yield yield;
    bool ahead = precedence.ahead;
    double kept_free = precedence.kept_free;
    if (!precedence.tenant.empty()) {
      yield.tenant =
          &tenant_entry(precedence.tenant, detail::weight_in_thousandths(precedence.weight), now_ns, yield.owed_weight);
      std::int64_t burst_time = 0;
      for (std::size_t k = 0; k < active_count_; ++k)
        if (charges[active_[k]] > 0) burst_time = std::max(burst_time, cells_[active_[k]].tolerance());
      if (!precedence.promoted &&
          yield.tenant->owed_from > detail::saturated_sum(now_ns, burst_time)) {  // past its share
        ahead = false;
        kept_free = std::max(kept_free, shares_.past_share_kept_free);
      }
    }
    if (ahead) return yield;
    if (slowed_) recover(now_ns);
    std::int64_t free_from = std::max(now_ns, paused_until_);
    for (std::size_t k = 0; k < active_count_; ++k) {
      const std::size_t i = active_[k];
      if (charges[i] == 0) continue;
      if (const std::int64_t from = cells_[i].free_from(charges[i], kept_free); from > free_from) {
        free_from = from;
        reservation.limit_by(static_cast<Dimension>(i));
      }
    }
    if (free_from <= now_ns) {
      reservation.limit_by(std::nullopt);
      return yield;
    }
    reservation.status_ = ReservationStatus::held_back;
    reservation.start_ = time_point{std::chrono::nanoseconds{free_from}};
    ++stats_.held_back;
    yield.held_back = true;
    return yield;
  }

  /// Charges `tenant` (of `weight` thousandths, among tenants weighing `owed_weight`) for what `reservation`,
  /// about to be granted, took on its tightest dimension at `now_ns`. Requires the lock.
  LLMRETRY_NOINLINE void charge_tenant(TenantEntry& tenant, const Reservation& reservation, std::int64_t weight,
                                       std::int64_t owed_weight, std::int64_t now_ns) noexcept {
    std::int64_t cost_time = 0;
    for (std::size_t k = 0; k < active_count_; ++k) cost_time = std::max(cost_time, reservation.held_[active_[k]]);
    tenant.owed_from =
        detail::saturated_sum(std::max(tenant.owed_from, now_ns), detail::mul_div_up(cost_time, owed_weight, weight));
    tenant.last = now_ns;
    tenant.weight = weight;
  }

  /// Raises every slowed-down limit toward its configured one (Cell::recover), and notes whether one is
  /// still below it. Requires the lock.
  LLMRETRY_NOINLINE void recover(std::int64_t now_ns) noexcept {
    bool slowed = false;
    for (std::size_t k = 0; k < active_count_; ++k) {
      Cell& cell = cells_[active_[k]];
      if (cell.recover(now_ns)) limits_changed();
      slowed = slowed || cell.limit() < cell.configured();
    }
    slowed_ = slowed;
  }

  /// Paces dimension `i` with `limit` from now on (it is not paced yet).
  void configure(std::size_t i, const Limit& limit) noexcept {
    cells_[i].configure(limit);
    note_active(i);
  }

  /// Adds dimension `i` to the paced ones, kept in the order of the dimensions.
  void note_active(std::size_t i) noexcept {
    std::size_t k = active_count_++;
    for (; k > 0 && active_[k - 1] > i; --k) active_[k] = active_[k - 1];
    active_[k] = static_cast<std::uint8_t>(i);
    paced_ = static_cast<std::uint8_t>(paced_ | (1U << i));
    note_least_limit(i);
  }

  /// Records that a limit, burst or period changed, or a dimension became paced: a reservation made
  /// before is settled under the lock. Requires the lock.
  void limits_changed() noexcept {
    generation_.store(generation_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }

  /// Returns true when `actual` charges every dimension paced at the reservation what its cost did.
  static bool charges_as_reserved(const Reservation& reservation, const Cost& actual) noexcept {
    const Charges now = charges_of(actual);
    const Charges then = charges_of(reservation.cost_);
    for (std::size_t i = 0; i < dimension_count; ++i)
      if ((reservation.paced_ >> i & 1U) != 0 && now[i] != then[i]) return false;
    return true;
  }

  void give_back(const Reservation& reservation) noexcept {
    for (std::size_t k = 0; k < active_count_; ++k) {
      const std::size_t i = active_[k];
      if (reservation.held_[i] != 0) cells_[i].adjust(-reservation.held_[i]);
    }
  }

  void learn_window(const RateLimitWindow& window, Dimension dimension, std::int64_t now_ns) noexcept {
    const auto i = static_cast<std::size_t>(dimension);
    Cell& cell = cells_[i];
    if (window.limit && *window.limit > 0) {
      const bool was_active = cell.active();
      if (cell.adopt(*window.limit)) limits_changed();
      if (was_active) note_least_limit(i);  // the limit may have come down
      else note_active(i);
    }
    if (!cell.active()) return;
    if (window.remaining) {
      const std::int64_t free = std::max<std::int64_t>(0, *window.remaining);
      if (free < cell.burst()) cell.raise_to(now_ns + cell.time_of(cell.burst() - free));
    } else if (window.reset_after) {
      cell.raise_to(now_ns + std::chrono::nanoseconds{at_most_a_day(*window.reset_after)}.count());
    }
  }

  // What every reservation reads and writes, from the lock's cache line on, what it writes on that line; then
  // the cells; then, each on a line of its own, what a settle reads without the lock and what it adds to.
  mutable detail::SpinLock lock_;
  std::uint8_t active_count_ = 0;
  std::array<std::uint8_t, dimension_count> active_{};  ///< the paced dimensions, in order
  std::uint8_t paced_ = 0;                              ///< the paced dimensions, one bit each
  bool slowed_ = false;  ///< a limit may be below its configured one (slow_down): reservations recover it
  std::int64_t paused_until_ = no_time;
  RateLimiterStats stats_;  ///< all but tokens_used
  LeastLimits least_;       ///< read by every reservation, written only as limits change
  std::int64_t last_slow_down_ = no_time;
  std::int64_t set_back_until_ = no_time;
  std::array<Cell, dimension_count> cells_;
  TenantShares shares_;
  std::vector<TenantEntry> tenants_;                      ///< max_tenants accounts, then "other"
  alignas(64) std::atomic<std::uint64_t> generation_{0};  ///< one more at each change of the limits
  alignas(64) std::atomic<std::int64_t> tokens_used_{0};
};

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_ADMISSION_RATE_LIMITER_HPP
