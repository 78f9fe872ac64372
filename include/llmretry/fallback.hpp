#ifndef LLMRETRY_FALLBACK_HPP
#define LLMRETRY_FALLBACK_HPP

#include <cstddef>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "admission/circuit_breaker.hpp"
#include "admission/deployment.hpp"
#include "admission/limits.hpp"
#include "admission/retry_budget.hpp"
#include "attempt.hpp"
#include "decision.hpp"
#include "detail/config.hpp"
#include "failure.hpp"
#include "guard.hpp"
#include "policy.hpp"
#include "retry.hpp"
#include "version.hpp"
#include "vocabulary.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// Returns why a call that stopped for `stop` after `failure` (the last attempt's, or the refusal's when
/// no attempt was sent) may move to another deployment, or nullopt when no other deployment can do
/// better (a bad request, a refused key, the deadline passed, the caller cancelled...).
[[nodiscard]] constexpr std::optional<FallbackReason> fallback_reason(StopReason stop,
                                                                      const Failure& failure) noexcept {
  if (stop == StopReason::deadline || stop == StopReason::cancelled) return std::nullopt;
  if (stop == StopReason::circuit_open || stop == StopReason::no_capacity || stop == StopReason::pacing_unavailable)
    return FallbackReason::primary_unavailable;
  switch (failure.kind) {
    case FailureKind::context_length: return FallbackReason::context_length_needed;
    case FailureKind::rate_limited: return FallbackReason::rate_limit_after_retry_budget;
    case FailureKind::server_error:
    case FailureKind::timeout:
    case FailureKind::connection: return FallbackReason::provider_5xx;
    default: return std::nullopt;
  }
}

/// One deployment of a fallback chain, and the shared objects that guard its calls (each optional; they
/// must outlive the chain's calls).
struct Route {
  std::string name;      ///< names it in results and reports, such as "openai/gpt-5.5"; unique in a chain
  std::string provider;  ///< such as "openai"
  std::string model;     ///< such as "gpt-5.5"
  /// The reasons that allow moving to it from an earlier route; empty for the first (the primary).
  std::vector<FallbackReason> when;
  Deployment* deployment = nullptr;   ///< its pacing; null: none
  CircuitBreaker* breaker = nullptr;  ///< its circuit breaker; null: none
  RetryBudget* budget = nullptr;      ///< the retry budget its calls share (may be shared by routes); null: none
};

/// One move along a chain: from which route to which, and why.
struct Move {
  std::string from;
  std::string to;
  FallbackReason reason;
};

/// Why a call stayed on the route where it gave up.
enum class Stay {
  no_reason,           ///< the way it stopped allows no move (see fallback_reason)
  no_route,            ///< no later route accepts the reason
  may_have_completed,  ///< the last attempt may have been processed, the call is not safe to repeat, and
                       ///< nobody could say the operation did not complete: moving could bill twice
  completed,           ///< FallbackOptions::completed said the operation completed
};

/// Returns the name of a Stay ("no_reason", "no_route", "may_have_completed", "completed").
[[nodiscard]] constexpr const char* to_string(Stay stay) noexcept {
  switch (stay) {
    case Stay::no_reason: return "no_reason";
    case Stay::no_route: return "no_route";
    case Stay::may_have_completed: return "may_have_completed";
    case Stay::completed: return "completed";
  }
  return "unknown";
}

/// "Did the operation complete after all?" asked of the application (for instance from its operations
/// table) before moving after an ambiguous failure of a call that is not safe to repeat: true (it did;
/// do not send it again), false (it certainly did not), nullopt (unknown).
using CompletedCheck = std::function<std::optional<bool>(const Route& route, const Failure& failure)>;

/// What to do after a call gave up on a route: move to `to`, or stay.
struct FallbackStep {
  std::optional<std::size_t> to;         ///< the route to move to; nullopt: stay
  std::optional<FallbackReason> reason;  ///< why it may move (also when it stays for want of a route)
  Stay stay = Stay::no_reason;           ///< why it stays; meaningful when `to` is nullopt
};

/// An ordered list of routes: the primary, then fallbacks, each with the reasons that allow moving to it.
/// A call that gives up on a route moves to the first later route whose reasons include why it gave up.
class FallbackChain {
 public:
  /// Throws std::invalid_argument naming the route and field: no route, a name empty or used twice, a
  /// primary with reasons, or a fallback without.
  explicit FallbackChain(std::vector<Route> routes) : routes_(std::move(routes)) {
    if (routes_.empty()) detail::throw_invalid_argument("FallbackChain: at least one route is needed");
    for (std::size_t i = 0; i < routes_.size(); ++i) {
      const std::string at = "FallbackChain: routes[" + std::to_string(i) + "]";
      if (routes_[i].name.empty()) detail::throw_invalid_argument((at + ".name must not be empty").c_str());
      for (std::size_t j = 0; j < i; ++j)
        if (routes_[j].name == routes_[i].name)
          detail::throw_invalid_argument((at + ".name \"" + routes_[i].name + "\" is used twice").c_str());
      if (i == 0 && !routes_[i].when.empty())
        detail::throw_invalid_argument((at + ".when must be empty: nothing moves to the primary").c_str());
      if (i > 0 && routes_[i].when.empty())
        detail::throw_invalid_argument((at + ".when must name at least one reason to move to it").c_str());
    }
  }

