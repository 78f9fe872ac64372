#ifndef LLMRETRY_METRICS_OBSERVE_HPP
#define LLMRETRY_METRICS_OBSERVE_HPP

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

#include "../admission/limits.hpp"
#include "../admission/settlement.hpp"
#include "../attempt.hpp"
#include "../decision.hpp"
#include "../detail/config.hpp"
#include "../failure.hpp"
#include "../fallback.hpp"
#include "../guard.hpp"
#include "../retry.hpp"
#include "../version.hpp"
#include "observer.hpp"

/// Reporting the calls of call_with_retry to a metrics::Observer with one more argument: the guard
/// observe(observer, target), and report_moves for the fallbacks of call_with_fallback.

LLMRETRY_BEGIN_NAMESPACE
namespace metrics {

/// The guard of one call to `target` (see guard.hpp) that reports what it sees to an Observer; made by
/// observe(). It sees each attempt's admission and outcome, and reports:
/// - retried(target, failure of the attempt before, resend count) for each attempt sent after the
///   first, once its outcome is known (an attempt admitted but not sent, or that failed with
///   Sent::not_sent, is not a resend); the resend count is the requests of the call before it (attempts
///   and hedges);
/// - hedged(target, resend count) for each hedge sent (Attempt::hedge), once its outcome is known, and
///   hedge_won(target) when its answer came first;
/// - rate_limited(target, LimitType::unknown) for each attempt that failed with FailureKind::rate_limited
///   (a failure does not say which limit was hit);
/// - tokens_reserved(target, the estimate's tokens) for each attempt sent (not one that failed with
///   Sent::not_sent), when made with an estimate (the Cost given to Deployment::pace);
/// - tokens_used(target, the usage's tokens) after a success, when made with a usage reader that finds
///   the usage in the answer's body (see reported_usage);
/// - request_finished(target, status) once per call: "success" when the last attempt succeeded; the
///   stop reason (to_string(StopReason)) when gave_up() was told it; otherwise "gave_up" after a failed
///   attempt, or "not_sent" when the last attempt admitted here was not sent (another guard refused it,
///   or the call's deadline came during the guard's wait).
/// Tokens are counted as the tokens-per-minute limit charges them (charge_of): a negative count as 0, each
/// part at most 10^12.
/// A guard learns nothing else: it cannot see why the retry loop stopped (the attempts, the wait budget
/// and the deadline are the loop's) unless told through gave_up(); an attempt refused before this guard
/// was asked (by an earlier guard in guards(), or a deadline already passed) is unseen, and a call whose
/// first attempt is unseen reports nothing: put observe() first in guards(). A retry is counted once its
/// outcome is known, so a call that throws something that is not a std::exception does not count its last
/// resend.
///
/// Reporting never changes what a call does: nothing it does throws. An event the observer (or the usage
/// reader) throws on is dropped.
///
/// Holds per-call state: make one per call, as a temporary argument (it lives until the end of the full
/// expression, after the call returns) or a variable. A variable used for calls one after another reports
/// each call when the next one starts, and the last one when it is destroyed; it must not be used by two
/// calls at once. Movable until a call starts (so that guards() can take it); a guard moved from reports
/// nothing. Not thread-safe.
/// call_with_fallback makes each route's guards itself: report its moves with report_moves.
class ObservedCall {
 public:
  /// What one attempt holds: tells the call how the attempt ended, or that it was not sent.
  class Ticket {
   public:
    Ticket(ObservedCall& call, int number, bool hedge) noexcept : call_(&call), number_(number), hedge_(hedge) {}
    Ticket(Ticket&& other) noexcept
        : call_(std::exchange(other.call_, nullptr)), number_(other.number_), hedge_(other.hedge_) {}
    Ticket& operator=(Ticket&&) = delete;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket() {
      if (call_ != nullptr && !hedge_) call_->last_ = Last::not_sent;  // an unsent hedge leaves the call as it is
    }

    /// Reports the attempt sent, and the tokens `answer` used when the reader finds them.
    template <class... Answer>
    void succeeded(const Answer&... answer) noexcept {
      if (ObservedCall* call = std::exchange(call_, nullptr)) call->succeeded(number_, hedge_, answer...);
    }
    /// Reports the attempt sent (unless failure.sent is Sent::not_sent), and a rate-limit hit for a 429.
    void failed(const Failure& failure) noexcept {
      if (ObservedCall* call = std::exchange(call_, nullptr)) call->failed(number_, hedge_, failure);
    }
    /// Reports the attempt sent; it lost to the other request of its hedged attempt, which tells the rest.
    void lost() noexcept {
      if (ObservedCall* call = std::exchange(call_, nullptr)) call->sent(number_, hedge_);
    }

