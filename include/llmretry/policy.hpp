#ifndef LLMRETRY_POLICY_HPP
#define LLMRETRY_POLICY_HPP

#include <chrono>
#include <optional>

#include "detail/config.hpp"
#include "version.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// How a backoff wait is randomised so that clients that failed together do not come back together.
enum class Jitter {
  none,          ///< wait exactly the backoff
  full,          ///< uniform in [0, backoff]
  equal,         ///< backoff / 2 + uniform in [0, backoff / 2]
  decorrelated,  ///< min(cap, uniform in [base, 3 * previous wait])
};

/// What to retry, how long to wait and when to stop. Every field has a meaningful value:
/// there is no "0 means default".
struct RetryPolicy {
  int max_attempts = 4;                             ///< the first call and up to 3 retries
  std::chrono::milliseconds base{500};              ///< first wait before jitter; doubles each failure
  std::chrono::milliseconds cap{8000};              ///< no single backoff wait is longer
  std::chrono::milliseconds max_total_wait{20000};  ///< stop when the waits would add up to more
  Jitter jitter = Jitter::full;
  /// A provider asking for a longer wait stops the call at once. Empty: the same as `cap`.
  std::optional<std::chrono::milliseconds> max_provider_wait;
  /// When the provider asks for a wait, come back after it plus a share drawn uniformly in
  /// [0, provider_wait_jitter], never earlier: clients refused at the same instant then return spread out
  /// instead of together. Zero: exactly the provider's wait.
  std::chrono::milliseconds provider_wait_jitter{0};

  /// Returns a policy for a person waiting on the answer: 3 attempts, 8 s of waiting at most.
  [[nodiscard]] static RetryPolicy interactive() {
    RetryPolicy p;
    p.max_attempts = 3;
    p.max_total_wait = std::chrono::seconds{8};
    return p;
  }

  /// Returns a policy for background work that can wait: 8 attempts, 300 s of waiting at most.
  /// The cap (and so the longest Retry-After it accepts) is 60 s; a provider's wait is spread by up to 1 s.
  [[nodiscard]] static RetryPolicy batch() {
    RetryPolicy p;
    p.max_attempts = 8;
    p.cap = std::chrono::seconds{60};
    p.max_total_wait = std::chrono::seconds{300};
    p.provider_wait_jitter = std::chrono::seconds{1};
    return p;
  }

  /// Returns the longest wait a provider may ask for before the call stops.
  [[nodiscard]] std::chrono::milliseconds provider_wait_limit() const noexcept {
    return max_provider_wait.value_or(cap);
  }

  /// Throws std::invalid_argument naming the field when the policy makes no sense:
  /// max_attempts < 1, a negative duration, or cap < base.
  void validate() const {
    using std::chrono::milliseconds;
    if (max_attempts < 1) detail::throw_invalid_argument("RetryPolicy::max_attempts must be at least 1");
    if (base < milliseconds::zero()) detail::throw_invalid_argument("RetryPolicy::base must not be negative");
    if (cap < milliseconds::zero()) detail::throw_invalid_argument("RetryPolicy::cap must not be negative");
    if (cap < base) detail::throw_invalid_argument("RetryPolicy::cap must not be less than RetryPolicy::base");
    if (max_total_wait < milliseconds::zero())
      detail::throw_invalid_argument("RetryPolicy::max_total_wait must not be negative");
    if (max_provider_wait && *max_provider_wait < milliseconds::zero())
      detail::throw_invalid_argument("RetryPolicy::max_provider_wait must not be negative");
    if (provider_wait_jitter < milliseconds::zero())
      detail::throw_invalid_argument("RetryPolicy::provider_wait_jitter must not be negative");
    if (jitter != Jitter::none && jitter != Jitter::full && jitter != Jitter::equal && jitter != Jitter::decorrelated)
      detail::throw_invalid_argument("RetryPolicy::jitter is not a Jitter value");
  }
};

/// Returns the name of a jitter mode ("none", "full", "equal", "decorrelated"), or "unknown".
[[nodiscard]] constexpr const char* to_string(Jitter jitter) noexcept {
  switch (jitter) {
    case Jitter::none: return "none";
    case Jitter::full: return "full";
    case Jitter::equal: return "equal";
    case Jitter::decorrelated: return "decorrelated";
  }
  return "unknown";
}

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_POLICY_HPP
