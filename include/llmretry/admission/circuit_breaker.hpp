#ifndef LLMRETRY_ADMISSION_CIRCUIT_BREAKER_HPP
#define LLMRETRY_ADMISSION_CIRCUIT_BREAKER_HPP

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
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

/// The state of a circuit breaker.
enum class CircuitState {
  closed,     ///< attempts pass; their outcomes are counted
  open,       ///< attempts are refused at once until the break is over
  half_open,  ///< a few probes pass: one success closes, one failure opens again
};

/// Returns the name of a state ("closed", "open", "half_open").
[[nodiscard]] constexpr const char* to_string(CircuitState state) noexcept {
  switch (state) {
    case CircuitState::closed: return "closed";
    case CircuitState::open: return "open";
    case CircuitState::half_open: return "half_open";
  }
  return "unknown";
}

/// One change of state, as CircuitBreakerOptions::on_transition hears it.
struct CircuitTransition {
  const std::string& breaker;  ///< CircuitBreakerOptions::name
  CircuitState from = CircuitState::closed;
  CircuitState to = CircuitState::closed;
  std::chrono::steady_clock::time_point at;  ///< on the breaker's clock
};

/// When a circuit breaker opens and how it comes back.
struct CircuitBreakerOptions {
  std::string name;  ///< for reports, such as "openai/gpt-4o-mini"
  /// Opens when failures / attempts over the last `window` reach this, in (0, 1].
  double failure_ratio = 0.5;
  /// ... and at least this many attempts ended within the window (at least 1).
  int minimum_throughput = 10;
  /// The window over which outcomes are counted, in [10 ms, 1 hour].
  std::chrono::milliseconds window{std::chrono::seconds{30}};
  /// How long it stays open before letting probes through, in [1 ms, 1 hour].
  std::chrono::milliseconds break_duration{std::chrono::seconds{15}};
  /// How many attempts may be in flight at once while half-open (at least 1).
  int half_open_probes = 1;
  /// The clock; empty: the real one. A virtual-time driver passes its own.
  Clock clock;
  /// Told every change of state, after it happened, outside the breaker's lock, on the thread that
  /// caused it (which may call the breaker). Empty: nobody.
  std::function<void(const CircuitTransition&)> on_transition;

  /// Throws std::invalid_argument naming the field when a value is out of its range.
  void validate() const {
    using std::chrono::milliseconds;
    if (!(failure_ratio > 0.0 && failure_ratio <= 1.0))
      detail::throw_invalid_argument("CircuitBreakerOptions::failure_ratio must be in (0, 1]");
    if (minimum_throughput < 1)
      detail::throw_invalid_argument("CircuitBreakerOptions::minimum_throughput must be at least 1");
    if (window < milliseconds{10} || window > std::chrono::hours{1})
      detail::throw_invalid_argument("CircuitBreakerOptions::window must be in [10 ms, 1 h]");
    if (break_duration < milliseconds{1} || break_duration > std::chrono::hours{1})
      detail::throw_invalid_argument("CircuitBreakerOptions::break_duration must be in [1 ms, 1 h]");
    if (half_open_probes < 1)
      detail::throw_invalid_argument("CircuitBreakerOptions::half_open_probes must be at least 1");
  }
};

/// Counters of a CircuitBreaker since it was made.
struct CircuitBreakerStats {
  std::int64_t passed = 0;    ///< attempts let through
  std::int64_t rejected = 0;  ///< attempts refused (open, or every probe out)
  std::int64_t opened = 0;    ///< times it opened
};

/// Stops sending to a deployment that fails for everyone, and finds out when it is back. Closed, it
/// counts how attempts end over a sliding window; when at least minimum_throughput ended and the share
/// of failures reaches failure_ratio, it opens: attempts are refused at once, without touching the
/// network, for break_duration. Then it is half-open: half_open_probes attempts pass; the first to
/// succeed closes it (the count starts again), the first to fail opens it again.
/// Failures are what says the deployment is down: server errors (5xx, 529), timeouts (ambiguous ones
/// too) and failed connections. A 429 is the pacing's business and any other answer (4xx included)
/// shows the deployment up: both count as successes. Thread-safe.
class CircuitBreaker {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  /// Whether an attempt may go, from try_pass.
  struct Pass {
    bool allowed = false;          ///< it may be sent
    bool probe = false;            ///< it is a half-open probe (allowed)
    std::uint64_t generation = 0;  ///< the half-open period it probes (allowed probes)
    /// Refused while open: the time until probes may pass. nullopt when allowed, or refused because
    /// every probe is out (the breaker closes as soon as one succeeds).
    std::optional<std::chrono::milliseconds> wait;
  };