  /// Returns the routes, the primary first.
  [[nodiscard]] const std::vector<Route>& routes() const noexcept { return routes_; }

  /// Decides what a call does after it stopped for `stop` on route `from`. `last_sent`: the failure of
  /// its last attempt sent there (nullopt when none was sent); `refusal`: the failure it stopped with
  /// when no attempt was sent. It stays when fallback_reason gives no reason or no later route accepts
  /// it; and, when the last attempt sent may have been processed and the call is not `safe_to_repeat`,
  /// unless `completed` says the operation did not complete (true, nullopt or no check: it stays).
  [[nodiscard]] FallbackStep after(std::size_t from, StopReason stop, const std::optional<Failure>& last_sent,
                                   const Failure& refusal, bool safe_to_repeat,
                                   const CompletedCheck& completed = {}) const {
    FallbackStep step;
    step.reason = fallback_reason(stop, last_sent ? *last_sent : refusal);
    if (!step.reason) return step;
    const auto to = next(from, *step.reason);
    if (!to) {
      step.stay = Stay::no_route;
      return step;
    }
    if (last_sent && last_sent->sent == Sent::maybe_processed && !safe_to_repeat) {
      const std::optional<bool> done = completed ? completed(routes_[from], *last_sent) : std::nullopt;
      if (done != false) {
        step.stay = done ? Stay::completed : Stay::may_have_completed;
        return step;
      }
    }
    step.to = to;
    return step;
  }

  /// Returns the first route after `from` whose reasons include `reason`, or nullopt.
  [[nodiscard]] std::optional<std::size_t> next(std::size_t from, FallbackReason reason) const noexcept {
    for (std::size_t i = from + 1; i < routes_.size(); ++i)
      for (const FallbackReason accepted : routes_[i].when)
        if (accepted == reason) return i;
    return std::nullopt;
  }

 private:
  std::vector<Route> routes_;
};

/// A call that gave up on the whole chain: where and why it stopped, and the moves before.
struct FallbackGiveUp {
  std::string route;                     ///< the route where it stopped
  GiveUp last;                           ///< how the last route's call gave up
  Stay stay;                             ///< why it did not move on
  std::optional<FallbackReason> reason;  ///< the reason it had to move, if any
  std::vector<Move> moves;               ///< the moves before, in order
};

/// The options of call_with_fallback.
struct FallbackOptions {
  /// Every route's call_with_retry options: safe_to_repeat, the one deadline of the whole chain, classify,
  /// on_give_up (told for each route given up), stats (of the last route).
  CallOptions call;
  /// The estimated cost of one attempt, reserved on each route's Deployment (see estimate_cost).
  Cost estimate;
  /// The call's class in each route's admission (Deployment::pace).
  Priority priority = Priority::interactive;
  /// The tenant the call is for (empty: none) and its weight, in each route's admission (Precedence::tenant).
  std::string tenant;
  double tenant_weight = 1.0;
  /// Asked before moving after an ambiguous failure of a call that is not safe to repeat; empty: unknown.
  CompletedCheck completed;
  /// Told each move, before the next route is called. Empty: nobody.
  std::function<void(const Move&)> on_move;
  /// Told once when the call gives up on the chain, before the last error is rethrown or the last result
  /// returned. Empty: nobody.
  std::function<void(const FallbackGiveUp&)> on_give_up;
};

/// What call_with_fallback returns: the answer, which route gave it, and the moves that led there.
template <class R>
struct Routed {
  R answer;                 ///< the answer; for a result-like call that gave up, the last failed result
  std::string route;        ///< the route that answered (or where a result-like call gave up)
  std::vector<Move> moves;  ///< the moves before, in order: empty when the primary answered
};

namespace detail {

/// A guard that admits everything and keeps the failure of the last attempt sent.
struct LastSentFailure {
  std::optional<Failure> failure;
  struct Ticket {
    LastSentFailure* owner;
    template <class... Answer>
    void succeeded(const Answer&... /*answer*/) const noexcept {}
    void failed(const Failure& f) const noexcept { owner->failure = f; }
  };
  [[nodiscard]] Admission<Ticket> admit(const Attempt& /*attempt*/) { return Admission<Ticket>::go(Ticket{this}); }
};

template <class G, class Make>
OptionalGuard<G> optional_guard(bool present, Make make) {
  return OptionalGuard<G>(present ? std::optional<G>(make()) : std::nullopt);
}

}  // namespace detail

