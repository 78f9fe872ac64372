#ifndef LLMRETRY_ASIO_FALLBACK_HPP
#define LLMRETRY_ASIO_FALLBACK_HPP

#include <boost/asio/async_result.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/post.hpp>

#include <cstddef>
#include <exception>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "../detail/config.hpp"
#include "../fallback.hpp"
#include "../version.hpp"
#include "call.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace asio {

/// The completion signature of async_call_with_fallback<R>: the exception that ended the call (null on
/// success) and the answer with the route that gave it (an empty answer when there is none).
template <class R>
using FallbackSignature = void(std::exception_ptr, Routed<R>);

/// Where async_call_with_fallback calls the guards of every route: on `executor` (see GuardOn), a bounded
/// pool, instead of the call's own executor. Made by guards_on.
template <class Executor>
struct GuardsOn {
  using executor_type = Executor;
  Executor executor;
};

/// Returns the argument of async_call_with_fallback that calls every route's guards on `executor`: for
/// guards that make network round trips, such as a Deployment pacing through Redis
/// (DeploymentOptions::shared), so that one slow round trip holds up no other call of the call's executor.
template <class Executor>
[[nodiscard]] GuardsOn<Executor> guards_on(const Executor& executor) {
  return {executor};
}

namespace detail {

/// The guards of a call called on its own executor.
struct GuardsHere {
  using executor_type = boost::asio::any_io_executor;
};

/// The guards of one call on a route: the last failure sent, the user's route guards, the route's own.
template <class Make>
using RouteGuardSet = decltype(guards(std::declval<::llmretry::detail::LastSentFailure&>(),
                                      std::declval<Make&>()(std::declval<const Route&>()),
                                      route_guard(std::declval<const Route&>(), std::declval<const Cost&>())));

/// The composed operation of async_call_with_fallback: one async_call_with_retry per route, FallbackChain::after
/// between them.
template <class R, class RouteAttempt, class Make, class Executor, class On>
class FallbackOp {
  using GuardExecutor = typename On::executor_type;
  /// What the call keeps from one route to the next, allocated once per call.
  struct State {
    State(const FallbackChain& chain_in, const FallbackOptions& options_in, RouteAttempt attempt_in, Make make_in)
        : chain(chain_in), options(options_in), attempt(std::move(attempt_in)), make(std::move(make_in)) {}

    const FallbackChain& chain;
    const FallbackOptions& options;
    RouteAttempt attempt;
    Make make;
    std::size_t at = 0;                        ///< the route the call is on
    std::vector<Move> moves;                   ///< the moves so far
    CallOptions call;                          ///< options.call, its on_give_up also keeping gave_up
    std::optional<GiveUp> gave_up;             ///< how the route's call gave up, when it did
    ::llmretry::detail::LastSentFailure last;  ///< the failure of the last attempt sent on the route
    std::optional<RouteGuardSet<Make>> guard;  ///< the route's guards, made when the call moves there
    std::optional<GuardOn<RouteGuardSet<Make>, GuardExecutor>> hop;  ///< `guard` on GuardsOn's executor
  };

  /// The attempt of async_call_with_retry on one route: the user's, told which route.
  struct OnRoute {
    State* state;
    template <class Handler>
    void operator()(const Attempt& attempt, Handler&& handler) {
      state->attempt(state->chain.routes()[state->at], attempt, std::forward<Handler>(handler));
    }
  };

 public:
  FallbackOp(const FallbackChain& chain, RouteAttempt attempt, const RetryPolicy& policy,
             const FallbackOptions& options, Make make, const Executor& executor, On on)
      : policy_(&policy),
        executor_(executor),
        on_(std::move(on)),
        state_(std::make_unique<State>(chain, options, std::move(attempt), std::move(make))) {}