  /// Throws std::invalid_argument naming the field when `options` make no sense.
  explicit CircuitBreaker(CircuitBreakerOptions options)
      : options_((options.validate(), std::move(options))), counts_(options_.window) {}
  CircuitBreaker(const CircuitBreaker&) = delete;
  CircuitBreaker& operator=(const CircuitBreaker&) = delete;
  CircuitBreaker(CircuitBreaker&&) = delete;
  CircuitBreaker& operator=(CircuitBreaker&&) = delete;
  ~CircuitBreaker() = default;

  /// Returns the breaker's name.
  [[nodiscard]] const std::string& name() const noexcept { return options_.name; }
  /// Returns the options it was made with.
  [[nodiscard]] const CircuitBreakerOptions& options() const noexcept { return options_; }
  /// Returns the time on the breaker's clock.
  [[nodiscard]] time_point now() const { return now_on(options_.clock); }

  /// Returns true when `failure` counts against the deployment: a server error, a timeout or a failed
  /// connection.
  [[nodiscard]] static constexpr bool counts_as_failure(const Failure& failure) noexcept {
    return failure.kind == FailureKind::server_error || failure.kind == FailureKind::timeout ||
           failure.kind == FailureKind::connection;
  }

  /// Returns the state at `now`: an open breaker whose break is over is half-open.
  [[nodiscard]] CircuitState state(time_point now) {
    std::optional<Change> change;
    CircuitState result = CircuitState::closed;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      change = end_break(now);
      result = state_;
    }
    notify(change);
    return result;
  }

  /// Asks to send an attempt at `now`. Closed: allowed. Open: refused with the time until probes may
  /// pass. Half-open: allowed as a probe while fewer than half_open_probes are out, else refused.
  [[nodiscard]] Pass try_pass(time_point now) {
    std::optional<Change> change;
    Pass pass;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      change = end_break(now);
      if (state_ == CircuitState::closed) {
        pass.allowed = true;
      } else if (state_ == CircuitState::open) {
        pass.wait = std::chrono::ceil<std::chrono::milliseconds>(open_until_ - now);
      } else if (probes_out_ < options_.half_open_probes) {
        ++probes_out_;
        pass = Pass{true, true, generation_, std::nullopt};
      }
      ++(pass.allowed ? stats_.passed : stats_.rejected);
    }
    notify(change);
    return pass;
  }

  /// Records at `now` how an attempt that `pass` let through ended: `failed` when it counts as a failure
  /// (see counts_as_failure). Closed: counted, and opens on too many failures. Half-open: a probe's
  /// success closes, its failure opens again. Outcomes of attempts passed before the breaker opened
  /// are not counted.
  void record(const Pass& pass, bool failed, time_point now) {
    std::optional<Change> change;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (pass.probe) {
        if (state_ == CircuitState::half_open && pass.generation == generation_) {
          --probes_out_;
          change = failed ? open(now) : move_to(CircuitState::closed, now);
        }
      } else if (state_ == CircuitState::closed) {
        counts_.add(now, failed ? 1 : 0, 1);
        const auto counted = counts_.sum(now);
        if (failed && counted.second >= options_.minimum_throughput &&
            static_cast<double>(counted.first) >= options_.failure_ratio * static_cast<double>(counted.second))
          change = open(now);
      }
    }
    notify(change);
  }

  /// Records that an attempt `pass` let through was not sent after all: a probe's place is given back.
  void abandon(const Pass& pass) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pass.probe && state_ == CircuitState::half_open && pass.generation == generation_) --probes_out_;
  }

  /// Returns the counters so far.
  [[nodiscard]] CircuitBreakerStats stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  class Guard;
  /// Returns the guard of one call (see Guard). The breaker must outlive it.
  [[nodiscard]] Guard guard() noexcept;

 private:
  struct Change {
    CircuitState from;
    CircuitState to;
    time_point at;
  };

  /// Turns an open breaker whose break is over half-open. Requires the lock.
  std::optional<Change> end_break(time_point now) {
    if (state_ != CircuitState::open || now < open_until_) return std::nullopt;
    probes_out_ = 0;
    ++generation_;
    return move_to(CircuitState::half_open, now);
  }
  /// Opens for break_duration from `now`. Requires the lock.
  Change open(time_point now) {
    open_until_ = now + options_.break_duration;
    ++stats_.opened;
    return move_to(CircuitState::open, now);
  }
  /// Requires the lock.
  Change move_to(CircuitState to, time_point now) {
    const Change change{state_, to, now};
    state_ = to;
    if (to == CircuitState::closed) counts_.clear();
    return change;
  }
  void notify(const std::optional<Change>& change) const {
    if (change && options_.on_transition)
      options_.on_transition(CircuitTransition{options_.name, change->from, change->to, change->at});
  }

  CircuitBreakerOptions options_;
  mutable std::mutex mutex_;
  CircuitState state_ = CircuitState::closed;
  detail::SlidingCounts counts_;  ///< first: failures, second: attempts
  time_point open_until_{};
  int probes_out_ = 0;
  std::uint64_t generation_ = 0;
  CircuitBreakerStats stats_;
};

