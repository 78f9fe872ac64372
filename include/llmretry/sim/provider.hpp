#ifndef LLMRETRY_SIM_PROVIDER_HPP
#define LLMRETRY_SIM_PROVIDER_HPP

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <vector>

#include "../detail/config.hpp"
#include "../detail/uniform.hpp"
#include "../failure.hpp"
#include "../http/rate_limits.hpp"
#include "../version.hpp"
#include "event_queue.hpp"
#include "random.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace sim {

/// How a simulated provider fills Retry-After when it refuses a request.
enum class RetryAfterMode {
  none,     ///< no Retry-After at all (the explorer)
  fixed,    ///< always the same coarse value, such as Azure's `retry-after: 30`
  precise,  ///< the exact time until capacity returns, as `retry-after-ms` gives it
};

/// How a simulated provider answers a request it has no capacity for.
enum class BusyAnswer {
  rate_limited,  ///< HTTP 429: the usual LLM provider
  conflict,      ///< HTTP 409 with `x-should-retry: true`: a write lost an optimistic-concurrency race
};

/// What happened to one request.
enum class Outcome {
  served,        ///< answered successfully
  refused,       ///< turned away for capacity: 429 (or 409 for BusyAnswer::conflict)
  server_error,  ///< admitted, then failed with 503
  timeout,       ///< admitted, never answered: the client stopped waiting
};

/// Returns the name of an outcome ("served", "refused", "server_error", "timeout").
[[nodiscard]] constexpr const char* to_string(Outcome outcome) noexcept {
  switch (outcome) {
    case Outcome::served: return "served";
    case Outcome::refused: return "refused";
    case Outcome::server_error: return "server_error";
    case Outcome::timeout: return "timeout";
  }
  return "unknown";
}

/// A token bucket: holds at most `capacity` units, starts full, and refills evenly at `capacity` units
/// per `period`. {600, 1 min} is "600 requests per minute"; {100000, 1 min} is "100,000 tokens per minute".
struct Bucket {
  std::int64_t capacity = 0;                ///< units held when full, and refilled per period
  std::chrono::milliseconds period{60000};  ///< the time over which `capacity` units come back
};

/// A simulated provider, made of limits that all apply at once. A request is admitted only when every
/// limit that is set has room; otherwise it is refused (429) and consumes nothing. An admitted request
/// may still fail at random (503 or no answer). Leave a limit unset to switch it off.
struct ProviderSpec {
  /// Starts at most one request every interval: a request at t is admitted iff t >= last start + interval.
  std::optional<std::chrono::milliseconds> start_interval;
  /// Requests-per-period bucket (RPM); each admitted request takes 1.
  std::optional<Bucket> requests;
  /// Tokens-per-period bucket (TPM); each admitted request takes `tokens_per_request`.
  std::optional<Bucket> tokens;
  /// The token cost of one request against `tokens` (prompt plus max output tokens).
  std::int64_t tokens_per_request = 0;
  /// At most this many admitted requests in flight at once.
  std::optional<int> concurrency;
  /// How long an admitted request takes to answer (and holds its concurrency slot).
  std::chrono::milliseconds latency{0};
  /// How long a refusal takes to reach the client.
  std::chrono::milliseconds refusal_latency{0};
  /// The share of admitted requests that fail with 503 after `latency`, in [0, 1].
  double server_error_rate = 0.0;
  /// The share of admitted requests that never answer, in [0, 1]: the client gives up waiting after
  /// `timeout` (a read timeout: the request may have been processed).
  double timeout_rate = 0.0;
  /// How long a client waits for an answer that never comes.
  std::chrono::milliseconds timeout{10000};
  /// How a request it has no capacity for is answered.
  BusyAnswer busy_answer = BusyAnswer::rate_limited;
  /// How a refusal fills Retry-After.
  RetryAfterMode retry_after_header = RetryAfterMode::none;
  /// The Retry-After sent with RetryAfterMode::fixed.
  std::chrono::milliseconds fixed_retry_after{30000};

