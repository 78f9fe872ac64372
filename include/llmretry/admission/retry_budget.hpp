#ifndef LLMRETRY_ADMISSION_RETRY_BUDGET_HPP
#define LLMRETRY_ADMISSION_RETRY_BUDGET_HPP

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <utility>

#include "../attempt.hpp"
#include "../clock.hpp"
#include "../decision.hpp"
#include "../detail/config.hpp"
#include "../detail/sliding_window.hpp"
#include "../failure.hpp"
#include "../guard.hpp"
#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// How many retries the calls sharing a RetryBudget may make.
struct RetryBudgetOptions {
  /// Retries allowed per first attempt made over the last `window`, in [0, 10]: 0.1 lets retries add at
  /// most 10 % to the load.
  double ratio = 0.1;
  /// Retries allowed per second over the last `window` whatever the traffic, at least 0: a quiet client
  /// may still retry. A floor, not added to the ratio: under heavy traffic the ratio alone decides.
  double min_per_second = 1.0;
  /// How long a first attempt or a retry counts, in [10 ms, 1 hour].
  std::chrono::milliseconds window{std::chrono::seconds{10}};
  /// The clock; empty: the real one. A virtual-time driver passes its own.
  Clock clock;

  /// Throws std::invalid_argument naming the field when a value is out of its range.
  void validate() const {
    if (!(ratio >= 0.0 && ratio <= 10.0))
      detail::throw_invalid_argument("RetryBudgetOptions::ratio must be in [0, 10]");
    if (!(min_per_second >= 0.0 && min_per_second <= 1e6))
      detail::throw_invalid_argument("RetryBudgetOptions::min_per_second must be in [0, 1000000]");
    if (window < std::chrono::milliseconds{10} || window > std::chrono::hours{1})
      detail::throw_invalid_argument("RetryBudgetOptions::window must be in [10 ms, 1 h]");
  }
};

/// Counters of a RetryBudget since it was made.
struct RetryBudgetStats {
  std::int64_t first_attempts = 0;  ///< first attempts recorded (deposits)
  std::int64_t retries = 0;         ///< retries allowed (withdrawals), less those given back unsent
  std::int64_t refused = 0;         ///< retries refused
};

/// Retries shared by the calls to one deployment (or to all of them): over any `window`, the retries
/// allowed are at most max(ratio x first attempts, min_per_second x window), so that when a provider
/// fails for everyone, retries add at most `ratio` to the load instead of multiplying it. First
/// attempts are never refused. Counted in ten slices of the window. Thread-safe.
class RetryBudget {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  /// Throws std::invalid_argument naming the field when `options` make no sense.
  explicit RetryBudget(RetryBudgetOptions options = {})
      : options_((options.validate(), std::move(options))),
        floor_(options_.min_per_second * std::chrono::duration<double>(options_.window).count()),
        counts_(options_.window) {}
  RetryBudget(const RetryBudget&) = delete;
  RetryBudget& operator=(const RetryBudget&) = delete;
  RetryBudget(RetryBudget&&) = delete;
  RetryBudget& operator=(RetryBudget&&) = delete;
  ~RetryBudget() = default;

  /// Returns the options it was made with.
  [[nodiscard]] const RetryBudgetOptions& options() const noexcept { return options_; }
  /// Returns the time on the budget's clock.
  [[nodiscard]] time_point now() const { return now_on(options_.clock); }

