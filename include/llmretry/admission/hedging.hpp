#ifndef LLMRETRY_ADMISSION_HEDGING_HPP
#define LLMRETRY_ADMISSION_HEDGING_HPP

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "../clock.hpp"
#include "../detail/config.hpp"
#include "../version.hpp"
#include "retry_budget.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// When the attempts of the calls sharing a Hedging are hedged, and how many hedges they may send.
struct HedgingOptions {
  /// A fixed delay, positive: a hedge may go once an attempt has not answered for `delay`. Unset: the delay
  /// is learned, the `percentile` of the latencies recorded (see Hedging::record).
  std::optional<std::chrono::milliseconds> delay;
  /// For a learned delay: which latency, in (0, 1). 0.95 hedges the attempts slower than 95 % of the others.
  double percentile = 0.95;
  /// For a learned delay: the latencies kept, the most recent ones, in [1, 100000].
  int samples = 1000;
  /// For a learned delay: no hedge until this many latencies were recorded, in [1, samples].
  int min_samples = 20;
  /// For a learned delay: the shortest, at least 1 ms (a learned delay below it is raised to it).
  std::chrono::milliseconds min_delay{10};
  /// Hedges allowed per call over the last `window`, in [0, 1]: 0.05 lets hedges add at most 5 % to the
  /// requests sent.
  double ratio = 0.05;
  /// Hedges allowed per second over the last `window` whatever the traffic, at least 0 (a floor: under
  /// heavy traffic the ratio alone decides).
  double min_per_second = 0.0;
  /// How long a call or a hedge counts, in [10 ms, 1 hour].
  std::chrono::milliseconds window{std::chrono::seconds{10}};
  /// The clock of the budget and of the latencies; empty: the real one. A virtual-time driver passes its own.
  Clock clock;

  /// Throws std::invalid_argument naming the field when a value is out of its range.
  void validate() const {
    if (delay && *delay <= std::chrono::milliseconds::zero())
      detail::throw_invalid_argument("HedgingOptions::delay must be positive (unset: learned)");
    if (!(percentile > 0.0 && percentile < 1.0))
      detail::throw_invalid_argument("HedgingOptions::percentile must be in (0, 1)");
    if (samples < 1 || samples > 100000)
      detail::throw_invalid_argument("HedgingOptions::samples must be in [1, 100000]");
    if (min_samples < 1 || min_samples > samples)
      detail::throw_invalid_argument("HedgingOptions::min_samples must be in [1, samples]");
    if (min_delay < std::chrono::milliseconds{1})
      detail::throw_invalid_argument("HedgingOptions::min_delay must be >= 1 ms");
    if (!(ratio >= 0.0 && ratio <= 1.0)) detail::throw_invalid_argument("HedgingOptions::ratio must be in [0, 1]");
    if (!(min_per_second >= 0.0 && min_per_second <= 1e6))
      detail::throw_invalid_argument("HedgingOptions::min_per_second must be in [0, 1000000]");
    if (window < std::chrono::milliseconds{10} || window > std::chrono::hours{1})
      detail::throw_invalid_argument("HedgingOptions::window must be in [10 ms, 1 h]");
  }
};

/// Counters of a Hedging since it was made.
struct HedgingStats {
  std::int64_t calls = 0;    ///< first attempts of hedged calls (what the budget's ratio applies to)
  std::int64_t hedges = 0;   ///< hedges sent
  std::int64_t wins = 0;     ///< hedges whose answer came first
  std::int64_t refused = 0;  ///< hedges the budget refused
};