  /// The start: calls the primary.
  template <class Self>
  void operator()(Self& self) {
    state_->call = state_->options.call;
    state_->call.on_give_up = [state = state_.get()](const GiveUp& report) {
      state->gave_up = report;
      if (state->options.call.on_give_up) state->options.call.on_give_up(report);
    };
    call_route(self);
  }

  /// The call on the current route ended: `error` null with `answer`, or gave up with `error`.
  template <class Self>
  void operator()(Self& self, std::exception_ptr error, R answer) {
    State& state = *state_;
    const Route& route = state.chain.routes()[state.at];
    if (!state.gave_up) {  // an answer, or what the loop did not recognise (never retried): passed on
      complete(self, std::move(error), Routed<R>{std::move(answer), route.name, std::move(state.moves)});
      return;
    }
    // A cancel that came while the route's call was on the guards' executor, too late to stop it there,
    // still keeps the call from moving.
    const StopReason stop =
        self.cancelled() != boost::asio::cancellation_type::none ? StopReason::cancelled : state.gave_up->reason;
    FallbackStep step;
    try {
      step = state.chain.after(state.at, stop, state.last.failure, state.gave_up->failure,
                               state.options.call.safe_to_repeat, state.options.completed);
      if (step.to) {
        state.moves.push_back(Move{route.name, state.chain.routes()[*step.to].name, *step.reason});
        if (state.options.on_move) state.options.on_move(state.moves.back());
      } else if (state.options.on_give_up) {
        state.options.on_give_up(FallbackGiveUp{route.name, *state.gave_up, step.stay, step.reason, state.moves});
      }
    } catch (...) {
      complete(self, std::current_exception(), Routed<R>{R{}, route.name, std::move(state.moves)});
      return;
    }
    if (!step.to) {
      complete(self, std::move(error), Routed<R>{std::move(answer), route.name, std::move(state.moves)});
      return;
    }
    state.at = *step.to;
    call_route(self);
  }

 private:
  /// Calls the current route under async_call_with_retry, with its guards made anew.
  template <class Self>
  void call_route(Self& self) {
    State& state = *state_;
    const Route& route = state.chain.routes()[state.at];
    state.gave_up.reset();
    state.last.failure.reset();
    state.hop.reset();
    state.guard.reset();
    try {
      state.guard.emplace(guards(state.last, state.make(route), route_guard(route, state.options)));
    } catch (...) {
      // Never completed inside the initiation: through post, as a call that did not give up.
      boost::asio::post(executor_,
                        [self = std::move(self), error = std::current_exception()]() mutable { self(error, R{}); });
      return;
    }
    if constexpr (std::is_same_v<On, GuardsHere>) {
      async_call_with_retry<R>(executor_, OnRoute{&state}, *policy_, *state.guard, state.call, std::move(self));
    } else {
      state.hop.reset();
      state.hop.emplace(on_.executor, *state.guard);
      async_call_with_retry<R>(executor_, OnRoute{&state}, *policy_, *state.hop, state.call, std::move(self));
    }
  }

  template <class Self>
  void complete(Self& self, std::exception_ptr error, Routed<R> routed) {
    state_.reset();
    self.complete(std::move(error), std::move(routed));
  }

  const RetryPolicy* policy_;
  Executor executor_;
  On on_;
  std::unique_ptr<State> state_;
};

/// The route guards of a call that has none.
struct NoRouteGuardsMaker {
  NoGuard operator()(const Route& /*route*/) const noexcept { return {}; }
};

}  // namespace detail

