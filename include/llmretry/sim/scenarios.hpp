#ifndef LLMRETRY_SIM_SCENARIOS_HPP
#define LLMRETRY_SIM_SCENARIOS_HPP

#include <chrono>
#include <limits>
#include <string>
#include <vector>

#include "../policy.hpp"
#include "../version.hpp"
#include "pacing.hpp"
#include "provider.hpp"
#include "simulation.hpp"

/// Ready-made scenarios: herds, coarse and precise Retry-After, request and token limits, and optimistic
/// concurrency, each with the figures it produces.

LLMRETRY_BEGIN_NAMESPACE
namespace sim::scenarios {

using namespace std::chrono_literals;

/// Returns the explorer: 4 clients at once against a provider that starts at most one request every
/// 0.25 s and answers the others 429 without Retry-After; base 0.5 s, 4 attempts, the given jitter.
/// Without jitter: 10 requests, 6 answered 429, all 4 served, the last at 3.5 s.
[[nodiscard]] inline Scenario explorer(Jitter jitter = Jitter::none) {
  Scenario s;
  s.clients = 4;
  s.provider.start_interval = 250ms;
  s.policy.jitter = jitter;
  return s;
}

/// Returns a policy that obeys a provider's `retry-after: 30`: 10 attempts, up to 30 s per wait
/// (max_provider_wait 30 s) and 300 s of waiting in all. The default policy would stop at once instead,
/// since 30 s is above its cap of 8 s.
[[nodiscard]] inline RetryPolicy patient_policy(Jitter jitter) {
  RetryPolicy policy;
  policy.max_attempts = 10;
  policy.max_provider_wait = 30s;
  policy.max_total_wait = 300s;
  policy.jitter = jitter;
  return policy;
}

/// Returns "everyone waits 30 seconds": 10 clients at once, a provider that starts one request a second
/// and answers every refusal `retry-after: 30`, clients that obey without jitter (patient_policy).
/// The refused come back together, 30 s apart, and all but one are refused again.
[[nodiscard]] inline Scenario everyone_waits_30s() {
  Scenario s;
  s.clients = 10;
  s.provider.start_interval = 1s;
  s.provider.retry_after_header = RetryAfterMode::fixed;
  s.provider.fixed_retry_after = 30s;
  s.policy = patient_policy(Jitter::none);
  return s;
}

/// Returns everyone_waits_30s() with the fix: the provider gives the precise time until capacity returns
/// (`retry-after-ms`) and the clients add full jitter (same patient_policy budgets).
[[nodiscard]] inline Scenario precise_retry_after() {
  Scenario s = everyone_waits_30s();
  s.provider.retry_after_header = RetryAfterMode::precise;
  s.policy.jitter = Jitter::full;
  return s;
}

/// Returns precise_retry_after() with clients that also spread their return above the provider's wait
/// by up to 1 s (provider_wait_jitter), as RetryPolicy::batch() does: the refused no longer come back at
/// the very instant capacity returns.
inline Scenario precise_retry_after_spread() {
  Scenario s = precise_retry_after();
  s.policy.provider_wait_jitter = std::chrono::seconds{1};
  return s;
}

/// Returns a provider with limits of 600 requests and 300,000 tokens per minute,
/// enforced per second (buckets of 10 requests and 5,000 tokens refilled every second), answering 429
/// with the precise `retry-after-ms`; each call takes 2 s.
[[nodiscard]] inline ProviderSpec rpm_tpm_provider(std::int64_t tokens_per_request) {
  ProviderSpec p;
  p.requests = Bucket{10, 1s};
  p.tokens = Bucket{5000, 1s};
  p.tokens_per_request = tokens_per_request;
  p.latency = 2s;
  p.retry_after_header = RetryAfterMode::precise;
  return p;
}

/// Returns `clients` calls of `tokens_per_request` tokens each, spread evenly over one minute, against
/// rpm_tpm_provider.
[[nodiscard]] inline Scenario one_minute_of_calls(int clients, std::int64_t tokens_per_request) {
  Scenario s;
  s.clients = clients;
  s.start_spacing = std::chrono::milliseconds{60s} / clients;
  s.provider = rpm_tpm_provider(tokens_per_request);
  return s;
}

/// Returns 1,000 short calls (200 tokens) in one minute; the request limit fails
/// first, the token limit is fine.
[[nodiscard]] inline Scenario many_small_calls() { return one_minute_of_calls(1000, 200); }

/// Returns 100 long calls (5,000 tokens) in one minute; the token limit fails
/// first, the request limit is fine.
[[nodiscard]] inline Scenario few_large_calls() { return one_minute_of_calls(100, 5000); }

/// Returns the setup of "Exponential Backoff And Jitter" (AWS Architecture Blog, 2015): `clients` writers
/// contend on one row under optimistic concurrency, base 5 ms, cap 2 s, retrying until they succeed.
/// The network's one-way delay is a constant 10 ms (the blog: mean 10 ms, sd 2 ms): a client reads at
/// t + 10 ms and writes at t + 30 ms, and its write fails iff another succeeded since its read, which is
/// a provider that admits at most one request every 20 ms; every answer takes the 40 ms round trip;
/// a lost race is a 409 with `x-should-retry: true`.
[[nodiscard]] inline Scenario brooker_occ(int clients, Jitter jitter) {
  Scenario s;
  s.clients = clients;
  s.provider.start_interval = 20ms;
  s.provider.latency = 40ms;
  s.provider.refusal_latency = 40ms;
  s.provider.busy_answer = BusyAnswer::conflict;
  s.policy.base = 5ms;
  s.policy.cap = 2s;
  s.policy.max_attempts = std::numeric_limits<int>::max();
  s.policy.max_total_wait = 24h;
  s.policy.jitter = jitter;
  return s;
}

/// One workload of the pacing comparison: its title (the limits stated) and the scenario, whose admission
/// mode the caller sets.
struct PacedWorkload {
  std::string title;
  PacedScenario scenario;
};

/// Returns the workloads of the pacing comparison, every call under RetryPolicy::batch(), each provider
/// answering 429 with the precise `retry-after-ms`, the pacers told the provider's limits:
/// - A: 1,000 calls of 200 tokens (prompt 120, max_tokens 80, 50 used) ready evenly over one minute,
///   against 600 requests and 300,000 tokens per minute enforced per second (10 requests and 5,000
///   tokens a second), 2 s per answer;
/// - B: 100 calls of 5,000 tokens (prompt 3,000, max_tokens 2,000, 1,200 used) over one minute, same provider;
/// - a backlog of 38,000 tickets (prompt 500, max_tokens 300, 150 used) taken by 96 workers, 2.8 s per
///   answer, against 1,800 requests and 900,000 tokens per minute, enforced over the minute;
/// - the same backlog against the same limits enforced per second (30 requests, 15,000 tokens a second).
[[nodiscard]] inline std::vector<PacedWorkload> paced_workloads() {
  const auto provider = [](Bucket requests, Bucket tokens, std::chrono::milliseconds latency) {
    ProviderSpec p;
    p.requests = requests;
    p.tokens = tokens;
    p.tokens_per_request = 1;
    p.latency = latency;
    p.retry_after_header = RetryAfterMode::precise;
    return p;
  };
  const auto limits = [](Bucket requests, Bucket tokens) {
    const auto per_minute = [](Bucket b) { return b.capacity * 60'000 / b.period.count(); };
    Limits l;
    l[Dimension::requests_per_minute] = Limit::per_minute(per_minute(requests), requests.capacity);
    l[Dimension::tokens_per_minute] = Limit::per_minute(per_minute(tokens), tokens.capacity);
    return l;
  };
  const auto paced = [&](Workload workload, Bucket requests, Bucket tokens, std::chrono::milliseconds latency) {
    PacedScenario s;
    s.workload = workload;
    s.provider = provider(requests, tokens, latency);
    s.limits = limits(requests, tokens);
    return s;
  };
  const Workload a{1000, 60ms, 0, 120, 80, 50};
  const Workload b{100, 600ms, 0, 3000, 2000, 1200};
  const Workload backlog{38'000, 0ms, 96, 500, 300, 150};
  return {
      {"A: 1,000 calls x 200 tokens in a minute; 600 RPM / 300,000 TPM enforced per second",
       paced(a, Bucket{10, 1s}, Bucket{5000, 1s}, 2s)},
      {"B: 100 calls x 5,000 tokens in a minute; 600 RPM / 300,000 TPM enforced per second",
       paced(b, Bucket{10, 1s}, Bucket{5000, 1s}, 2s)},
      {"backlog: 38,000 tickets, 96 workers, 2.8 s per answer; 1,800 RPM / 900,000 TPM enforced per minute",
       paced(backlog, Bucket{1800, 1min}, Bucket{900'000, 1min}, 2800ms)},
      {"backlog: the same, the limits enforced per second (30 requests, 15,000 tokens a second)",
       paced(backlog, Bucket{30, 1s}, Bucket{15'000, 1s}, 2800ms)},
  };
}

}  // namespace sim::scenarios
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_SIM_SCENARIOS_HPP
