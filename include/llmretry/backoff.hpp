#ifndef LLMRETRY_BACKOFF_HPP
#define LLMRETRY_BACKOFF_HPP

#include <algorithm>
#include <chrono>

#include "detail/saturate.hpp"
#include "detail/uniform.hpp"
#include "policy.hpp"

namespace llmretry {

/// Returns the wait after failed attempt `attempt` (1, 2, 3, ...) before jitter:
/// min(cap, base * 2^(attempt - 1)). Saturates: any attempt, up to INT_MAX, gives at most `cap`.
/// An attempt below 1 is treated as 1.
[[nodiscard]] constexpr std::chrono::milliseconds backoff(int attempt, const RetryPolicy& policy) noexcept {
  return detail::doubled_up_to(std::min(policy.base, policy.cap), attempt < 1 ? 0 : attempt - 1, policy.cap);
}

/// Returns the wait to use after a failure, drawn from `rng` as `policy.jitter` says.
/// `backoff_wait` is backoff(attempt, policy); `previous` is the wait drawn last time (base before the
/// first retry), used by decorrelated jitter only. Draws nothing when jitter is none.
/// Result bounds: none = backoff; full = [0, backoff]; equal = [backoff/2, backoff];
/// decorrelated = [min(base, cap), min(cap, 3 * previous)].
template <class Rng>
[[nodiscard]] std::chrono::milliseconds jittered(std::chrono::milliseconds backoff_wait,
                                                 std::chrono::milliseconds previous, const RetryPolicy& policy,
                                                 Rng& rng) {
  using std::chrono::milliseconds;
  switch (policy.jitter) {
    case Jitter::none: return backoff_wait;
    case Jitter::full: return milliseconds{detail::uniform_between(rng, 0, backoff_wait.count())};
    case Jitter::equal: {
      const auto half = backoff_wait.count() / 2;
      return milliseconds{backoff_wait.count() - half + detail::uniform_between(rng, 0, half)};
    }
    case Jitter::decorrelated: {
      const auto low = std::min(policy.base, policy.cap);
      const auto tripled = detail::saturating_add(detail::saturating_add(previous, previous), previous);
      const auto high = std::min(policy.cap, std::max(low, tripled));
      return milliseconds{detail::uniform_between(rng, low.count(), high.count())};
    }
  }
  return backoff_wait;
}

}  // namespace llmretry

#endif  // LLMRETRY_BACKOFF_HPP