  /// Throws std::invalid_argument naming the field when the model makes no sense: a non-positive
  /// interval, period or capacity, a cost above the token capacity (never admitted), a token bucket
  /// without a cost, a concurrency below 1, a negative duration, a rate outside [0, 1] or rates adding
  /// up to more than 1.
  void validate() const {
    using std::chrono::milliseconds;
    constexpr std::int64_t max_capacity = 1'000'000'000'000;  // keeps capacity * period in 64 bits
    const auto check_bucket = [](const std::optional<Bucket>& bucket, const char* capacity_message,
                                 const char* period_message) {
      if (!bucket) return;
      if (bucket->capacity < 1 || bucket->capacity > max_capacity) detail::throw_invalid_argument(capacity_message);
      if (bucket->period < milliseconds{1} || bucket->period > milliseconds{1'000'000})
        detail::throw_invalid_argument(period_message);
    };
    if (start_interval && *start_interval <= milliseconds::zero())
      detail::throw_invalid_argument("ProviderSpec::start_interval must be positive");
    check_bucket(requests, "ProviderSpec::requests.capacity must be in [1, 10^12]",
                 "ProviderSpec::requests.period must be in [1 ms, 1000 s]");
    check_bucket(tokens, "ProviderSpec::tokens.capacity must be in [1, 10^12]",
                 "ProviderSpec::tokens.period must be in [1 ms, 1000 s]");
    if (tokens_per_request < 0) detail::throw_invalid_argument("ProviderSpec::tokens_per_request must not be negative");
    if (tokens && tokens_per_request == 0)
      detail::throw_invalid_argument("ProviderSpec::tokens_per_request must be positive with a tokens bucket");
    if (tokens && tokens_per_request > tokens->capacity)
      detail::throw_invalid_argument("ProviderSpec::tokens_per_request must not exceed tokens.capacity");
    if (concurrency && *concurrency < 1) detail::throw_invalid_argument("ProviderSpec::concurrency must be at least 1");
    if (latency < milliseconds::zero()) detail::throw_invalid_argument("ProviderSpec::latency must not be negative");
    if (refusal_latency < milliseconds::zero())
      detail::throw_invalid_argument("ProviderSpec::refusal_latency must not be negative");
    if (!(server_error_rate >= 0.0 && server_error_rate <= 1.0))
      detail::throw_invalid_argument("ProviderSpec::server_error_rate must be in [0, 1]");
    if (!(timeout_rate >= 0.0 && timeout_rate <= 1.0))
      detail::throw_invalid_argument("ProviderSpec::timeout_rate must be in [0, 1]");
    if (server_error_rate + timeout_rate > 1.0)
      detail::throw_invalid_argument("ProviderSpec::server_error_rate + timeout_rate must not exceed 1");
    if (timeout < milliseconds::zero()) detail::throw_invalid_argument("ProviderSpec::timeout must not be negative");
    if (fixed_retry_after < milliseconds::zero())
      detail::throw_invalid_argument("ProviderSpec::fixed_retry_after must not be negative");
  }
};

/// The provider's answer to one request: what happened, when the client learns it, and the failure the
/// client classifies (none when served).
struct Reply {
  Outcome outcome = Outcome::served;
  std::chrono::milliseconds latency{0};  ///< from sending to the client holding the answer
  std::optional<Failure> failure;        ///< what the client sees when not served
  RateLimits reported;                   ///< the rate-limit headers of the answer: its limits per minute, what is left
};

}  // namespace sim
LLMRETRY_END_NAMESPACE

LLMRETRY_BEGIN_NAMESPACE
namespace detail {

/// A token bucket in exact integer arithmetic: the level is kept in units of 1 / period_ms, so refilling
/// `capacity` per `period` adds exactly `capacity` per millisecond.
class BucketState {
 public:
  explicit BucketState(const sim::Bucket& bucket) noexcept
      : capacity_(bucket.capacity), period_ms_(bucket.period.count()), level_(capacity_ * period_ms_) {}