/// The guard of one call on a route (made by route_guard): its circuit breaker, then its retry budget,
/// then its pacing, each when the route has it.
using RouteGuard = GuardSet<OptionalGuard<CircuitBreaker::Guard>, OptionalGuard<RetryBudget::Guard>,
                            OptionalGuard<Deployment::Pacing>>;

/// Returns the guard of one call on `route` whose attempts cost `estimate`, of class `priority` for
/// `tenant` of `weight` (see Deployment::pace): what call_with_fallback admits each attempt on the route
/// with, and what another driver of the route's calls uses (such as a simulator on a CallEngine). The
/// route's breaker, budget and deployment must outlive it.
[[nodiscard]] inline RouteGuard route_guard(const Route& route, const Cost& estimate,
                                            Priority priority = Priority::interactive, std::string_view tenant = {},
                                            double weight = 1.0) {
  return RouteGuard(
      detail::optional_guard<CircuitBreaker::Guard>(route.breaker != nullptr, [&] { return route.breaker->guard(); }),
      detail::optional_guard<RetryBudget::Guard>(route.budget != nullptr, [&] { return route.budget->guard(); }),
      detail::optional_guard<Deployment::Pacing>(
          route.deployment != nullptr, [&] { return route.deployment->pace(estimate, priority, tenant, weight); }));
}

/// Returns route_guard(route, options.estimate) with the class and tenant of `options`.
[[nodiscard]] inline RouteGuard route_guard(const Route& route, const FallbackOptions& options) {
  return route_guard(route, options.estimate, options.priority, options.tenant, options.tenant_weight);
}

/// Guards of the user's for each route of call_with_fallback (made by route_guards).
template <class Make>
struct RouteGuards {
  Make make;  ///< `make(const Route&)` returns the guard of one call on that route
};

/// Returns an argument of call_with_fallback that adds `make(route)` to the guards of each route's call,
/// before the route's own (breaker, budget, pacing), so that a guard that observes sees every attempt:
/// any guard, such as a Redis-backed limiter, metrics::observe(...), one of your own, or several made
/// with guards(...). A guard returned by value is made for each route's call; one returned by reference
/// (the same for every route, or one per route that you keep) is shared, and must outlive the call.
/// `make` is called once per route the call goes to, on the calling thread.
template <class Make>
[[nodiscard]] RouteGuards<std::decay_t<Make>> route_guards(Make&& make) {
  return {std::forward<Make>(make)};
}

namespace detail {

template <class T>
struct is_route_guards : std::false_type {};
template <class Make>
struct is_route_guards<RouteGuards<Make>> : std::true_type {};

/// The route guards of a call that has none.
struct NoRouteGuards {
  static NoGuard make(const Route& /*route*/) noexcept { return {}; }
};

/// Returns the RouteGuards among `parts`, or `none`.
template <class None>
None& route_guards_of(None& none) noexcept {
  return none;
}
template <class None, class First, class... Rest>
decltype(auto) route_guards_of(None& none, First& first, Rest&... rest) noexcept {
  if constexpr (is_route_guards<std::decay_t<First>>::value) return (first);
  else return route_guards_of(none, rest...);
}

/// Returns a tuple of a reference to `part`, or an empty one when it is the RouteGuards.
template <class Part>
auto unless_route_guards(Part& part) noexcept {
  if constexpr (is_route_guards<std::decay_t<Part>>::value) return std::tuple<>{};
  else return std::tuple<Part&>(part);
}

/// Returns a tuple of references to the `parts` that are not RouteGuards: what call_with_retry takes.
template <class... Parts>
auto without_route_guards(Parts&... parts) noexcept {
  return std::tuple_cat(unless_route_guards(parts)...);
}

template <class Call>
constexpr bool route_call_takes_attempt_v = std::is_invocable_v<Call&, const Route&, const Attempt&>;

template <class Call>
using route_result_t = typename std::conditional_t<route_call_takes_attempt_v<Call>,
                                                   std::invoke_result<Call&, const Route&, const Attempt&>,
                                                   std::invoke_result<Call&, const Route&>>::type;

}  // namespace detail

