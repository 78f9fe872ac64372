#ifndef LLMRETRY_REDIS_RATE_LIMITER_HPP
#define LLMRETRY_REDIS_RATE_LIMITER_HPP

/// The Redis RateLimiter: one deployment's limits shared by every process that reaches the server. The state
/// of llmretry::RateLimiter (a theoretical arrival time per dimension) lives in one Redis hash; each operation
/// is one Lua script on the server's clock, so processes on machines whose clocks disagree share one limit.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../admission/limits.hpp"
#include "../admission/rate_limiter.hpp"
#include "../admission/settlement.hpp"
#include "../attempt.hpp"
#include "../clock.hpp"
#include "../detail/saturate.hpp"
#include "../guard.hpp"
#include "../version.hpp"
#include "connection.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace redis {

namespace detail {

// KEYS[1]: the limiter's hash; fields t<i> (dimension i's theoretical arrival time, TAT) and s<i> (the latest
// start granted on it), microseconds on the server's clock. ARGV: the most wait allowed (µs, -1: any), how
// long the hash outlives its last TAT (ms), then for each dimension charged: i, the time its charge takes to
// refill (µs), the time its burst takes to refill (µs). The arithmetic is llmretry::RateLimiter's: a call may
// start once every TAT, moved by its charge, is within the burst's time of it. Takes nothing when the wait is
// too long. Returns {1 granted or 0 too long, the wait in µs, the dimension that made it wait or -1}.
inline constexpr std::string_view reserve_script = R"lua(
local key = KEYS[1]
local max_wait, linger = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local start, limited, cells = now, -1, {}
for a = 3, #ARGV, 3 do
  local i, held, burst = ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local from = math.max(tonumber(redis.call('HGET', key, 't' .. i)) or now, now)
  local starts = from + math.min(held - burst, 0)
  if starts > start then start, limited = starts, tonumber(i) end
  cells[#cells + 1] = {i, from + held, math.max(starts, now)}
end
if max_wait >= 0 and start - now > max_wait then return {0, start - now, limited} end
local last = now
for _, c in ipairs(cells) do
  local latest = math.max(tonumber(redis.call('HGET', key, 's' .. c[1])) or c[3], c[3])
  redis.call('HSET', key, 't' .. c[1], string.format('%d', c[2]), 's' .. c[1], string.format('%d', latest))
  last = math.max(last, c[2])
end
local ttl = math.ceil((last - now) / 1000) + linger
if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
return {1, start - now, limited}
)lua";

// KEYS[1]: the limiter's hash. ARGV: how long the hash outlives its last TAT (ms), then for each dimension
// to adjust: i, the change of its TAT (µs; negative gives capacity back), and 1 when capacity comes back only
// if no reservation on it starts after now (0: always). Returns 1.
inline constexpr std::string_view adjust_script = R"lua(
local key = KEYS[1]
local linger = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
for a = 2, #ARGV, 3 do
  local i, delta, conditional = ARGV[a], tonumber(ARGV[a + 1]), ARGV[a + 2] == '1'
  local tat = tonumber(redis.call('HGET', key, 't' .. i))
  if delta > 0 then
    tat = (tat or now) + delta
    redis.call('HSET', key, 't' .. i, string.format('%d', tat))
    local ttl = math.ceil((tat - now) / 1000) + linger
    if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
  elseif tat and not (conditional and (tonumber(redis.call('HGET', key, 's' .. i)) or now) > now) then
    redis.call('HSET', key, 't' .. i, string.format('%d', tat + delta))
  end
end
return 1
)lua";

}  // namespace detail

