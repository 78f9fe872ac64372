#ifndef LLMRETRY_REDIS_RATE_LIMITER_HPP
#define LLMRETRY_REDIS_RATE_LIMITER_HPP

/// The Redis RateLimiter: one deployment's limits shared by every process that reaches the server. The state
/// of llmretry::RateLimiter (a theoretical arrival time per dimension) lives in one Redis hash; each operation
/// is one Lua script on the server's clock, so processes on machines whose clocks disagree share one limit.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../admission/limits.hpp"
#include "../admission/rate_limiter.hpp"
#include "../admission/settlement.hpp"
#include "../admission/shared_pacing.hpp"
#include "../attempt.hpp"
#include "../clock.hpp"
#include "../detail/saturate.hpp"
#include "../guard.hpp"
#include "../version.hpp"
#include "connection.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace redis {

namespace detail {

// One script for every operation on one deployment's shared pacing state, with llmretry::RateLimiter's
// arithmetic on the server's clock (TIME, in microseconds). KEYS[1]: the state's hash. Per dimension d
// (0 to 5): t<d> its theoretical arrival time (TAT), s<d> the latest start granted on it that waited, L<d> the lowest
// limit learned from rate-limit headers, U<d> the burst of a dimension only learned, R<d> its rate while
// slowed down and C<d> when that last changed; P the end of the pause after a 429, B the end of the last
// set-back, D the last slow-down; the counters of every process: ng granted, nr refused, nt tokens reserved,
// nu tokens used (the estimate until settled otherwise), nx tokens given back, nh reservations held back.
// ARGV[1]: "reserve", "finish" or "stats"; ARGV[2]: how long the hash outlives its last TAT (ms); ARGV[3..20]: each
// dimension's configured limit (0: none), burst and period (µs).
// reserve: ARGV[21..26] the cost's charge per dimension, ARGV[27] the most wait allowed (µs, -1: any),
//   ARGV[28] the share of each burst kept free in millionths for a reservation that may not reserve ahead
//   (-1: it may); ARGV[29] the tenant ('' none: its account is the fields a:<tenant> from when it is owed
//   capacity again, l:<tenant> when it last reserved, w:<tenant> its weight), ARGV[30] its weight in
//   thousandths, ARGV[31] the window in µs within which a tenant counts, ARGV[32] the share of each burst kept
//   free by a tenant past its share in millionths, ARGV[33] the most tenants counted (others: "other"),
//   ARGV[34] "1" when the reservation was promoted (it yields no more as a tenant past its share).
//   Returns {1 granted, 0 too long, 2 too large or 3 held back; the wait in µs (held back:
//   until it may ask again); the dimension that decided or -1; then the µs of capacity held per dimension;
//   unless too large, then the load after it: the share of the burst free on the tightest dimension
//   (millionths), that dimension's whole burst (µs), and a new call's wait for one unit (µs)}. Takes nothing
//   unless granted.
// finish: ARGV[21..26] the µs held per dimension, ARGV[27..32] the charge kept per dimension, ARGV[33]
//   "settle", "cancel" or "none"; ARGV[34..45] the reported requests, tokens, input and output windows, each
//   limit, remaining and reset (µs), -1 when not reported; ARGV[46] a 429's wait (µs, -1: none); ARGV[47]
//   "1" to slow down; ARGV[48] the tokens the reservation's estimate charged. Returns 1.
// stats: returns {ng, nr, nt, nu, nx, nh}.
inline constexpr std::string_view pacing_script = R"lua(
local key, op, linger = KEYS[1], ARGV[1], tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local state, dirty = {}, {}
local raw = redis.call('HGETALL', key)
for k = 1, #raw, 2 do state[raw[k]] = tonumber(raw[k + 1]) end
local most = 4000000000000000  -- µs, about 126 years: no time goes further (a usage reported may be huge)
local function set(field, value) state[field] = math.min(value, most); dirty[#dirty + 1] = field end
local function arg(k) return tonumber(ARGV[k]) end

local cells = {}
local function cell(d)
  local limit, learned = arg(3 + d * 3), state['L' .. d]
  if limit <= 0 and not learned then return nil end
  local c = {d = d}
  if limit > 0 then
    c.configured, c.burst, c.period = limit, arg(4 + d * 3), arg(5 + d * 3)
    if learned and learned < limit then c.configured = learned end
  else
    c.configured, c.burst, c.period = learned, state['U' .. d] or math.max(1, math.floor(learned / 60)), 60000000
  end
  c.limit = c.configured
  local slowed = state['R' .. d]
  if slowed and slowed < c.configured then c.limit = slowed end
  return c
end
for d = 0, 5 do cells[d] = cell(d) end
local function time_of(c, units)
  if units <= 0 then return 0 end
  return math.min(math.ceil(units * c.period / c.limit), most)
end
local function tolerance(c) return time_of(c, math.min(c.burst, c.limit)) end
local function raise(c, at_least) set('t' .. c.d, math.max(state['t' .. c.d] or at_least, at_least)) end
local function recover(c)
  if c.limit >= c.configured then return end
  local since = state['C' .. c.d] or now
  local seconds = math.floor((now - since) / 1000000)
  if seconds < 1 then return end
  local step = math.max(1, math.floor(c.configured * 10 / 1000))
  if seconds >= math.ceil((c.configured - c.limit) / step) then c.limit = c.configured
  else c.limit = c.limit + step * seconds end
  set('R' .. c.d, c.limit)
  set('C' .. c.d, since + seconds * 1000000)
end
local function save()
  local last = math.max(now, state['P'] or now)
  for d = 0, 5 do last = math.max(last, state['t' .. d] or now) end
  if #dirty > 0 then
    local fields = {}
    for _, f in ipairs(dirty) do
      fields[#fields + 1] = f
      fields[#fields + 1] = string.format('%d', state[f])
    end
    redis.call('HSET', key, unpack(fields))
  end
  local ttl = math.ceil((last - now) / 1000) + linger
  if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
end

local function count(field, by) set(field, (state[field] or 0) + by) end
-- the load now, as llmretry::RateLimiter's headroom and queue_wait say it: the share of the burst free on the
-- tightest dimension (millionths), that dimension's whole burst (µs), and a new call's wait for one unit (µs)
local function load()
  local least, refill, start = 1000000, 0, math.max(now, state['P'] or now)
  for d = 0, 5 do
    local c = cells[d]
    if c then
      local burst, tat = tolerance(c), math.max(state['t' .. d] or now, now)
      if burst > 0 then
        local free = math.floor(math.max(burst - (tat - now), 0) * 1000000 / burst)
        if free < least then least, refill = free, burst end
      end
      start = math.max(start, tat + math.min(time_of(c, 1) - burst, 0))
    end
  end
  return least, refill, start - now
end
if op == 'stats' then
  return {state['ng'] or 0, state['nr'] or 0, state['nt'] or 0, state['nu'] or 0, state['nx'] or 0, state['nh'] or 0}
end
if op == 'reserve' then
  for d = 0, 5 do
    local c = cells[d]
    if c and arg(21 + d) > c.configured then
      count('nr', 1)
      save()
      return {2, 0, d, 0, 0, 0, 0, 0, 0}
    end
  end
  local kept = arg(28)
  local tenant, weight, owed, account = ARGV[29], arg(30), 0, nil
  if tenant ~= '' then
    local lapsed, counted, seen = now - arg(31), 0, false
    for field, value in pairs(state) do
      if string.sub(field, 1, 2) == 'l:' then
        local name = string.sub(field, 3)
        if value < lapsed then
          redis.call('HDEL', key, 'a:' .. name, 'l:' .. name, 'w:' .. name)
          state['a:' .. name], state['w:' .. name] = nil, nil
        else
          if name ~= 'other' then counted = counted + 1 end
          owed = owed + (state['w:' .. name] or 1000)
          if name == tenant then seen = true end
        end
      end
    end
    if not seen and counted >= arg(33) and tenant ~= 'other' then
      tenant = 'other'
      seen = state['l:other'] ~= nil and state['l:other'] >= lapsed
    end
    if not seen then owed = owed + weight end
    account = state['a:' .. tenant] or now
    local burst_time = 0
    for d = 0, 5 do
      local c = cells[d]
      if c and arg(21 + d) > 0 then burst_time = math.max(burst_time, tolerance(c)) end
    end
    if ARGV[34] ~= '1' and account > now + burst_time then kept = math.max(kept, arg(32)) end
  end
  if kept >= 0 then
    local free_from, limited = math.max(now, state['P'] or now), -1
    for d = 0, 5 do
      local c = cells[d]
      if c then
        recover(c)
        local units = arg(21 + d)
        if units > 0 then
          local usable = math.floor(tolerance(c) * (1000000 - kept) / 1000000)
          local from = (state['t' .. d] or now) - math.max(usable - time_of(c, units), 0)
          if from > free_from then free_from, limited = from, d end
        end
      end
    end
    if free_from > now then
      count('nh', 1)
      save()
      return {3, free_from - now, limited, 0, 0, 0, 0, 0, 0, load()}
    end
  end
  local start, limited, takes, held = now, -1, {}, {0, 0, 0, 0, 0, 0}
  for d = 0, 5 do
    local c = cells[d]
    if c then
      recover(c)
      local units = arg(21 + d)
      if units > 0 then
        local h = time_of(c, units)
        local from = math.max(state['t' .. d] or now, now)
        local starts = from + math.min(h - tolerance(c), 0)
        if starts > start then start, limited = starts, d end
        takes[#takes + 1] = {d, from + h, starts}
        held[d + 1] = h
      end
    end
  end
  start = math.max(start, state['P'] or now)
  local max_wait = arg(27)
  if max_wait >= 0 and start - now > max_wait then
    count('nr', 1)
    save()
    return {0, start - now, limited, 0, 0, 0, 0, 0, 0, load()}
  end
  count('ng', 1)
  count('nt', arg(22))
  count('nu', arg(22))
  for _, take in ipairs(takes) do
    set('t' .. take[1], take[2])
    if take[3] > now then set('s' .. take[1], math.max(state['s' .. take[1]] or take[3], take[3])) end
  end
  if account then
    local taken = 0
    for d = 1, 6 do taken = math.max(taken, held[d]) end
    set('a:' .. tenant, math.max(account, now) + math.ceil(taken * owed / weight))
    set('l:' .. tenant, now)
    set('w:' .. tenant, weight)
  end
  save()
  return {1, start - now, limited, held[1], held[2], held[3], held[4], held[5], held[6], load()}
end

-- finish: learn what the answer reported
for w = 0, 3 do
  local limit, remaining, reset = arg(34 + w * 3), arg(35 + w * 3), arg(36 + w * 3)
  local c = cells[w]
  if limit > 0 then
    if not c then
      c = {d = w, configured = limit, limit = limit, burst = math.max(1, math.floor(limit / 60)), period = 60000000}
      cells[w] = c
      set('L' .. w, limit)
      set('U' .. w, c.burst)
    elseif limit < c.configured then
      c.configured = limit
      c.limit = math.min(c.limit, limit)
      set('L' .. w, limit)
      if state['R' .. w] then set('R' .. w, c.limit) end
    end
  end
  if c then
    local burst = math.min(c.burst, c.limit)
    if remaining >= 0 then
      if remaining < burst then raise(c, now + time_of(c, burst - remaining)) end
    elseif reset >= 0 then
      raise(c, now + reset)
    end
  end
end
-- a 429: pause every call, and set the levels back once per overload
local refused = arg(46)
if refused >= 0 then
  local until_ = now + refused
  set('P', math.max(state['P'] or until_, until_))
  for d = 0, 5 do if cells[d] then raise(cells[d], until_) end end
  if now >= (state['B'] or now) then
    set('B', now + refused)
    for d = 0, 5 do
      if cells[d] then set('t' .. d, math.max(state['t' .. d] or now, now) + refused) end
    end
  end
end
if ARGV[47] == '1' and (not state['D'] or now - state['D'] >= 1000000) then
  set('D', now)
  for d = 0, 5 do
    local c = cells[d]
    if c and c.period <= 60000000 then
      c.limit = math.max(1, math.floor(c.limit * 700 / 1000))
      set('R' .. d, c.limit)
      set('C' .. d, now)
    end
  end
end
-- settle or cancel the reservation
local mode = ARGV[33]
if mode == 'settle' then count('nu', arg(28) - arg(48)) end
if mode == 'cancel' then
  count('nu', -arg(48))
  count('nx', arg(48))
end
for d = 0, 5 do
  local held, tat = arg(21 + d), state['t' .. d]
  if mode == 'cancel' then
    if held ~= 0 and tat then set('t' .. d, tat - held) end
  elseif mode == 'settle' and cells[d] then
    local delta = time_of(cells[d], math.min(arg(27 + d), cells[d].configured)) - held
    if delta > 0 then
      set('t' .. d, (tat or now) + delta)
    elseif delta < 0 and tat and (state['s' .. d] or now) <= now then
      set('t' .. d, tat + delta)
    end
  end
end
save()
return 1
)lua";

}  // namespace detail

/// One deployment's pacing state shared by every process whose RateLimiter has the same name on the same
/// server, with the semantics of llmretry::RateLimiter (continuous refill, a burst per dimension, every
/// dimension taken at once or none; limits learned from rate-limit headers, the pause and set-back after a
/// 429, the adaptive slow-down), each operation one Lua script on the server's clock, so that processes on
/// machines whose clocks disagree share one limit: two round trips per attempt (reserve, finish). The state is
/// a hash under `<prefix>limit:{<name>}` that expires once every limit is full again (plus the longest
/// period configured, a minute when none is); every process must give one name the same limits. A call that must wait
/// starts the server's wait after its reply came (the caller's `now` plus the round trip plus the wait), so
/// never before the server meant it; one that need not starts at `now`. Give it to a Deployment
/// (DeploymentOptions::shared) to pace with it.
///
/// When Redis cannot be reached or answers with an error, every operation throws redis::RedisError naming it
/// ("rate limiter reserve", "rate limiter finish"). A reserve that timed out may have taken its capacity (it
/// comes back as it refills). A cancel, settle or finish closes the reservation before it runs, so that
/// repeating it cannot give capacity back twice: when it throws, what the reservation held stays charged
/// until it refills. A server restarted without persistence, or flushed, starts with every limit full and
/// nothing learned. Thread-safe as far as its Connection is (commands are sent one at a time).
class RateLimiter final : public SharedPacing {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  /// The limiter `name` on `connection` (which must outlive it) with `limits`; its guards and the round trip
  /// of a reserve read `clock` (empty: the real one). Throws std::invalid_argument naming the dimension and
  /// field when a limit makes no sense (Limits::validate).
  RateLimiter(Connection& connection, std::string_view name, const Limits& limits, Clock clock = {},
              const TenantShares& shares = {})
      : connection_(connection),
        key_(connection.options().prefix + "limit:{" + std::string(name) + "}"),
        limits_(limits),
        clock_(std::move(clock)) {
    limits_.validate();
    shares.validate();
    shares_ = {std::to_string(std::chrono::microseconds{shares.window}.count()),
               std::to_string(std::lround(shares.past_share_kept_free * 1e6)), std::to_string(shares.max_tenants)};
    std::chrono::milliseconds longest{0};
    for (std::size_t i = 0; i < dimension_count; ++i) {
      const std::optional<Limit>& limit = limits_.by_dimension[i];
      if (!limit) {
        configured_.insert(configured_.end(), {"0", "0", "0"});
        continue;
      }
      longest = std::max(longest, limit->period);
      configured_.insert(configured_.end(), {std::to_string(limit->limit), std::to_string(limit->burst_or_limit()),
                                             std::to_string(std::chrono::microseconds{limit->period}.count())});
    }
    if (longest == longest.zero()) longest = std::chrono::minutes{1};  // only learned limits: per minute
    linger_ = std::to_string(longest.count());
  }

  /// Reserves `cost` on every limited dimension, the learned ones too, yielding as `precedence` says.
  /// Returns a granted reservation saying when the call may start, on the clock of `now`; too_large
  /// (holding nothing; without asking the server when the cost exceeds a configured limit) when the cost
  /// exceeds a dimension's limit; too_long (holding nothing) when the wait would be longer than `max_wait`;
  /// held_back (holding nothing) as llmretry::RateLimiter::reserve says. Throws redis::RedisError.
  [[nodiscard]] Reservation reserve(const Cost& cost, time_point now,
                                    std::optional<std::chrono::milliseconds> max_wait = std::nullopt,
                                    const Precedence& precedence = {}) override {
    using Access = llmretry::detail::ReservationAccess;
    Reservation reservation = Access::make(cost);
    const Charges charges = charges_of(cost);
    for (std::size_t i = 0; i < dimension_count; ++i) {
      if (limits_.by_dimension[i] && charges[i] > limits_.by_dimension[i]->limit) {
        Access::refuse(reservation, ReservationStatus::too_large, time_point{}, static_cast<Dimension>(i));
        return reservation;
      }
    }
    std::vector<std::string> args = header("reserve");
    for (const std::int64_t charge : charges) args.push_back(std::to_string(charge));
    const bool bounded = max_wait && *max_wait < llmretry::detail::longest_wait;
    args.push_back(bounded ? std::to_string(std::chrono::microseconds{*max_wait}.count()) : "-1");
    args.push_back(precedence.ahead ? "-1"
                                    : std::to_string(std::lround(
                                          (1.0 - llmretry::detail::usable_share(precedence.kept_free)) * 1e6)));
    args.push_back(precedence.tenant.empty() ? std::string() : tenant_field(precedence.tenant));
    args.push_back(std::to_string(llmretry::detail::weight_in_thousandths(precedence.weight)));
    args.insert(args.end(), shares_.begin(), shares_.end());
    args.emplace_back(precedence.promoted ? "1" : "0");
    const time_point sent = this->now();
    const Reply reply = run("rate limiter reserve", args);
    const std::chrono::microseconds wait{reply[1].integer()};
    const time_point start = wait > wait.zero() ? now + (this->now() - sent) + wait : now;
    std::optional<Dimension> limited_by;
    if (const long long dimension = reply[2].integer(); dimension >= 0 && dimension < 6)
      limited_by = static_cast<Dimension>(dimension);
    if (reply[0].integer() != 2) {
      const std::lock_guard<std::mutex> lock(snapshot_mutex_);
      snapshot_ =
          SharedSnapshot{now + (this->now() - sent),
                         std::chrono::ceil<std::chrono::milliseconds>(std::chrono::microseconds{reply[11].integer()}),
                         static_cast<double>(reply[9].integer()) / 1e6, std::chrono::microseconds{reply[10].integer()}};
    }
    switch (reply[0].integer()) {
      case 1:
        for (std::size_t i = 0; i < dimension_count; ++i) Access::held(reservation)[i] = reply[3 + i].integer() * 1000;
        Access::grant(reservation, start, limited_by);
        break;
      case 2: Access::refuse(reservation, ReservationStatus::too_large, time_point{}, limited_by); break;
      case 3: Access::refuse(reservation, ReservationStatus::held_back, start, limited_by); break;
      default: Access::refuse(reservation, ReservationStatus::too_long, start, limited_by); break;
    }
    return reservation;
  }

  /// Tells the end of the attempt (see SharedPacing::finish) in one script; `now` is not read: the server's
  /// clock decides. Sends nothing when there is no news and the estimate stays charged as it was reserved.
  /// Throws redis::RedisError, the reservation closed and what it held left charged.
  void finish(Reservation& reservation, const AttemptEnd& end, [[maybe_unused]] time_point now) override {
    finish(reservation, end, "rate limiter finish");
  }

  /// Returns the counters of every process (see SharedPacing::stats); a cost refused without asking the
  /// server (above a configured limit) is counted by this process's Deployment only. Throws
  /// redis::RedisError.
  [[nodiscard]] RateLimiterStats stats() override {
    const Reply reply = run("rate limiter stats", header("stats"));
    RateLimiterStats stats;
    stats.granted = reply[0].integer();
    stats.refused = reply[1].integer();
    stats.tokens_reserved = reply[2].integer();
    stats.tokens_used = reply[3].integer();
    stats.tokens_released = reply[4].integer();
    stats.held_back = reply[5].integer();
    return stats;
  }

  /// Returns what the last reservation made here (not refused as too large) said of the shared state after
  /// it (see SharedPacing::snapshot).
  [[nodiscard]] std::optional<SharedSnapshot> snapshot() const noexcept override {
    const std::lock_guard<std::mutex> lock(snapshot_mutex_);
    return snapshot_;
  }

  /// Gives back what an open reservation holds (the call was not sent). Does nothing for a reservation that
  /// is not open. Throws redis::RedisError, the reservation closed and its capacity left charged.
  void cancel(Reservation& reservation) { finish(reservation, AttemptEnd{}, "rate limiter cancel"); }

  /// Charges `actual` (the usage the response reported) instead of the estimate an open reservation holds,
  /// as llmretry::RateLimiter::settle does, on the server's clock (`now` is not read). Does nothing for a
  /// reservation that is not open. Throws redis::RedisError, the reservation closed and the estimate left
  /// charged.
  void settle(Reservation& reservation, const Cost& actual, [[maybe_unused]] time_point now) {
    AttemptEnd end;
    end.charge = actual;
    finish(reservation, end, "rate limiter settle");
  }

  /// Returns the limits it was configured with (those learned live on the server).
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
  /// finish(), its errors naming `operation`.
  void finish(Reservation& reservation, const AttemptEnd& end, std::string_view operation) {
    using Access = llmretry::detail::ReservationAccess;
    const Cost reserved = reservation.cost();
    const bool open = Access::close(reservation);
    if (!end.has_news() && (!open || end.charge == reserved)) return;  // nothing to learn, nothing to adjust
    std::vector<std::string> args = header("finish");
    for (const std::int64_t held : Access::held(reservation)) args.push_back(std::to_string(open ? held / 1000 : 0));
    for (const std::int64_t charge : charges_of(end.charge.value_or(Cost{0, 0, 0})))
      args.push_back(std::to_string(charge));
    args.emplace_back(!open ? "none" : end.charge ? "settle" : "cancel");
    const RateLimits none;
    const RateLimits& reported = end.reported != nullptr ? *end.reported : none;
    for (const RateLimitWindow* window :
         {&reported.requests, &reported.tokens, &reported.input_tokens, &reported.output_tokens}) {
      // Untrusted values, bounded as the local limiter bounds them: units to 10^12, a reset to a day.
      constexpr std::int64_t most = llmretry::detail::most_units;
      args.push_back(window->limit && *window->limit > 0 ? std::to_string(std::min(*window->limit, most)) : "-1");
      args.push_back(window->remaining ? std::to_string(std::clamp<std::int64_t>(*window->remaining, 0, most)) : "-1");
      args.push_back(window->reset_after
                         ? std::to_string(std::chrono::microseconds{at_most_a_day(*window->reset_after)}.count())
                         : "-1");
    }
    args.push_back(end.refused_for ? std::to_string(std::chrono::microseconds{*end.refused_for}.count()) : "-1");
    args.emplace_back(end.slow_down ? "1" : "0");
    args.push_back(std::to_string(open ? charge_of(reserved, Dimension::tokens_per_minute) : 0));
    (void)run(operation, args);
  }

  /// Returns the name of `tenant`'s fields: a hash of it (16 hexadecimal digits), so that a client key
  /// given as the tenant never reaches Redis.
  [[nodiscard]] static std::string tenant_field(std::string_view tenant) {
    std::uint64_t hash = llmretry::detail::tenant_hash(tenant);
    static constexpr char digits[] = "0123456789abcdef";
    std::string field(16, '0');
    for (int i = 15; i >= 0; --i, hash >>= 4) field[static_cast<std::size_t>(i)] = digits[hash & 15U];
    return field;
  }

  /// Returns the script's first arguments: the operation, the linger and the configured limits.
  [[nodiscard]] std::vector<std::string> header(const char* operation) const {
    std::vector<std::string> args{operation, linger_};
    args.insert(args.end(), configured_.begin(), configured_.end());
    return args;
  }

  Reply run(std::string_view operation, const std::vector<std::string>& args) {
    return connection_.eval(operation, {detail::pacing_script}, {key_}, {args.begin(), args.end()});
  }

  Connection& connection_;
  std::string key_;
  Limits limits_;
  std::vector<std::string> configured_;  ///< each dimension's limit, burst and period (µs), "0" when unset
  std::string linger_;                   ///< the longest period in ms: how long the hash outlives its last TAT
  std::vector<std::string> shares_;      ///< TenantShares: window (µs), kept free (millionths), max tenants
  Clock clock_;
  mutable std::mutex snapshot_mutex_;
  std::optional<SharedSnapshot> snapshot_;  ///< what the last reservation said of the state
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
/// StopReason::pacing_unavailable and a failure of nothing sent (FailureKind::connection, or timeout when the server
/// did not answer in time, unknown for an error reply), and error() keeps the redis::RedisError. In a ticket (settle,
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
    guarded([&] { reservation.emplace(limiter_->reserve(estimate_, now, max_wait_of(attempt))); });
    if (!reservation)
      return Admission<Ticket>::refuse(Refusal{StopReason::pacing_unavailable, redis_failure(error_->kind())});
    if (!reservation->granted())
      return Admission<Ticket>::refuse(refusal_of(*reservation, now, attempt.time_left, max_wait_));
    const auto wait = reservation->wait_after(now);
    return Admission<Ticket>::go(Ticket{*this, *std::move(reservation)}, wait);
  }

  /// Returns the last failure of Redis met by this call's admissions and settlements, or nullopt.
  [[nodiscard]] const std::optional<RedisError>& error() const noexcept { return error_; }

 private:
  /// Returns the longest wait for capacity `attempt` accepts: none for a hedge (Attempt::hedge).
  [[nodiscard]] std::optional<std::chrono::milliseconds> max_wait_of(const Attempt& attempt) const noexcept {
    return attempt.hedge ? std::chrono::milliseconds::zero() : shorter_wait(max_wait_, attempt.time_left);
  }

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
