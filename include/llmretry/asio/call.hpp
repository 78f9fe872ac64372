#ifndef LLMRETRY_ASIO_CALL_HPP
#define LLMRETRY_ASIO_CALL_HPP

#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/basic_waitable_timer.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/recycling_allocator.hpp>
#include <boost/asio/wait_traits.hpp>
#include <boost/system/system_error.hpp>

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "../attempt.hpp"
#include "../detail/config.hpp"
#include "../engine.hpp"
#include "../errors.hpp"
#include "../failure.hpp"
#include "../guard.hpp"
#include "../policy.hpp"
#include "../random.hpp"
#include "../retry.hpp"
#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace asio {

/// The completion signature of async_call_with_retry<R>: the exception that ended the call (null on
/// success) and the answer (R{} when there is none).
template <class R>
using CallSignature = void(std::exception_ptr, R);

namespace detail {

/// The longest a wait for a concurrency slot lasts before the driver looks at the slot again: the engine is
/// given no Waker, so the guard answers short waits.
inline constexpr std::chrono::milliseconds slot_poll{10};

/// The guard and the options of a call that passes none (stateless or never written: shared).
inline NoGuard no_guard;
inline const CallOptions no_options{};

/// Returns the exception a cancelled call completes with: boost::system::system_error holding
/// boost::asio::error::operation_aborted, as Asio's own operations report a cancellation.
inline std::exception_ptr cancelled_error() {
  return std::make_exception_ptr(
      boost::system::system_error(boost::asio::error::operation_aborted, "llmretry: call cancelled"));
}

/// What one call keeps between its steps, allocated once per call: the engine (which holds the policy, the
/// guard and the options by reference), the attempt, the timer of its waits (made at the first wait only)
/// and the last failure's exception.
template <class Attempt, class Guard, class Executor>
struct CallState {
  using Timer = boost::asio::basic_waitable_timer<std::chrono::steady_clock,
                                                  boost::asio::wait_traits<std::chrono::steady_clock>, Executor>;

  CallState(const RetryPolicy& policy, Guard& guard, const CallOptions& options, Attempt&& attempt_in,
            const Executor& executor_in)
      : engine(::llmretry::detail::prevalidated, policy, guard, options),
        attempt(std::move(attempt_in)),
        executor(executor_in) {}

  CallEngine<Guard&, CallOptions> engine;
  Attempt attempt;
  Executor executor;
  std::optional<Timer> timer;
  std::exception_ptr error;  ///< the last failure's exception: what the call ends with when it gives up
  ThreadRng rng;
};

/// The composed operation of async_call_with_retry: carries out the engine's steps, each wait on a timer.
template <class R, class Attempt, class Guard, class Executor>
class CallOp {
 public:
  using State = CallState<Attempt, Guard, Executor>;

  CallOp(const RetryPolicy& policy, Guard& guard, const CallOptions& options, Attempt attempt, const Executor& executor)
      : policy_(&policy), guard_(&guard), options_(&options), attempt_(std::move(attempt)), executor_(executor) {}

  /// The start: allocates the call's state and carries out the first step. Called again through post
  /// when the first step was the end (a refusal), so that the handler never runs inside the initiation.
  template <class Self>
  void operator()(Self& self) {
    if (state_) {
      finish(self, std::make_exception_ptr(AttemptRefused(*state_->engine.first_refusal())), R{});
      return;
    }
    allocate(self);
    const Step step = state_->engine.start();
    if (step.kind == Step::Kind::done) {
      boost::asio::post(state_->executor, std::move(self));
      return;
    }
    next(self, step);
  }

  /// An attempt completed: `error` null and `answer` the answer, or `error` the failure.
  template <class Self>
  void operator()(Self& self, std::exception_ptr error, R answer) {
    State& state = *state_;
    if (!error) {  // an answer is delivered, even when a cancel came too late to stop it
      if (step_of(self, [&] { return state.engine.succeeded(std::as_const(answer)); }))
        finish(self, nullptr, std::move(answer));
      return;
    }
    if (self.cancelled() != boost::asio::cancellation_type::none) {  // the attempt may have been processed
      if (step_of(self, [&] { return state.engine.cancelled(failure_of(error, Sent::maybe_processed)); }))
        finish(self, cancelled_error(), R{});
      return;
    }
    if (!is_std_exception(error)) {  // not even a std::exception: never retried, passed on unchanged
      state.engine.abandoned();
      finish(self, std::move(error), R{});
      return;
    }
    const std::optional<Step> step = step_of(self, [&] {
      const Failure failure = failure_of(error, Sent::maybe_processed);
      state.error = std::move(error);
      return state.engine.failed(failure, state.rng);
    });
    if (step) next(self, *step);
  }