/// Admits calls at the rate of `limits`, shared by every process whose RateLimiter has the same name on the
/// same server, with the semantics of llmretry::RateLimiter's reserve, cancel and settle (continuous refill, a
/// burst per dimension, every dimension taken at once or none). The state is a hash under
/// `<prefix>limit:{<name>}` that expires once every limit is full again (plus the longest period); every
/// process must give one name the same limits. Times come from the server's clock: a call that must wait
/// starts the server's wait after its reply came (the caller's `now` plus the round trip plus the wait), so
/// never before the server meant it; one that need not starts at `now`.
///
/// When Redis cannot be reached or answers with an error, every operation throws redis::RedisError naming it
/// ("rate limiter reserve", "rate limiter cancel", "rate limiter settle"): it fails closed, admitting nothing
/// without the shared state, since a process cannot know how much of the limit the others use. A reserve
/// that timed out may have taken its capacity (it comes back as it refills). A cancel or settle closes the
/// reservation before it runs, so that repeating it cannot give capacity back twice: when it throws, what the
/// reservation held stays charged until it refills. A server restarted without persistence starts with every
/// limit full. Thread-safe as far as its Connection is (commands are sent one at a time).
class RateLimiter {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  /// The limiter `name` on `connection` (which must outlive it) with `limits`; its guards and the round trip
  /// of a reserve read `clock` (empty: the real one). Throws std::invalid_argument naming the dimension and
  /// field when a limit makes no sense (Limits::validate).
  RateLimiter(Connection& connection, std::string_view name, const Limits& limits, Clock clock = {})
      : connection_(connection),
        key_(connection.options().prefix + "limit:{" + std::string(name) + "}"),
        limits_(limits),
        clock_(std::move(clock)) {
    limits_.validate();
    std::chrono::milliseconds longest{0};
    for (const auto& limit : limits_.by_dimension)
      if (limit) longest = std::max(longest, limit->period);
    linger_ = std::to_string(longest.count());
  }

  /// Reserves `cost` on every limited dimension. Returns a granted reservation saying when the call may
  /// start, on the clock of `now`; too_large (holding nothing, without asking the server) when the
  /// cost exceeds a dimension's limit; too_long (holding nothing) when the wait would be longer than
  /// `max_wait`. Throws redis::RedisError.
  [[nodiscard]] Reservation reserve(const Cost& cost, time_point now,
                                    std::optional<std::chrono::milliseconds> max_wait = std::nullopt) {
    using Access = llmretry::detail::ReservationAccess;
    Reservation reservation = Access::make(cost);
    const bool bounded = max_wait && *max_wait < llmretry::detail::longest_wait;
    std::vector<std::string> args{bounded ? std::to_string(std::chrono::microseconds{*max_wait}.count()) : "-1",
                                  linger_};
    for (std::size_t i = 0; i < dimension_count; ++i) {
      if (!limits_.by_dimension[i]) continue;
      const Limit& limit = *limits_.by_dimension[i];
      const std::int64_t units = charge_of(cost, static_cast<Dimension>(i));
      if (units > limit.limit) {
        Access::refuse(reservation, ReservationStatus::too_large, time_point{}, static_cast<Dimension>(i));
        return reservation;
      }
      if (units == 0) continue;
      const std::int64_t held = refill_us(units, limit);
      const std::int64_t burst = refill_us(limit.burst_or_limit(), limit);
      Access::held(reservation)[i] = held * 1000;
      args.insert(args.end(), {std::to_string(i), std::to_string(held), std::to_string(burst)});
    }
    const time_point sent = this->now();
    const Reply reply = run("rate limiter reserve", detail::reserve_script, args);
    const std::chrono::microseconds wait{reply[1].integer()};
    const time_point start = wait > wait.zero() ? now + (this->now() - sent) + wait : now;
    std::optional<Dimension> limited_by;
    if (const long long dimension = reply[2].integer(); dimension >= 0) limited_by = static_cast<Dimension>(dimension);
    if (reply[0].integer() == 0) Access::refuse(reservation, ReservationStatus::too_long, start, limited_by);
    else Access::grant(reservation, start, limited_by);
    return reservation;
  }

  /// Gives back what an open reservation holds (the call was not sent). Does nothing for a reservation that
  /// is not open. Throws redis::RedisError, the reservation closed and its capacity left charged.
  void cancel(Reservation& reservation) {
    using Access = llmretry::detail::ReservationAccess;
    if (!Access::close(reservation)) return;
    std::vector<std::string> args{linger_};
    for (std::size_t i = 0; i < dimension_count; ++i)
      if (const std::int64_t held = Access::held(reservation)[i]; held != 0) add(args, i, -held / 1000, false);
    adjust("rate limiter cancel", args);
  }

