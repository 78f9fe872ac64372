// Limits shared by several relays through Redis (--redis with --rpm/--tpm or a model's limits): each attempt
// also reserves its estimate on a redis::RateLimiter of its upstream.
#ifndef LLMRETRY_RELAY_SHARED_LIMIT_HPP
#define LLMRETRY_RELAY_SHARED_LIMIT_HPP

#include <llmretry/admission/limits.hpp>
#include <llmretry/attempt.hpp>
#include <llmretry/errors.hpp>
#include <llmretry/guard.hpp>
#include <llmretry/json/usage.hpp>
#include <llmretry/redis/connection.hpp>
#include <llmretry/redis/rate_limiter.hpp>

#include <chrono>
#include <string>
#include <string_view>

namespace relay {

/// One upstream's limits, shared by every relay on the same Redis server (the limiter is named after the
/// upstream's name and base URL). Thread-safe as far as its connection is.
class SharedLimit {
 public:
  /// The limiter of `name` on `connection` (which must outlive it) with `limits`; an attempt waits for it
  /// at most `max_wait`. Throws std::invalid_argument naming the field when a limit makes no sense.
  SharedLimit(llmretry::redis::Connection& connection, std::string_view name, const llmretry::Limits& limits,
              std::chrono::milliseconds max_wait)
      : limiter_(connection, name, limits), max_wait_(max_wait) {}

  /// Makes one attempt `send()` of estimated cost `estimate` once the shared limit admits it, the wait
  /// slept by `sleep`, and settles the reservation with the answer's usage (or its failure). Returns what
  /// `send` returns. Throws AttemptRefused when the limit cannot admit it within the longest wait (its
  /// failure: a rate limit not sent, with the limiter's wait as the provider's, so that the retry policy
  /// waits for it or stops) or Redis fails (a connection failure not sent); what `send` throws.
  template <class Send, class Sleep>
  auto through(const llmretry::Cost& estimate, const llmretry::Attempt& attempt, Sleep&& sleep, Send&& send) {
    auto pacing =
        limiter_.pace(estimate, max_wait_, [](std::string_view body) { return llmretry::json::usage_of(body); });
    auto admission = pacing.admit(attempt);
    if (!admission.admitted()) throw llmretry::AttemptRefused(admission.refusal());
    if (admission.wait() > std::chrono::milliseconds::zero()) sleep(admission.wait());
    try {
      auto answer = send();
      admission.ticket().succeeded(answer);
      return answer;
    } catch (const llmretry::ProviderError& error) {
      admission.ticket().failed(error.failure());
      throw;
    }
  }

 private:
  llmretry::redis::RateLimiter limiter_;
  std::chrono::milliseconds max_wait_;
};

}  // namespace relay

#endif  // LLMRETRY_RELAY_SHARED_LIMIT_HPP