/// The guard of one call through a CircuitBreaker: refuses an attempt the breaker does not let through
/// with StopReason::circuit_open and a server_error failure, not sent, whose provider_wait is the time
/// until probes may pass (none while every probe is out); records how each attempt sent ended.
class CircuitBreaker::Guard {
 public:
  /// One attempt let through, recorded when it ends; given back (a probe's place) when it was not sent.
  class Ticket {
   public:
    Ticket(CircuitBreaker& breaker, const Pass& pass) noexcept : breaker_(&breaker), pass_(pass) {}
    Ticket(Ticket&& other) noexcept : breaker_(std::exchange(other.breaker_, nullptr)), pass_(other.pass_) {}
    Ticket& operator=(Ticket&&) = delete;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket() {
      if (breaker_ != nullptr) breaker_->abandon(pass_);
    }

    /// Records a success.
    template <class... Answer>
    void succeeded(const Answer&... /*answer*/) {
      finish(false);
    }
    /// Records `failure` (a failure when counts_as_failure, else a success).
    void failed(const Failure& failure) { finish(counts_as_failure(failure)); }
    /// Records nothing: the request lost to the other request of its hedged attempt, which says how the
    /// deployment answered. A probe's place is given back.
    void lost() noexcept {
      if (CircuitBreaker* breaker = std::exchange(breaker_, nullptr)) breaker->abandon(pass_);
    }

   private:
    void finish(bool failed) {
      if (CircuitBreaker* breaker = std::exchange(breaker_, nullptr)) breaker->record(pass_, failed, breaker->now());
    }

    CircuitBreaker* breaker_;
    Pass pass_;
  };

  explicit Guard(CircuitBreaker& breaker) noexcept : breaker_(&breaker) {}

  /// Admits the attempt when the breaker lets it through, else refuses it with StopReason::circuit_open.
  [[nodiscard]] Admission<Ticket> admit(const Attempt& /*attempt*/) {
    const Pass pass = breaker_->try_pass(breaker_->now());
    if (pass.allowed) return Admission<Ticket>::go(Ticket{*breaker_, pass});
    Failure failure = Failure::of(FailureKind::server_error, Sent::not_sent);
    failure.provider_wait = pass.wait;
    return Admission<Ticket>::refuse(Refusal{StopReason::circuit_open, failure});
  }

 private:
  CircuitBreaker* breaker_;
};

inline CircuitBreaker::Guard CircuitBreaker::guard() noexcept { return Guard{*this}; }

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_ADMISSION_CIRCUIT_BREAKER_HPP
