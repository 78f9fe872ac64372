#ifndef LLMRETRY_VOCABULARY_HPP
#define LLMRETRY_VOCABULARY_HPP

/// The names every part of llmretry shares, in one light header that any header may include (the
/// engine and its drivers, the guards, the metrics, the simulator, the stores, the tools): why a call
/// stopped (StopReason), why it waits (WaitReason), which limit refused it (LimitType), a guard's refusal
/// (Refusal), what a call that gave up reports and what a call spent (GiveUp, CallStats), what a call
/// costs or used (Cost), why it moved to another deployment (FallbackReason). It includes only
/// failure.hpp and light standard headers: no <functional>, no policy, guard or admission code.
/// CallOptions, which holds std::function and a Clock, is the engine's (engine.hpp); AttemptRefused, an
/// exception, is with the others in errors.hpp.

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string_view>

#include "detail/saturate.hpp"
#include "failure.hpp"
#include "version.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// Why a call stopped retrying.
enum class StopReason {
  not_retryable,           ///< the failure cannot succeed on another attempt (400, 401, quota...)
  not_safe_to_repeat,      ///< the request may have been processed and the call is not safe to repeat
  provider_declined,       ///< the provider said `x-should-retry: false`
  attempts_exhausted,      ///< max_attempts were made
  wait_budget,             ///< the next wait would take the total past max_total_wait
  provider_wait_too_long,  ///< the provider asked for a wait above max_provider_wait
  deadline,                ///< the next wait would end after the call's deadline, or it has passed
  refused,                 ///< a guard refused the next attempt (see guard.hpp)
  no_capacity,             ///< the deployment cannot take the call: its cost exceeds a limit, or its
                           ///< capacity comes later than the call may wait
  retry_budget,            ///< the retries shared by the calls to a deployment are used up (RetryBudget)
  circuit_open,            ///< the deployment's circuit breaker is open (CircuitBreaker)
  pacing_unavailable,      ///< the pacing state shared with other processes could not be reached, and the
                           ///< deployment fails closed (DeploymentOptions::when_shared_fails)
  cancelled,               ///< the caller cancelled the call (an asynchronous driver's cancellation)
};

/// Returns the snake_case name of a stop reason, such as "attempts_exhausted".
[[nodiscard]] constexpr const char* to_string(StopReason reason) noexcept {
  switch (reason) {
    case StopReason::not_retryable: return "not_retryable";
    case StopReason::not_safe_to_repeat: return "not_safe_to_repeat";
    case StopReason::provider_declined: return "provider_declined";
    case StopReason::attempts_exhausted: return "attempts_exhausted";
    case StopReason::wait_budget: return "wait_budget";
    case StopReason::provider_wait_too_long: return "provider_wait_too_long";
    case StopReason::deadline: return "deadline";
    case StopReason::refused: return "refused";
    case StopReason::no_capacity: return "no_capacity";
    case StopReason::retry_budget: return "retry_budget";
    case StopReason::circuit_open: return "circuit_open";
    case StopReason::pacing_unavailable: return "pacing_unavailable";
    case StopReason::cancelled: return "cancelled";
  }
  return "unknown";
}

/// Why a call waits before its next attempt: what a driver's sleep or timer is told with the wait.
enum class WaitReason {
  backoff,   ///< after a failure: the policy's backoff
  provider,  ///< after a failure: the wait the provider asked for (Retry-After), longer than the backoff
  capacity,  ///< before an attempt: a guard has no capacity for it sooner (a rate limit, a 429's pause)
  slot,      ///< before an attempt: in line for a concurrency slot, at most the wait; ends early when the
             ///< slot comes (the guard tells the call's Waker)
};

/// Returns the snake_case name of a wait reason: "backoff", "provider", "capacity" or "slot".
[[nodiscard]] constexpr const char* to_string(WaitReason reason) noexcept {
  switch (reason) {
    case WaitReason::backoff: return "backoff";
    case WaitReason::provider: return "provider";
    case WaitReason::capacity: return "capacity";
    case WaitReason::slot: return "slot";
  }
  return "unknown";
}

/// Which limit a rate-limit hit or a refusal for want of capacity ran into.
enum class LimitType {
  requests,     ///< requests per minute (or per day)
  tokens,       ///< tokens per minute (or per day), input or output tokens
  concurrency,  ///< requests in flight
  unknown,      ///< not said (a provider's 429, a guard that does not know)
};

