#ifndef LLMRETRY_BACKOFF_HPP
#define LLMRETRY_BACKOFF_HPP

#include <algorithm>
#include <chrono>

#include "detail/saturate.hpp"
#include "detail/uniform.hpp"
#include "policy.hpp"
#include "version.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// Returns the wait after failed attempt `attempt` (1, 2, 3, ...) before jitter:
/// min(cap, base * 2^(attempt - 1)). Saturates: any attempt, up to INT_MAX, gives at most `cap`.
/// An attempt below 1 is treated as 1.
[[nodiscard]] constexpr std::chrono::milliseconds backoff(int attempt, const RetryPolicy& policy) noexcept {
  return detail::doubled_up_to(std::min(policy.base, policy.cap), attempt < 1 ? 0 : attempt - 1, policy.cap);
}

/// The range a jittered wait is drawn from: [low, high] in milliseconds.
struct JitterRange {
  std::chrono::milliseconds low;
  std::chrono::milliseconds high;
};

/// Returns the range `policy.jitter` draws a wait from, given `backoff_wait` = backoff(attempt, policy) and
/// `previous`, the wait drawn last time (base before the first retry; decorrelated jitter only):
/// none = [backoff, backoff]; full = [0, backoff]; equal = [backoff - backoff/2, backoff];
/// decorrelated = [min(base, cap), min(cap, max(that, 3 * previous))].
[[nodiscard]] constexpr JitterRange jitter_range(std::chrono::milliseconds backoff_wait,
                                                 std::chrono::milliseconds previous,
                                                 const RetryPolicy& policy) noexcept {
  using std::chrono::milliseconds;
  switch (policy.jitter) {
    case Jitter::none: break;
    case Jitter::full: return {milliseconds::zero(), backoff_wait};
    case Jitter::equal: return {backoff_wait - backoff_wait / 2, backoff_wait};
    case Jitter::decorrelated: {
      const auto low = std::min(policy.base, policy.cap);
      const auto tripled = detail::saturating_add(detail::saturating_add(previous, previous), previous);
      return {low, std::min(policy.cap, std::max(low, tripled))};
    }
  }
  return {backoff_wait, backoff_wait};
}

/// Returns a wait drawn uniformly from `range` with `rng`; draws nothing when the range is one value.
template <class Rng>
[[nodiscard]] std::chrono::milliseconds draw(JitterRange range, Rng& rng) {
  return std::chrono::milliseconds{detail::uniform_between(rng, range.low.count(), range.high.count())};
}

/// Returns the wait to use after a failure: draw(jitter_range(backoff_wait, previous, policy), rng).
/// Draws nothing when jitter is none.
template <class Rng>
[[nodiscard]] std::chrono::milliseconds jittered(std::chrono::milliseconds backoff_wait,
                                                 std::chrono::milliseconds previous, const RetryPolicy& policy,
                                                 Rng& rng) {
  return draw(jitter_range(backoff_wait, previous, policy), rng);
}

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_BACKOFF_HPP