/// Hedging shared by calls (CallOptions::hedging): when an attempt has not answered after a delay (fixed,
/// or a percentile of the latencies it learns), a driver that runs requests concurrently (such as
/// asio::async_call_with_retry) sends a second request of it, and the first answer wins. The engine asks
/// it for the delay and for a hedge from its budget: over any `window`, the hedges sent are at most
/// max(ratio x calls, min_per_second x window), counted as a RetryBudget counts retries. Which calls may
/// be hedged at all (safe to repeat, nothing streamed yet, capacity now) is the engine's rule (see
/// CallEngine::hedge). Thread-safe.
class Hedging {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  /// Throws std::invalid_argument naming the field when `options` make no sense.
  explicit Hedging(HedgingOptions options = {})
      : options_((options.validate(), std::move(options))),
        budget_(RetryBudgetOptions{options_.ratio, options_.min_per_second, options_.window, options_.clock}) {
    latencies_.reserve(static_cast<std::size_t>(options_.samples));
  }
  Hedging(const Hedging&) = delete;
  Hedging& operator=(const Hedging&) = delete;
  Hedging(Hedging&&) = delete;
  Hedging& operator=(Hedging&&) = delete;
  ~Hedging() = default;

  /// Returns the options it was made with.
  [[nodiscard]] const HedgingOptions& options() const noexcept { return options_; }
  /// Returns the time on its clock.
  [[nodiscard]] time_point now() const { return now_on(options_.clock); }

  /// Returns how long after an attempt begins a hedge of it may go: the fixed delay, or the learned
  /// percentile (at least min_delay); nullopt while fewer than min_samples latencies were recorded. The
  /// percentile is computed again once 1/64 of the latencies kept are new (each new one while fewer than 64).
  [[nodiscard]] std::optional<std::chrono::milliseconds> delay() const {
    if (options_.delay) return options_.delay;
    std::lock_guard<std::mutex> lock(mutex_);
    if (latencies_.size() < static_cast<std::size_t>(options_.min_samples)) return std::nullopt;
    if (fresh_ >= std::max<std::size_t>(1, latencies_.size() / 64)) {
      sorted_ = latencies_;
      const auto rank = static_cast<std::size_t>(options_.percentile * static_cast<double>(sorted_.size()));
      const auto at = sorted_.begin() + static_cast<std::ptrdiff_t>(std::min(rank, sorted_.size() - 1));
      std::nth_element(sorted_.begin(), at, sorted_.end());
      learned_ = std::max(*at, options_.min_delay);
      fresh_ = 0;
    }
    return learned_;
  }

  /// Records how long an attempt took to answer (its first byte for a streamed answer): the learned delay
  /// is the percentile of the last `samples` recorded. Negative latencies count as zero.
  void record(std::chrono::milliseconds latency) {
    latency = std::max(latency, std::chrono::milliseconds::zero());
    std::lock_guard<std::mutex> lock(mutex_);
    if (latencies_.size() < static_cast<std::size_t>(options_.samples)) {
      latencies_.push_back(latency);
    } else {
      latencies_[next_] = latency;
      next_ = (next_ + 1) % latencies_.size();
    }
    ++fresh_;
  }

  /// Records the first attempt of a hedged call at `now`: it earns `ratio` hedges for a window.
  void called(time_point now) { budget_.deposit(now); }
  /// Takes one hedge at `now`. Returns true when the budget allows it (it is then counted as sent),
  /// false when it is used up.
  [[nodiscard]] bool try_hedge(time_point now) { return budget_.try_withdraw(now); }
  /// Takes back a hedge taken at `at` and not sent after all (a guard refused it or asked it to wait).
  void give_back(time_point at) { budget_.give_back(at, false); }
  /// Records that a hedge's answer came first.
  void won() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++wins_;
  }

  /// Returns the counters so far.
  [[nodiscard]] HedgingStats stats() const {
    const RetryBudgetStats budget = budget_.stats();
    std::lock_guard<std::mutex> lock(mutex_);
    return HedgingStats{budget.first_attempts, budget.retries, wins_, budget.refused};
  }

 private:
  HedgingOptions options_;
  RetryBudget budget_;  ///< calls are its first attempts, hedges its retries
  mutable std::mutex mutex_;
  std::vector<std::chrono::milliseconds> latencies_;  ///< the last `samples`, a ring once full
  std::size_t next_ = 0;                              ///< the oldest latency once full
  mutable std::vector<std::chrono::milliseconds> sorted_;
  mutable std::chrono::milliseconds learned_{0};
  mutable std::size_t fresh_ = 0;  ///< latencies recorded since learned_ was computed
  std::int64_t wins_ = 0;
};

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_ADMISSION_HEDGING_HPP