/// Returns the snake_case name of a limit type: "requests", "tokens", "concurrency" or "unknown".
[[nodiscard]] constexpr const char* to_string(LimitType type) noexcept {
  switch (type) {
    case LimitType::requests: return "requests";
    case LimitType::tokens: return "tokens";
    case LimitType::concurrency: return "concurrency";
    case LimitType::unknown: break;
  }
  return "unknown";
}

/// A guard's refusal of an attempt: the reason the call stops and the failure its caller reads.
struct Refusal {
  StopReason reason = StopReason::refused;
  Failure failure;                       ///< what the caller sees, such as a wait after which the guard may admit again
  LimitType limit = LimitType::unknown;  ///< for a refusal for want of capacity: the limit that refused
};

/// What a call that gave up reports: why it stopped, the last failure, and what it had spent.
struct GiveUp {
  StopReason reason;
  Failure failure;  ///< the last failure, or the refusal's (kind unknown for an unrecognised exception)
  int attempts;     ///< attempts made, the last one included
  std::chrono::milliseconds waited;      ///< total time waited between and before attempts
  LimitType limit = LimitType::unknown;  ///< the limit of the guard's refusal that stopped it, when it said
};

/// What one call spent, whether it succeeded or gave up.
struct CallStats {
  int attempts = 0;                     ///< attempts made
  std::chrono::milliseconds waited{0};  ///< the waits between and before attempts, as CallEngine::waited()
  std::optional<StopReason> stopped;    ///< why it gave up; nullopt when it succeeded or was abandoned
  int hedges = 0;                       ///< hedges sent (CallOptions::hedging): requests beyond `attempts`
};

/// What one call costs, estimated before it is sent (the upper bound: the prompt and max output tokens)
/// or measured from the response's usage (json::usage_of); what a rate limit is charged, and what an
/// operation's record keeps (store::Operation::usage).
struct Cost {
  std::int64_t requests = 1;       ///< requests: 1 per attempt
  std::int64_t input_tokens = 0;   ///< prompt tokens
  std::int64_t output_tokens = 0;  ///< output tokens (estimated: max_tokens x n)

  /// Returns input plus output tokens, saturated to the range of std::int64_t (a usage reported is untrusted).
  [[nodiscard]] constexpr std::int64_t tokens() const noexcept {
    return detail::saturated_sum(input_tokens, output_tokens);
  }

  friend constexpr bool operator==(const Cost& a, const Cost& b) noexcept {
    return a.requests == b.requests && a.input_tokens == b.input_tokens && a.output_tokens == b.output_tokens;
  }
  friend constexpr bool operator!=(const Cost& a, const Cost& b) noexcept { return !(a == b); }
};

/// Why a call that gave up on one deployment may move to another.
enum class FallbackReason {
  provider_5xx,                   ///< it failed on server errors, timeouts or failed connections
  rate_limit_after_retry_budget,  ///< it was still answered 429 when its retries (or waits) ran out
  context_length_needed,          ///< the prompt is longer than the model accepts: a bigger window helps
  primary_unavailable,            ///< not sent: the circuit breaker is open, or no capacity came in time
};

/// Returns the name of a reason, as routing policies spell it ("provider_5xx", ...).
[[nodiscard]] constexpr const char* to_string(FallbackReason reason) noexcept {
  switch (reason) {
    case FallbackReason::provider_5xx: return "provider_5xx";
    case FallbackReason::rate_limit_after_retry_budget: return "rate_limit_after_retry_budget";
    case FallbackReason::context_length_needed: return "context_length_needed";
    case FallbackReason::primary_unavailable: return "primary_unavailable";
  }
  return "unknown";
}

/// Returns the reason named `name` (as to_string spells it), or nullopt.
[[nodiscard]] inline std::optional<FallbackReason> fallback_reason_named(std::string_view name) noexcept {
  for (const auto reason : {FallbackReason::provider_5xx, FallbackReason::rate_limit_after_retry_budget,
                            FallbackReason::context_length_needed, FallbackReason::primary_unavailable})
    if (name == to_string(reason)) return reason;
  return std::nullopt;
}

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_VOCABULARY_HPP