  /// Charges `actual` (the usage the response reported) instead of the estimate an open reservation holds:
  /// an overrun is charged; what was not used is given back only on a dimension where no reservation starts
  /// after the server's now (as llmretry::RateLimiter::settle). `now` is not read: the server's clock decides.
  /// Does nothing for a reservation that is not open. Throws redis::RedisError, the reservation closed and the
  /// estimate left charged.
  void settle(Reservation& reservation, const Cost& actual, [[maybe_unused]] time_point now) {
    using Access = llmretry::detail::ReservationAccess;
    if (!Access::close(reservation)) return;
    std::vector<std::string> args{linger_};
    for (std::size_t i = 0; i < dimension_count; ++i) {
      if (!limits_.by_dimension[i]) continue;
      const std::int64_t owed = refill_us(charge_of(actual, static_cast<Dimension>(i)), *limits_.by_dimension[i]);
      const std::int64_t delta = owed - Access::held(reservation)[i] / 1000;
      if (delta != 0) add(args, i, delta, true);
    }
    adjust("rate limiter settle", args);
  }

  /// Returns the limits it paces with.
  [[nodiscard]] const Limits& limits() const noexcept { return limits_; }
  /// Returns the time on the limiter's clock.
  [[nodiscard]] time_point now() const { return now_on(clock_); }

  class Pacing;
  /// Returns the guard that paces one call of estimated cost `estimate` (see estimate_cost) through this
  /// limiter, for call_with_retry: an attempt waits at most `max_wait` (empty: as long as its deadline
  /// allows), and a success is settled with the usage `read_usage` finds in the answer (empty: the
  /// estimate stays charged). The limiter must outlive the guard, and the guard its tickets.
  [[nodiscard]] Pacing pace(const Cost& estimate, std::optional<std::chrono::milliseconds> max_wait = std::nullopt,
                            UsageReader read_usage = {});

 private:
  /// Returns the microseconds `units` of `limit` take to refill.
  static std::int64_t refill_us(std::int64_t units, const Limit& limit) noexcept {
    return llmretry::detail::mul_div_up(units, std::chrono::microseconds{limit.period}.count(), limit.limit);
  }

  static void add(std::vector<std::string>& args, std::size_t dimension, std::int64_t delta, bool conditional) {
    args.insert(args.end(), {std::to_string(dimension), std::to_string(delta), conditional ? "1" : "0"});
  }

  Reply run(std::string_view operation, std::string_view script, const std::vector<std::string>& args) {
    return connection_.eval(operation, {script}, {key_}, {args.begin(), args.end()});
  }

  void adjust(std::string_view operation, const std::vector<std::string>& args) {
    if (args.size() > 1) (void)run(operation, detail::adjust_script, args);  // else nothing to change
  }

  Connection& connection_;
  std::string key_;
  Limits limits_;
  std::string linger_;  ///< the longest period in ms: how long the hash outlives its last TAT
  Clock clock_;
};

/// The guard of one call through a redis::RateLimiter (made by RateLimiter::pace). Before each attempt it
/// reserves the estimate on the server (the wait is slept by call_with_retry); after it, it settles as
/// Deployment::Pacing does: a success with the usage the answer reports, a failure with what charge_after
/// keeps, an attempt never sent (its ticket destroyed without news) gives everything back. It learns nothing
/// else from the answer (rate-limit headers, a 429's wait): only the shared state paces. Refuses with
/// StopReason::no_capacity a cost above a limit or a wait beyond max_wait, and with StopReason::deadline a
/// wait beyond the attempt's time left.
///
/// Redis failing never throws through it. In admit it fails closed: the attempt is refused with
/// StopReason::refused and a failure of nothing sent (FailureKind::connection, or timeout when the server did
/// not answer in time, unknown for an error reply), and error() keeps the redis::RedisError. In a ticket (settle,
/// cancel) the failure is kept in error() and the reservation stays charged until it refills.
class RateLimiter::Pacing {
 public:
  /// What one attempt holds: its reservation, settled or given back however the attempt ends.
  class Ticket {
   public:
    Ticket(Pacing& pacing, Reservation reservation) noexcept : pacing_(&pacing), reservation_(std::move(reservation)) {}
    Ticket(Ticket&& other) noexcept : pacing_(other.pacing_), reservation_(std::move(other.reservation_)) {}
    Ticket& operator=(Ticket&&) = delete;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    /// Gives back what an attempt that heard neither success nor failure holds. Never throws: a failure
    /// that cannot even be kept in error() (out of memory) is dropped, the reservation left charged.
    ~Ticket() {
      try {
        pacing_->guarded([&] { pacing_->limiter_->cancel(reservation_); });
      } catch (...) {
        // dropped: a destructor must not throw
      }
    }

