#ifndef LLMRETRY_METRICS_OBSERVER_HPP
#define LLMRETRY_METRICS_OBSERVER_HPP

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "../failure.hpp"
#include "../version.hpp"
#include "../vocabulary.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace metrics {

/// What a call is sent to: the labels `provider` and `model` (OpenTelemetry gen_ai.provider.name and
/// gen_ai.request.model).
struct Target {
  std::string provider;  ///< such as "openai"
  std::string model;     ///< such as "gpt-5.5"
};

/// A queue a request waits in: the labels `priority` and `task_type`.
struct Queue {
  std::string priority;   ///< such as "interactive" or "1"
  std::string task_type;  ///< such as "chat" or "embeddings"
};

/// Which limit a rate-limit hit ran into: the label `limit_type` (to_string(LimitType)).
using llmretry::LimitType;
using llmretry::to_string;

/// Receives the events of calls. Every function does nothing by default: override those you count.
/// Implementations must be safe to call from several threads at once.
class Observer {
 public:
  Observer() = default;
  Observer(const Observer&) = default;
  Observer& operator=(const Observer&) = default;
  Observer(Observer&&) = default;
  Observer& operator=(Observer&&) = default;
  virtual ~Observer() = default;

  /// A logical request ended. `status`: "success", the name of the StopReason it gave up with
  /// (to_string(StopReason)), or another short snake_case word of the caller's such as "rejected".
  virtual void request_finished(const Target& /*target*/, std::string_view /*status*/) {}
  /// An attempt failed with `failure` and is sent again; `resend_count` (1 for the first resend) is
  /// OpenTelemetry's http.request.resend_count. Label error_type: to_string(failure.kind).
  virtual void retried(const Target& /*target*/, const Failure& /*failure*/, int /*resend_count*/) {}
  /// A hedge was sent (CallOptions::hedging): a second request of an attempt still in flight, once its
  /// outcome is known; `resend_count` is its http.request.resend_count (the requests of the call before it).
  virtual void hedged(const Target& /*target*/, int /*resend_count*/) {}
  /// A hedge's answer came first.
  virtual void hedge_won(const Target& /*target*/) {}
  /// A request ran into a rate limit (an answer 429, or a refusal for want of capacity).
  virtual void rate_limited(const Target& /*target*/, LimitType /*limit_type*/) {}
  /// Tokens were reserved for a request before it was sent.
  virtual void tokens_reserved(const Target& /*target*/, std::uint64_t /*tokens*/) {}
  /// A request's answer reported the tokens it used.
  virtual void tokens_used(const Target& /*target*/, std::uint64_t /*tokens*/) {}
  /// A request entered `queue` (its depth grows by one).
  virtual void queue_entered(const Queue& /*queue*/) {}
  /// A request left `queue` after waiting `waited` (its depth shrinks by one).
  virtual void queue_left(const Queue& /*queue*/, std::chrono::duration<double> /*waited*/) {}
  /// A call that gave up on `from` moved to `to` for `reason` (label: to_string(reason)).
  virtual void fell_back(const Target& /*from*/, const Target& /*to*/, FallbackReason /*reason*/) {}
  /// A duplicate request got a stored answer (or was refused) instead of being sent again.
  virtual void duplicate_suppressed(std::string_view /*task_type*/) {}
};

}  // namespace metrics
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_METRICS_OBSERVER_HPP