   private:
    ObservedCall* call_;
    int number_;
    bool hedge_;
  };

  /// Reports the calls to `target` to `observer`, which must outlive this guard. `estimate`: the cost
  /// reserved for each attempt (nullopt: no tokens_reserved). `read_usage`: reads the usage from a
  /// successful answer's body, as DeploymentOptions::read_usage (empty: no tokens_used).
  ObservedCall(Observer& observer, Target target, std::optional<Cost> estimate = std::nullopt,
               UsageReader read_usage = {})
      : observer_(&observer), target_(std::move(target)), estimate_(estimate), read_usage_(std::move(read_usage)) {}
  /// Takes over `other` (which then reports nothing). Requires that no call has started.
  ObservedCall(ObservedCall&& other) noexcept(
      std::is_nothrow_move_constructible_v<Target>&& std::is_nothrow_move_constructible_v<UsageReader>)
      : observer_(std::exchange(other.observer_, nullptr)),
        target_(std::move(other.target_)),
        estimate_(other.estimate_),
        read_usage_(std::move(other.read_usage_)) {}
  ObservedCall& operator=(ObservedCall&&) = delete;
  ObservedCall(const ObservedCall&) = delete;
  ObservedCall& operator=(const ObservedCall&) = delete;
  /// Reports the call that has not been reported yet (request_finished).
  ~ObservedCall() { finish(); }

  /// Admits every attempt at once. The first attempt of a call first reports the call before, if any.
  [[nodiscard]] Admission<Ticket> admit(const Attempt& attempt) noexcept {
    if (attempt.number == 1 && !attempt.hedge) finish();
    started_ = true;
    return Admission<Ticket>::go(Ticket{*this, attempt.number, attempt.hedge});
  }

  /// Reports the call's end now, with status to_string(report.reason), and a rate-limit hit of
  /// report.limit when a pacing guard refused it for want of capacity (Deployment::pace names the rate
  /// limit's dimension or the concurrency limit, redis::RateLimiter::pace the dimension). Call it from
  /// CallOptions::on_give_up (see observe()): it then also reports a call whose first attempt this guard never saw.
  void gave_up(const GiveUp& report) noexcept {
    if (last_ == Last::succeeded) finish();  // a call that succeeded gives up no more: the one before
    if (report.reason == StopReason::no_capacity && report.failure.kind == FailureKind::rate_limited)
      tell([&](Observer& observer) { observer.rate_limited(target_, report.limit); });
    end(to_string(report.reason));
  }

  /// Returns the target reported.
  [[nodiscard]] const Target& target() const noexcept { return target_; }

 private:
  enum class Last { not_sent, succeeded, failed };

  template <class... Answer>
  void succeeded(int number, bool hedge, const Answer&... answer) noexcept {
    sent(number, hedge);
    last_ = Last::succeeded;
    if (hedge) tell([&](Observer& observer) { observer.hedge_won(target_); });
    if constexpr (sizeof...(Answer) == 1) {
      if (const std::optional<Cost> usage = reported_usage(answer..., read_usage_)) {
        if (const std::uint64_t tokens = tokens_in(*usage); tokens > 0)
          tell([&](Observer& observer) { observer.tokens_used(target_, tokens); });
      }
    }
  }

  void failed(int number, bool hedge, const Failure& failure) noexcept {
    if (failure.sent != Sent::not_sent) sent(number, hedge);
    last_ = Last::failed;
    if (number != failed_number_) {
      earlier_failure_ = last_failure_;
      failed_number_ = number;
    }
    last_failure_ = failure;
    if (failure.kind == FailureKind::rate_limited)
      tell([&](Observer& observer) { observer.rate_limited(target_, LimitType::unknown); });
  }

  /// Reports a request sent. Its resend count is the requests of the call sent before it: the attempts
  /// before its own (its own too, for a hedge) and the hedges of those attempts, whatever order the
  /// outcomes of an attempt and its hedge are known in (a hedge per attempt at most).
  void sent(int number, bool hedge) noexcept {
    if (hedge) {
      ++hedges_;
      last_hedged_ = number;
      tell([&](Observer& observer) { observer.hedged(target_, number + hedges_ - 1); });
    } else if (const std::optional<Failure>& before = number > failed_number_ ? last_failure_ : earlier_failure_;
               number > 1 && before) {  // the failure of the attempt before, not one of this attempt's hedge
      const int earlier_hedges = hedges_ - (last_hedged_ == number ? 1 : 0);
      tell([&](Observer& observer) { observer.retried(target_, *before, number - 1 + earlier_hedges); });
    }
    if (const std::uint64_t tokens = estimate_ ? tokens_in(*estimate_) : 0; tokens > 0)
      tell([&](Observer& observer) { observer.tokens_reserved(target_, tokens); });
  }