namespace detail {

/// Checks the arguments, then starts the FallbackOp.
template <class R, class Executor, class RouteAttempt, class Make, class On, class Token>
auto start_fallback(const Executor& executor, const FallbackChain& chain, RouteAttempt&& attempt,
                    const RetryPolicy& policy, const FallbackOptions& options, Make make, On on, Token&& token) {
  static_assert(std::is_default_constructible_v<R> && std::is_move_constructible_v<R>,
                "async_call_with_fallback<R>: R must be default-constructible and movable");
  policy.validate();
  if (options.call.hedging != nullptr)
    ::llmretry::detail::throw_invalid_argument(
        "FallbackOptions::call.hedging: async_call_with_fallback sends one request at a time");
  using Op = FallbackOp<R, std::decay_t<RouteAttempt>, Make, Executor, On>;
  return boost::asio::async_compose<Token, FallbackSignature<R>>(
      Op(chain, std::forward<RouteAttempt>(attempt), policy, options, std::move(make), executor, std::move(on)), token,
      executor);
}

}  // namespace detail

/// Calls `attempt` through the routes of `chain`, asynchronously, as call_with_fallback does blocking: each
/// route under async_call_with_retry with `policy` (its waits timers on `executor`); when the call gives up
/// on a route, FallbackChain::after decides whether it moves on, and to which route. Each route's attempts
/// pass `make(route)` (guards of your own, from route_guards(make); none without it), then the route's
/// circuit breaker, retry budget and pacing (options.estimate); options.call.deadline bounds the whole chain.
///
/// `attempt(const Route&, const llmretry::Attempt&, Handler handler)` starts one attempt on the route, an
/// asynchronous operation that completes with `handler(std::exception_ptr error, R answer)`, as the attempt of
/// async_call_with_retry does (the same requirements: never inside its own call, honour the cancellation
/// slot).
///
/// Completes with FallbackSignature<R>: `(nullptr, routed)` with the answer, the route that gave it and the
/// moves; when it gives up on the chain, options.on_give_up is told, then it completes with the last route's
/// exception (AttemptRefused when no attempt was sent there) and an empty answer. What options.on_move,
/// options.on_give_up, options.completed or `make` throw ends the call with that exception. A cancel (per
/// operation, as for async_call_with_retry) stops the route under way; the call never moves after one.
///
/// `chain`, `policy` and `options` are held by reference and must outlive the operation; `attempt` and `make`
/// are moved in. Every guard is called on `executor`, unless given guards_on(pool) (see GuardsOn). Requires: R is
/// default-constructible and movable, and options.call.hedging is null (std::invalid_argument otherwise, before
/// anything starts, as for a policy that makes no sense).
template <class R, class Executor, class RouteAttempt, class Make, class GuardExecutor, class Token>
auto async_call_with_fallback(const Executor& executor, const FallbackChain& chain, RouteAttempt&& attempt,
                              const RetryPolicy& policy, const FallbackOptions& options, RouteGuards<Make> make,
                              GuardsOn<GuardExecutor> on, Token&& token) {
  return detail::start_fallback<R>(executor, chain, std::forward<RouteAttempt>(attempt), policy, options,
                                   std::move(make.make), std::move(on), std::forward<Token>(token));
}

/// async_call_with_fallback with guards of your own, all called on `executor`.
template <class R, class Executor, class RouteAttempt, class Make, class Token>
auto async_call_with_fallback(const Executor& executor, const FallbackChain& chain, RouteAttempt&& attempt,
                              const RetryPolicy& policy, const FallbackOptions& options, RouteGuards<Make> make,
                              Token&& token) {
  return detail::start_fallback<R>(executor, chain, std::forward<RouteAttempt>(attempt), policy, options,
                                   std::move(make.make), detail::GuardsHere{}, std::forward<Token>(token));
}

/// async_call_with_fallback with no guards of your own.
template <class R, class Executor, class RouteAttempt, class Token>
auto async_call_with_fallback(const Executor& executor, const FallbackChain& chain, RouteAttempt&& attempt,
                              const RetryPolicy& policy, const FallbackOptions& options, Token&& token) {
  return async_call_with_fallback<R>(executor, chain, std::forward<RouteAttempt>(attempt), policy, options,
                                     route_guards(detail::NoRouteGuardsMaker{}), std::forward<Token>(token));
}

}  // namespace asio
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_ASIO_FALLBACK_HPP