    /// Settles with the usage the answer reports (the estimate when it reports none or its reader throws:
    /// see reported_usage).
    template <class Answer>
    void succeeded(const Answer& answer) {
      const Cost usage = reported_usage(answer, pacing_->read_usage_).value_or(reservation_.cost());
      pacing_->guarded([&] { pacing_->limiter_->settle(reservation_, usage, pacing_->limiter_->now()); });
    }
    /// Settles a call that returned nothing: the estimate stays charged.
    void succeeded() {
      pacing_->guarded([&] { pacing_->limiter_->settle(reservation_, reservation_.cost(), pacing_->limiter_->now()); });
    }
    /// Settles with what the failure kept charged (see charge_after).
    void failed(const Failure& failure) {
      pacing_->guarded([&] {
        if (const std::optional<Cost> charged = charge_after(failure, reservation_.cost()))
          pacing_->limiter_->settle(reservation_, *charged, pacing_->limiter_->now());
        else pacing_->limiter_->cancel(reservation_);
      });
    }

   private:
    Pacing* pacing_;
    Reservation reservation_;
  };

  Pacing(RateLimiter& limiter, const Cost& estimate, std::optional<std::chrono::milliseconds> max_wait,
         UsageReader read_usage) noexcept
      : limiter_(&limiter), estimate_(estimate), max_wait_(max_wait), read_usage_(std::move(read_usage)) {}

  /// Reserves the estimate for the attempt on the server. Returns the ticket and the wait until capacity
  /// comes, or the refusal (see the class).
  [[nodiscard]] Admission<Ticket> admit(const Attempt& attempt) {
    const time_point now = limiter_->now();
    std::optional<Reservation> reservation;
    guarded(
        [&] { reservation.emplace(limiter_->reserve(estimate_, now, shorter_wait(max_wait_, attempt.time_left))); });
    if (!reservation) return Admission<Ticket>::refuse(Refusal{StopReason::refused, redis_failure(error_->kind())});
    if (!reservation->granted())
      return Admission<Ticket>::refuse(refusal_of(*reservation, now, attempt.time_left, max_wait_));
    const auto wait = reservation->wait_after(now);
    return Admission<Ticket>::go(Ticket{*this, *std::move(reservation)}, wait);
  }

  /// Returns the last failure of Redis met by this call's admissions and settlements, or nullopt.
  [[nodiscard]] const std::optional<RedisError>& error() const noexcept { return error_; }

 private:
  /// Returns the failure of an attempt refused because Redis failed with `kind`: nothing was sent.
  static constexpr Failure redis_failure(ErrorKind kind) noexcept {
    switch (kind) {
      case ErrorKind::connection: return Failure::connection_failed(Sent::not_sent);
      case ErrorKind::timeout: return Failure::timed_out(Sent::not_sent);
      case ErrorKind::reply: break;
    }
    return Failure::of(FailureKind::unknown, Sent::not_sent);
  }

  /// Runs `operation`, keeping the redis::RedisError it throws in error_ instead.
  template <class Operation>
  void guarded(Operation&& operation) {
    try {
      std::forward<Operation>(operation)();
    } catch (const RedisError& error) {
      error_ = error;
    }
  }

  RateLimiter* limiter_;
  Cost estimate_;
  std::optional<std::chrono::milliseconds> max_wait_;
  UsageReader read_usage_;
  std::optional<RedisError> error_;
};

inline RateLimiter::Pacing RateLimiter::pace(const Cost& estimate, std::optional<std::chrono::milliseconds> max_wait,
                                             UsageReader read_usage) {
  return Pacing{*this, estimate, max_wait, std::move(read_usage)};
}

}  // namespace redis
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_REDIS_RATE_LIMITER_HPP