  /// A wait ended: on time, or cancelled.
  template <class Self>
  void operator()(Self& self, boost::system::error_code /*ended*/) {
    State& state = *state_;
    if (self.cancelled() != boost::asio::cancellation_type::none) {
      const std::optional<Step> done = step_of(self, [&] {
        const Failure failure =
            state.error ? failure_of(state.error, Sent::not_sent) : Failure::of(FailureKind::unknown, Sent::not_sent);
        return state.engine.cancelled(failure);
      });
      if (done) finish(self, cancelled_error(), R{});
      return;
    }
    if (const std::optional<Step> step = step_of(self, [&] { return state.engine.resume(); })) next(self, *step);
  }

 private:
  /// Allocates the state with the handler's allocator (Asio's recycling allocator when it has none, so that
  /// a thread running calls one after another reuses the memory).
  template <class Self>
  void allocate(Self& self) {
    using HandlerAllocator = decltype(self.get_allocator());
    if constexpr (std::is_same_v<HandlerAllocator, std::allocator<void>>) {
      state_ = std::allocate_shared<State>(boost::asio::recycling_allocator<State>(), *policy_, *guard_, *options_,
                                           std::move(attempt_), executor_);
    } else {
      using Rebound = typename std::allocator_traits<HandlerAllocator>::template rebind_alloc<State>;
      state_ = std::allocate_shared<State>(Rebound(self.get_allocator()), *policy_, *guard_, *options_,
                                           std::move(attempt_), executor_);
    }
  }

  /// Carries out `step` after the start: an attempt, a wait on the timer, or the end.
  template <class Self>
  void next(Self& self, const Step& step) {
    State& state = *state_;
    switch (step.kind) {
      case Step::Kind::attempt: {
        Attempt& attempt = state.attempt;
        attempt(state.engine.attempt(), std::move(self));  // the state stays where it is: only `self` moves
        return;
      }
      case Step::Kind::wait: {
        if (!state.timer) state.timer.emplace(state.executor);
        state.timer->expires_after(step.reason == WaitReason::slot ? std::min(step.wait, slot_poll) : step.wait);
        state.timer->async_wait(std::move(self));
        return;
      }
      case Step::Kind::done: break;
    }
    const GiveUp* gave_up = state.engine.gave_up();
    if (state.error) {
      finish(self, std::exchange(state.error, nullptr), R{});
    } else {  // refused before a failure with an exception: the refusal
      finish(self, std::make_exception_ptr(AttemptRefused(Refusal{gave_up->reason, gave_up->failure, gave_up->limit})),
             R{});
    }
  }

  /// Returns the step `decide()` returns, or completes the call with what it throws and returns nullopt:
  /// a step of the engine may throw what the guard's admission, its ticket, options.on_give_up or
  /// options.classify throw, and the call's handler must run all the same.
  template <class Self, class Decide>
  std::optional<Step> step_of(Self& self, Decide&& decide) {
    std::exception_ptr thrown;
    try {
      return std::forward<Decide>(decide)();
    } catch (...) {
      thrown = std::current_exception();
    }
    finish(self, std::move(thrown), R{});  // outside the try: what the handler throws is not caught here
    return std::nullopt;
  }

  /// Frees the call's state (giving back what its guard's ticket holds), then completes.
  template <class Self>
  void finish(Self& self, std::exception_ptr error, R answer) {
    state_.reset();
    self.complete(std::move(error), std::move(answer));
  }

  /// Returns the failure `error` means (CallOptions::classify, else failure_of); unknown, with `sent`,
  /// when nobody recognises it.
  Failure failure_of(const std::exception_ptr& error, Sent sent) const {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& exception) {
      return ::llmretry::detail::classify_exception(*options_, exception);
    } catch (...) {
      return Failure::of(FailureKind::unknown, sent);
    }
  }

  static bool is_std_exception(const std::exception_ptr& error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception&) {
      return true;
    } catch (...) {
      return false;
    }
  }

  const RetryPolicy* policy_;
  Guard* guard_;
  const CallOptions* options_;
  Attempt attempt_;
  Executor executor_;
  std::shared_ptr<State> state_;
};

}  // namespace detail