/// Calls `call` through the routes of `chain`, each under call_with_retry with `policy`: on the primary
/// first; when the call gives up there, FallbackChain::after decides whether it moves on, and to which
/// route. Each route's attempts pass its circuit breaker, then its retry budget, then its pacing
/// (options.estimate); the call's deadline (options.call.deadline) bounds the whole chain.
///
/// `call` takes the Route (to pick the URL, model and key) and optionally the Attempt:
/// `call(const Route&)` or `call(const Route&, const Attempt&)`. It reports failures by throwing or by
/// returning a result-like value, as for call_with_retry. `parts`: what call_with_retry takes after the
/// policy, but a guard or CallOptions (they come from the chain and options.call), and route_guards(make)
/// for guards of your own on each route.
/// Returns the answer with the route that gave it and the moves that led there. When the call gives up
/// on the chain: options.on_give_up is told, then the last exception is rethrown (AttemptRefused when no
/// attempt was sent on the last route), or, for a result-like call, the last result is returned.
/// Throws std::invalid_argument naming the field, before the first call, when the policy makes no sense.
template <class Call, class... Parts>
Routed<detail::route_result_t<Call>> call_with_fallback(const FallbackChain& chain, Call&& call,
                                                        const RetryPolicy& policy, const FallbackOptions& options,
                                                        Parts&&... parts) {
  using R = detail::route_result_t<Call>;
  using detail::Part;
  static_assert(!std::is_void_v<R>, "call_with_fallback needs a call that returns its answer");
  static_assert(detail::count_of<Part::options, Parts...>() == 0 && detail::count_of<Part::guard, Parts...>() == 0,
                "call_with_fallback takes CallOptions in FallbackOptions::call, and guards of your own through "
                "route_guards(...)");
  static_assert((0 + ... + (detail::is_route_guards<std::decay_t<Parts>>::value ? 1 : 0)) <= 1,
                "route_guards(...) may be given once");
  policy.validate();
  if (options.call.hedging != nullptr)
    detail::throw_invalid_argument("FallbackOptions::call.hedging: call_with_fallback sends one request at a time");
  detail::NoRouteGuards no_route_guards;
  auto& extra = detail::route_guards_of(no_route_guards, parts...);
  const auto retry_parts = detail::without_route_guards(parts...);
  std::vector<Move> moves;
  std::size_t at = 0;
  for (;;) {
    const Route& route = chain.routes()[at];
    std::optional<GiveUp> gave_up;
    CallOptions call_options = options.call;
    call_options.on_give_up = [&](const GiveUp& report) {
      gave_up = report;
      if (options.call.on_give_up) options.call.on_give_up(report);
    };
    detail::LastSentFailure last;
    auto guard = guards(last, extra.make(route), route_guard(route, options));
    const auto retry_on_route = [&](const auto& attempt_on_route) -> R {
      return std::apply(
          [&](auto&... kept) { return call_with_retry(attempt_on_route, policy, guard, call_options, kept...); },
          retry_parts);
    };
    const auto attempt_route = [&](const Attempt& attempt) -> R {
      if constexpr (detail::route_call_takes_attempt_v<Call>) return std::invoke(call, route, attempt);
      else return std::invoke(call, route);
    };
    // Returns the step after giving up on this route; tells on_give_up when it stays.
    const auto decide = [&]() -> FallbackStep {
      const FallbackStep step = chain.after(at, gave_up->reason, last.failure, gave_up->failure,
                                            options.call.safe_to_repeat, options.completed);
      if (step.to) {
        moves.push_back(Move{route.name, chain.routes()[*step.to].name, *step.reason});
        if (options.on_move) options.on_move(moves.back());
      } else if (options.on_give_up) {
        options.on_give_up(FallbackGiveUp{route.name, *gave_up, step.stay, step.reason, moves});
      }
      return step;
    };
    if constexpr (is_result_like_v<R>) {
      R result = retry_on_route(attempt_route);
      if (!gave_up) return Routed<R>{std::move(result), route.name, std::move(moves)};
      const FallbackStep step = decide();
      if (!step.to) return Routed<R>{std::move(result), route.name, std::move(moves)};
      at = *step.to;
    } else {
#if LLMRETRY_HAS_EXCEPTIONS
      std::exception_ptr error;
      std::optional<R> answer;
      try {
        answer.emplace(retry_on_route(attempt_route));
      } catch (...) {
        if (!gave_up) throw;  // not a failure the loop recognised: it was never retried
        error = std::current_exception();
      }
      if (!gave_up) return Routed<R>{*std::move(answer), route.name, std::move(moves)};
      const FallbackStep step = decide();
      if (!step.to) {
        if (error) std::rethrow_exception(error);
        return Routed<R>{*std::move(answer), route.name, std::move(moves)};  // an answer check rejected it
      }
      at = *step.to;
#else
      static_assert(is_result_like_v<R>, "without exceptions, the call must return a result-like value");
#endif
    }
  }
}

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_FALLBACK_HPP