  /// Returns the units available at `now`.
  [[nodiscard]] std::int64_t available(sim::Time now) {
    refill(now);
    return level_ / period_ms_;
  }
  /// Returns how long after `now` the bucket is full again.
  [[nodiscard]] std::chrono::milliseconds until_full(sim::Time now) {
    refill(now);
    return std::chrono::milliseconds{(capacity_ * period_ms_ - level_ + capacity_ - 1) / capacity_};
  }
  /// Returns the units held when full.
  [[nodiscard]] std::int64_t capacity() const noexcept { return capacity_; }
  /// Returns the capacity scaled to one minute.
  [[nodiscard]] std::int64_t per_minute() const noexcept { return capacity_ * 60'000 / period_ms_; }
  /// Puts `units` back, up to full.
  void give_back(std::int64_t units) noexcept {
    level_ = std::min(capacity_ * period_ms_, level_ + units * period_ms_);
  }

  /// Returns 0 when `cost` units are available at `now`, else how long until they are.
  [[nodiscard]] std::chrono::milliseconds shortfall(sim::Time now, std::int64_t cost) {
    refill(now);
    const std::int64_t deficit = cost * period_ms_ - level_;
    if (deficit <= 0) return std::chrono::milliseconds::zero();
    return std::chrono::milliseconds{(deficit + capacity_ - 1) / capacity_};
  }
  /// Takes `cost` units; requires shortfall(now, cost) == 0 just before.
  void take(std::int64_t cost) noexcept { level_ -= cost * period_ms_; }

 private:
  void refill(sim::Time now) noexcept {
    const std::int64_t elapsed = (now - updated_).count();
    updated_ = now;
    const std::int64_t full = capacity_ * period_ms_;
    level_ = elapsed >= period_ms_ ? full : std::min(full, level_ + elapsed * capacity_);
  }

  std::int64_t capacity_;
  std::int64_t period_ms_;
  std::int64_t level_;
  sim::Time updated_{0};
};

/// Returns a rate in [0, 1] as parts per million.
[[nodiscard]] inline std::int64_t per_million(double rate) noexcept { return std::llround(rate * 1'000'000.0); }

}  // namespace detail
LLMRETRY_END_NAMESPACE

LLMRETRY_BEGIN_NAMESPACE
namespace sim {

/// A provider following a ProviderSpec, answering requests in virtual time. Requests must come in
/// non-decreasing time order (the simulator's event queue sees to it). Random failures draw from the
/// provider's own generator, so they repeat for the same seed.
class ProviderModel {
 public:
  /// Builds the provider. `seed`: the generator for random failures.
  /// Throws std::invalid_argument naming the field when `spec` makes no sense (see ProviderSpec::validate).
  ProviderModel(const ProviderSpec& spec, std::uint64_t seed)
      : ProviderModel((spec.validate(), spec), seed, detail::prevalidated) {}
  /// Builds the provider from a spec that validate() accepted (simulate validates its scenario once).
  ProviderModel(const ProviderSpec& spec, std::uint64_t seed, detail::prevalidated_t)
      : spec_(spec),
        rng_(seed),
        error_ppm_(detail::per_million(spec.server_error_rate)),
        timeout_ppm_(detail::per_million(spec.timeout_rate)) {
    if (spec_.requests) requests_.emplace(*spec_.requests);
    if (spec_.tokens) tokens_.emplace(*spec_.tokens);
  }

  /// Answers a request sent at `now` that costs ProviderSpec::tokens_per_request, updating the
  /// provider's state. Throws std::invalid_argument when `now` is before an earlier request.
  [[nodiscard]] Reply request(Time now) { return request(now, spec_.tokens_per_request); }