  /// Records a first attempt made at `now`: it earns `ratio` retries for a window.
  void deposit(time_point now) {
    std::lock_guard<std::mutex> lock(mutex_);
    counts_.add(now, 1, 0);
    ++stats_.first_attempts;
  }
  /// Takes one retry at `now`. Returns true when the budget allows it (it is then counted), false when
  /// it is used up.
  [[nodiscard]] bool try_withdraw(time_point now) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto sums = counts_.sum(now);
    if (static_cast<double>(sums.second + 1) > allowance(sums.first)) {
      ++stats_.refused;
      return false;
    }
    counts_.add(now, 0, 1);
    ++stats_.retries;
    return true;
  }
  /// Takes back what was recorded at `at` for an attempt that was not sent after all (a first attempt
  /// when `first`, else a retry); from the window only while `at` is in it.
  void give_back(time_point at, bool first) {
    std::lock_guard<std::mutex> lock(mutex_);
    counts_.add(at, first ? -1 : 0, first ? 0 : -1);
    --(first ? stats_.first_attempts : stats_.retries);
  }

  /// Returns how many retries the budget allows at `now`.
  [[nodiscard]] std::int64_t available(time_point now) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto sums = counts_.sum(now);
    return std::max<std::int64_t>(0, static_cast<std::int64_t>(std::floor(allowance(sums.first))) - sums.second);
  }
  /// Returns the counters so far.
  [[nodiscard]] RetryBudgetStats stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  class Guard;
  /// Returns the guard of one call (see Guard): pass it to call_with_retry, alone or in guards(). The
  /// budget must outlive it.
  [[nodiscard]] Guard guard() noexcept;

 private:
  [[nodiscard]] double allowance(std::int64_t deposits) const noexcept {
    return std::max(options_.ratio * static_cast<double>(deposits), floor_);
  }

  RetryBudgetOptions options_;
  double floor_;  ///< retries per window whatever the traffic
  mutable std::mutex mutex_;
  detail::SlidingCounts counts_;  ///< first: deposits, second: withdrawals
  RetryBudgetStats stats_;
};

/// The guard of one call through a RetryBudget. A first attempt is always admitted and deposits; a
/// retry withdraws, or is refused with StopReason::retry_budget and the last failure the call saw. An
/// attempt admitted but not sent (a later guard refused it) is given back. A hedge (Attempt::hedge) is
/// admitted and records nothing: the Hedging's own budget pays for it.
class RetryBudget::Guard {
 public:
  /// What one attempt recorded, given back unless it hears how the attempt ended.
  class Ticket {
   public:
    /// What an attempt recorded at `at` (nothing for nullopt).
    Ticket(Guard& guard, std::optional<time_point> at, bool first) noexcept : guard_(&guard), at_(at), first_(first) {}
    Ticket(Ticket&& other) noexcept
        : guard_(std::exchange(other.guard_, nullptr)), at_(other.at_), first_(other.first_) {}
    Ticket& operator=(Ticket&&) = delete;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket() {
      if (guard_ != nullptr && at_) guard_->budget_->give_back(*at_, first_);
    }

    /// The attempt was sent and answered: what it recorded stays.
    template <class... Answer>
    void succeeded(const Answer&... /*answer*/) noexcept {
      guard_ = nullptr;
    }
    /// The attempt was sent and failed with `failure`: what it recorded stays, and the failure is kept
    /// for a refusal of the next retry.
    void failed(const Failure& failure) noexcept {
      guard_->last_ = failure;
      guard_ = nullptr;
    }

   private:
    Guard* guard_;
    std::optional<time_point> at_;
    bool first_;
  };

  explicit Guard(RetryBudget& budget) noexcept : budget_(&budget) {}

  /// Deposits for a first attempt (attempt.number 1) and admits it; withdraws for a retry, or refuses it
  /// with StopReason::retry_budget.
  [[nodiscard]] Admission<Ticket> admit(const Attempt& attempt) {
    if (attempt.hedge) return Admission<Ticket>::go(Ticket{*this, std::nullopt, false});
    const time_point now = budget_->now();
    const bool first = attempt.number <= 1;
    if (first) {
      budget_->deposit(now);
    } else if (!budget_->try_withdraw(now)) {
      return Admission<Ticket>::refuse(
          Refusal{StopReason::retry_budget, last_.value_or(Failure::of(FailureKind::unknown, Sent::not_sent))});
    }
    return Admission<Ticket>::go(Ticket{*this, now, first});
  }

 private:
  RetryBudget* budget_;
  std::optional<Failure> last_;
};

inline RetryBudget::Guard RetryBudget::guard() noexcept { return Guard{*this}; }

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_ADMISSION_RETRY_BUDGET_HPP