  /// Returns the tokens of `cost` as the tokens-per-minute limit charges them.
  static std::uint64_t tokens_in(const Cost& cost) noexcept {
    return static_cast<std::uint64_t>(charge_of(cost, Dimension::tokens_per_minute));
  }

  void finish() noexcept {
    if (!started_) return;
    switch (last_) {
      case Last::succeeded: end("success"); break;
      case Last::failed: end("gave_up"); break;
      case Last::not_sent: end("not_sent"); break;
    }
  }

  void end(std::string_view status) noexcept {
    tell([&](Observer& observer) { observer.request_finished(target_, status); });
    started_ = false;
    last_ = Last::not_sent;
    last_failure_.reset();
    earlier_failure_.reset();
    failed_number_ = 0;
    hedges_ = 0;
    last_hedged_ = 0;
  }

  /// Calls `event(observer)`, dropping what it throws; does nothing for a guard moved from.
  template <class Event>
  void tell(const Event& event) noexcept {
    if (observer_ == nullptr) return;
#if LLMRETRY_HAS_EXCEPTIONS
    try {
      event(*observer_);
    } catch (...) {
      // dropped: metrics must not change what a call does
    }
#else
    event(*observer_);
#endif
  }

  Observer* observer_;
  Target target_;
  std::optional<Cost> estimate_;
  UsageReader read_usage_;
  bool started_ = false;
  Last last_ = Last::not_sent;
  std::optional<Failure> last_failure_;     ///< the last failure of attempt failed_number_
  std::optional<Failure> earlier_failure_;  ///< the last failure of an attempt before it
  int failed_number_ = 0;
  int hedges_ = 0;       ///< hedges of the call reported so far
  int last_hedged_ = 0;  ///< the attempt of the last of them
};

/// Returns the guard that reports one call to `target` to `observer` (see ObservedCall), for
/// call_with_retry or guards():
///
///   call_with_retry(call, policy, metrics::observe(registry, {"openai", "gpt-5.5"}));
///
/// For the exact stop reason in llm_requests_total, keep the guard in a variable and tell it:
///
///   auto observed = metrics::observe(registry, target);
///   CallOptions options;
///   options.on_give_up = [&](const GiveUp& report) { observed.gave_up(report); };
///   call_with_retry(call, policy, observed, options);
///
/// `observer` must outlive the guard.
[[nodiscard]] inline ObservedCall observe(Observer& observer, Target target) { return {observer, std::move(target)}; }

/// Returns the guard of observe(observer, target) that also reports the tokens of `estimate` reserved for
/// each attempt sent (pass the Cost given to Deployment::pace, or nullopt) and, after a success, the tokens
/// `read_usage` finds in the answer's body (the reader of DeploymentOptions::read_usage, such as
/// json::usage_of; empty, nullopt or no tokens: nothing reported).
[[nodiscard]] inline ObservedCall observe(Observer& observer, Target target, std::optional<Cost> estimate,
                                          UsageReader read_usage = {}) {
  return {observer, std::move(target), estimate, std::move(read_usage)};
}

/// Returns a FallbackOptions::on_move that reports each move of call_with_fallback as
/// fell_back(from, to, reason), the targets being the provider and model of the routes of `chain` the move
/// names, then calls `then` (when not empty). `observer` and `chain` must outlive it.
[[nodiscard]] inline std::function<void(const Move&)> report_moves(Observer& observer, const FallbackChain& chain,
                                                                   std::function<void(const Move&)> then = {}) {
  return [&observer, &chain, then = std::move(then)](const Move& move) {
    const Route* from = nullptr;
    const Route* to = nullptr;
    for (const Route& route : chain.routes()) {
      if (route.name == move.from) from = &route;
      if (route.name == move.to) to = &route;
    }
    if (from != nullptr && to != nullptr)
      observer.fell_back(Target{from->provider, from->model}, Target{to->provider, to->model}, move.reason);
    if (then) then(move);
  };
}

}  // namespace metrics
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_METRICS_OBSERVE_HPP