/// Calls `attempt` until it succeeds or `policy` says stop, asynchronously: the Asio driver of a
/// CallEngine. Every wait (the backoff, the provider's Retry-After, a guard's wait for capacity, a
/// concurrency slot looked at every 10 ms) is a timer on `executor`, never a blocked thread.
///
/// `attempt(const llmretry::Attempt&, Handler handler)` starts one attempt, an asynchronous operation that
/// completes with `handler(std::exception_ptr error, R answer)`: `error` null on success, else the failure
/// (a ProviderError or what CallOptions::classify recognises is retried as the policy says; any other
/// std::exception is an unknown failure, never retried; anything else is passed on unchanged). It must not
/// call `handler` inside its own call (post it), and should honour the handler's cancellation slot (Asio's
/// own operations do). Bound its timeout by Attempt::time_left when the call has a deadline.
///
/// Completes with CallSignature<R>: `(nullptr, answer)` on success; `(error, R{})` when it gives up: the
/// last failure's exception, AttemptRefused when a guard or the deadline refused an attempt before any
/// failure, boost::system::system_error(boost::asio::error::operation_aborted) when the caller cancelled it
/// (per-operation cancellation: bind_cancellation_slot, or the parallel group / awaitable operators that
/// emit it). A cancel stops the wait under way, or is passed to the attempt in flight through its handler;
/// the call then stops, never retries, and gives back what its guard holds (the stop reason is
/// StopReason::cancelled, in CallOptions::stats and on_give_up). `token` is any completion token: a
/// callback, boost::asio::use_future, boost::asio::deferred, boost::asio::use_awaitable.
///
/// `policy`, `guard` and `options` are held by reference and must outlive the operation; `attempt` is moved
/// in. The call's state (its engine and attempt) is allocated once, with the handler's associated allocator
/// (Asio's recycling allocator when it has none); a first attempt that succeeds starts no timer, draws no
/// random number and reads no clock (with a deadline, the clock is read before each attempt).
/// What the guard (its admission or its ticket), options.on_give_up or options.classify throws ends the call
/// with that exception, through the handler; thrown by the initiating function when it comes from the
/// first admission. `attempt` itself must not throw (what it throws leaves the call's handler never run).
/// Requires: R is default-constructible and movable.
/// Throws std::invalid_argument naming the field, before anything starts, when the policy makes no sense.
template <class R, class Executor, class AsyncAttempt, class Guard, class Token,
          class = std::enable_if_t<::llmretry::detail::is_guard<Guard>::value>>
auto async_call_with_retry(const Executor& executor, AsyncAttempt&& attempt, const RetryPolicy& policy, Guard& guard,
                           const CallOptions& options, Token&& token) {
  static_assert(std::is_default_constructible_v<R> && std::is_move_constructible_v<R>,
                "async_call_with_retry<R>: R must be default-constructible and movable");
  policy.validate();
  using Op = detail::CallOp<R, std::decay_t<AsyncAttempt>, Guard, Executor>;
  return boost::asio::async_compose<Token, CallSignature<R>>(
      Op(policy, guard, options, std::forward<AsyncAttempt>(attempt), executor), token, executor);
}

/// async_call_with_retry with a guard and default CallOptions.
template <class R, class Executor, class AsyncAttempt, class Guard, class Token,
          class = std::enable_if_t<::llmretry::detail::is_guard<Guard>::value>>
auto async_call_with_retry(const Executor& executor, AsyncAttempt&& attempt, const RetryPolicy& policy, Guard& guard,
                           Token&& token) {
  return async_call_with_retry<R>(executor, std::forward<AsyncAttempt>(attempt), policy, guard, detail::no_options,
                                  std::forward<Token>(token));
}

/// async_call_with_retry with CallOptions and no guard.
template <class R, class Executor, class AsyncAttempt, class Token>
auto async_call_with_retry(const Executor& executor, AsyncAttempt&& attempt, const RetryPolicy& policy,
                           const CallOptions& options, Token&& token) {
  return async_call_with_retry<R>(executor, std::forward<AsyncAttempt>(attempt), policy, detail::no_guard, options,
                                  std::forward<Token>(token));
}

/// async_call_with_retry with no guard and default CallOptions.
template <class R, class Executor, class AsyncAttempt, class Token>
auto async_call_with_retry(const Executor& executor, AsyncAttempt&& attempt, const RetryPolicy& policy, Token&& token) {
  return async_call_with_retry<R>(executor, std::forward<AsyncAttempt>(attempt), policy, detail::no_guard,
                                  detail::no_options, std::forward<Token>(token));
}

}  // namespace asio
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_ASIO_CALL_HPP