  /// Answers a request sent at `now` that costs `tokens` against the tokens limit (the prompt and the
  /// most it may produce, as providers count at admission). Throws std::invalid_argument when `now` is
  /// before an earlier request.
  [[nodiscard]] Reply request(Time now, std::int64_t tokens) {
    if (now < last_request_) detail::throw_invalid_argument("ProviderModel::request: time went back");
    last_request_ = now;
    while (!in_flight_.empty() && in_flight_.top() <= now) in_flight_.pop();

    std::chrono::milliseconds until{0};  // the longest time until a full limit has room again
    bool room = true;
    const auto need = [&](std::chrono::milliseconds wait) {
      if (wait > std::chrono::milliseconds::zero()) {
        room = false;
        until = std::max(until, wait);
      }
    };
    if (spec_.start_interval && last_start_) need(*last_start_ + *spec_.start_interval - now);
    if (requests_) need(requests_->shortfall(now, 1));
    if (tokens_) need(tokens_->shortfall(now, std::min(tokens, tokens_->per_minute())));
    if (spec_.concurrency && in_flight_.size() >= static_cast<std::size_t>(*spec_.concurrency))
      need(in_flight_.top() - now);
    if (!room) return refuse(until, now);

    last_start_ = now;
    if (requests_) requests_->take(1);
    if (tokens_) tokens_->take(tokens);
    Reply reply;
    report(reply, now);
    reply.latency = spec_.latency;
    if (error_ppm_ + timeout_ppm_ > 0) {
      const auto draw = detail::uniform_between(rng_, 0, 999'999);
      if (draw < timeout_ppm_) {
        reply.outcome = Outcome::timeout;
        reply.latency = spec_.timeout;
        reply.failure = Failure::timed_out(Sent::maybe_processed);
      } else if (draw < timeout_ppm_ + error_ppm_) {
        reply.outcome = Outcome::server_error;
        reply.failure = classify_status(503);
      }
    }
    if (spec_.concurrency) in_flight_.push(now + reply.latency);
    return reply;
  }

  /// Gives back `tokens` charged at admission that the answer did not use, at `now` (a provider that
  /// counts actual usage). Throws std::invalid_argument when `now` is before an earlier request.
  void refund(Time now, std::int64_t tokens) {
    if (now < last_request_) detail::throw_invalid_argument("ProviderModel::refund: time went back");
    if (tokens_ && tokens > 0) {
      (void)tokens_->available(now);
      tokens_->give_back(tokens);
    }
  }

 private:
  /// Fills the reply's rate-limit headers as providers send them, per minute: each bucket's limit, what is
  /// left now (the bucket's level scaled to the minute) and when it is full again.
  void report(Reply& reply, Time now) {
    const auto window = [&](detail::BucketState& bucket, RateLimitWindow& into) {
      into.limit = bucket.per_minute();
      into.remaining = bucket.available(now) * bucket.per_minute() / bucket.capacity();
      into.reset_after = bucket.until_full(now);
    };
    if (requests_) window(*requests_, reply.reported.requests);
    if (tokens_) window(*tokens_, reply.reported.tokens);
  }

  [[nodiscard]] Reply refuse(std::chrono::milliseconds until, Time now) {
    Reply reply;
    report(reply, now);
    reply.outcome = Outcome::refused;
    reply.latency = spec_.refusal_latency;
    Failure failure = classify_status(spec_.busy_answer == BusyAnswer::conflict ? 409 : 429);
    if (spec_.busy_answer == BusyAnswer::conflict) failure.should_retry = true;
    if (spec_.retry_after_header == RetryAfterMode::fixed) failure.provider_wait = spec_.fixed_retry_after;
    if (spec_.retry_after_header == RetryAfterMode::precise) failure.provider_wait = until;
    reply.failure = failure;
    return reply;
  }

  ProviderSpec spec_;
  SplitMix64 rng_;
  std::int64_t error_ppm_;
  std::int64_t timeout_ppm_;
  std::optional<detail::BucketState> requests_;
  std::optional<detail::BucketState> tokens_;
  std::priority_queue<Time, std::vector<Time>, std::greater<>> in_flight_;
  std::optional<Time> last_start_;
  Time last_request_{0};
};

}  // namespace sim
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_SIM_PROVIDER_HPP
