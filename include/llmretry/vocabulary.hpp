#ifndef LLMRETRY_VOCABULARY_HPP
#define LLMRETRY_VOCABULARY_HPP

/// The names every part of llmretry shares, in one light header that any header may include (the
/// engine, the guards, the metrics, the simulator, the stores, the tools): why a call stopped, why it
/// moved to another deployment. Only the standard library's light headers: no <functional>, no guard,
/// policy or admission code.

#include <initializer_list>
#include <optional>
#include <string_view>

namespace llmretry {

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

}  // namespace llmretry

#endif  // LLMRETRY_VOCABULARY_HPP
