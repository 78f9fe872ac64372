#ifndef LLMRETRY_SIM_STORE_HPP
#define LLMRETRY_SIM_STORE_HPP

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "../admission/limits.hpp"
#include "../admission/rate_limiter.hpp"
#include "../admission/shared_pacing.hpp"
#include "../version.hpp"
#include "event_queue.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace sim {

/// A store that keeps one deployment's pacing state for every host of a simulated fleet, as a Redis server
/// does for redis::RateLimiter: one llmretry::RateLimiter on the store's clock (the run's virtual time),
/// each exchange a round trip away. A reserve is one exchange, and the attempt starts a round trip after
/// the start the store grants (its reply travels back before the host may send); a finish is one exchange
/// when it carries news or changes the charge (as redis::RateLimiter, it sends nothing otherwise), and
/// holds no attempt back. Every exchange is counted per second of virtual time. Not thread-safe: a
/// simulation runs on one thread.
class ModelledStore final : public SharedPacing {
 public:
  /// The store of `limits`, its clock `now` (the run's, which outlives it), `round_trip` away from every
  /// host. Throws std::invalid_argument naming the dimension and field when a limit makes no sense.
  ModelledStore(const Limits& limits, const Time& now, std::chrono::milliseconds round_trip)
      : limiter_(limits), now_(&now), round_trip_(round_trip) {}

  /// Reserves `cost` on the store as RateLimiter::reserve does, at most `max_wait` on the store. Returns a
  /// reservation whose shared() is true, starting (granted), meant to start (too_long) or to ask again
  /// (held_back) a round trip after the store's start, on the clock of `now`.
  [[nodiscard]] Reservation reserve(const Cost& cost, time_point now, std::optional<std::chrono::milliseconds> max_wait,
                                    const Precedence& precedence = {}) override {
    using Access = detail::ReservationAccess;
    const time_point at = exchange();
    Reservation reservation = limiter_.reserve(cost, at, max_wait, precedence);
    Access::mark_shared(reservation, true);
    const time_point start = now + round_trip_ + (reservation.start() - at);
    if (reservation.granted()) Access::grant(reservation, start, reservation.limited_by());
    else if (reservation.status() == ReservationStatus::too_long ||
             reservation.status() == ReservationStatus::held_back)
      Access::refuse(reservation, reservation.status(), start, reservation.limited_by());
    return reservation;
  }

  /// Tells the end of an attempt (see SharedPacing::finish) on the store's clock: learns, pauses, sets back
  /// and slows down as Deployment::succeeded and failed do on their own limiter, then settles or cancels.
  void finish(Reservation& reservation, const AttemptEnd& end, [[maybe_unused]] time_point now) override {
    using Access = detail::ReservationAccess;
    const bool news = end.has_news();
    if (!news && (!reservation.open() || end.charge == reservation.cost())) {
      (void)Access::close(reservation);  // nothing to learn, nothing to adjust: the estimate stays charged
      return;
    }
    const time_point at = exchange();
    if (end.reported != nullptr) limiter_.learn(*end.reported, at);
    if (end.refused_for) {
      limiter_.pause_until(at + *end.refused_for);
      limiter_.set_back(*end.refused_for, at);
    }
    if (end.slow_down) (void)limiter_.slow_down(at);
    Access::mark_shared(reservation, false);
    if (end.charge) limiter_.settle(reservation, *end.charge, at);
    else limiter_.cancel(reservation);
    Access::mark_shared(reservation, true);
  }

  /// Returns the counters of the limiter that holds the state (a settle skipped for having nothing to tell
  /// is not in its tokens used).
  [[nodiscard]] RateLimiterStats stats() override { return limiter_.stats(); }

  /// Returns the limiter that holds the state.
  [[nodiscard]] const RateLimiter& limiter() const noexcept { return limiter_; }
  /// Returns the exchanges so far.
  [[nodiscard]] std::int64_t exchanges() const noexcept { return exchanges_; }
  /// Returns the exchanges in each second of virtual time, from 0 to the last one's.
  [[nodiscard]] const std::vector<std::int64_t>& exchanges_per_second() const noexcept { return per_second_; }

 private:
  /// Counts an exchange. Returns the store's time.
  time_point exchange() {
    const auto second = static_cast<std::size_t>(std::chrono::duration_cast<std::chrono::seconds>(*now_).count());
    if (per_second_.size() <= second) per_second_.resize(second + 1);
    ++per_second_[second];
    ++exchanges_;
    return time_point{} + *now_;
  }

  RateLimiter limiter_;
  const Time* now_;
  std::chrono::milliseconds round_trip_;
  std::int64_t exchanges_ = 0;
  std::vector<std::int64_t> per_second_;
};

}  // namespace sim
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_SIM_STORE_HPP
