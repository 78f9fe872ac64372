#ifndef LLMRETRY_SIM_PACING_HPP
#define LLMRETRY_SIM_PACING_HPP

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "../admission/deployment.hpp"
#include "../admission/limits.hpp"
#include "../admission/rate_limiter.hpp"
#include "../decision.hpp"
#include "../detail/config.hpp"
#include "../engine.hpp"
#include "../guard.hpp"
#include "../policy.hpp"
#include "../version.hpp"
#include "event_queue.hpp"
#include "provider.hpp"
#include "random.hpp"
#include "simulation.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace sim {

/// How calls are held back before each attempt.
enum class AdmissionMode {
  none,        ///< retries only: every attempt goes at once
  spacing,     ///< one start every 60 / RPM seconds, tokens ignored
  buckets,     ///< request and token buckets of a minute each, charged the estimate and never refunded;
               ///< after any 429, no start for 15 s
  deployment,  ///< llmretry::Deployment with the configured limits (settled with the actual usage when
               ///< the provider counts it)
  learned,     ///< llmretry::Deployment told nothing: it learns the limits from the answers' headers
};

/// Returns the name of a mode ("none", "spacing", "buckets", "deployment", "learned").
[[nodiscard]] constexpr const char* to_string(AdmissionMode mode) noexcept {
  switch (mode) {
    case AdmissionMode::none: return "none";
    case AdmissionMode::spacing: return "spacing";
    case AdmissionMode::buckets: return "buckets";
    case AdmissionMode::deployment: return "deployment";
    case AdmissionMode::learned: return "learned";
  }
  return "unknown";
}

/// The calls to make: how many, when each is ready, how many may be in progress, and their tokens.
struct Workload {
  std::int64_t calls = 1000;              ///< how many calls
  std::chrono::milliseconds spacing{60};  ///< call i is ready at i x spacing (0: all at once)
  int workers = 0;                        ///< at most this many calls in progress at once; 0: no limit
  std::int64_t prompt_tokens = 100;       ///< each call's prompt
  std::int64_t max_tokens = 100;          ///< each call's max_tokens: the estimate is prompt + max_tokens
  std::int64_t output_tokens = 100;       ///< what each answer produces, at most max_tokens
};

/// One paced run: a workload against a provider, under one admission mode.
struct PacedScenario {
  Workload workload;
  ProviderSpec provider;  ///< its requests and tokens buckets, latency (tokens_per_request is not used)
  /// Whether the provider gives back the output tokens an answer did not use (it counts actual usage, and
  /// the deployment settles with it); otherwise the estimate charged at admission stays charged, as
  /// OpenAI counts max_tokens.
  bool provider_counts_usage = false;
  Limits limits;                              ///< what the pacers are told (not used by none and learned)
  RetryPolicy policy = RetryPolicy::batch();  ///< every call's retries; waits for admission count in it
  AdmissionMode admission = AdmissionMode::deployment;
  std::uint64_t seed = 1;  ///< the one seed of every random draw

  /// Throws std::invalid_argument naming the field when the scenario makes no sense.
  void validate() const {
    const Workload& w = workload;
    if (w.calls < 1 || w.calls > 10'000'000) detail::throw_invalid_argument("Workload::calls must be in [1, 10000000]");
    if (w.spacing < std::chrono::milliseconds::zero())
      detail::throw_invalid_argument("Workload::spacing must not be negative");
    if (w.workers < 0) detail::throw_invalid_argument("Workload::workers must not be negative");
    if (w.prompt_tokens < 0 || w.max_tokens < 0)
      detail::throw_invalid_argument("Workload::prompt_tokens and max_tokens must not be negative");
    if (w.output_tokens < 0 || w.output_tokens > w.max_tokens)
      detail::throw_invalid_argument("Workload::output_tokens must be in [0, max_tokens]");
    if (provider.tokens && w.prompt_tokens + w.max_tokens > provider.tokens->capacity)
      detail::throw_invalid_argument("Workload: a call's tokens exceed the provider's token bucket");
    if ((admission == AdmissionMode::spacing || admission == AdmissionMode::buckets) &&
        !limits[Dimension::requests_per_minute])
      detail::throw_invalid_argument("PacedScenario::limits needs requests_per_minute for spacing and buckets");
    provider.validate();
    limits.validate();
    policy.validate();
  }
};

/// What a paced run did, over all calls.
struct PacedTotals {
  std::int64_t served = 0;           ///< calls answered
  std::int64_t gave_up = 0;          ///< calls that stopped unanswered
  std::int64_t requests = 0;         ///< attempts sent
  std::int64_t refused = 0;          ///< attempts answered 429
  std::int64_t tokens_reserved = 0;  ///< tokens the pacer reserved (estimates; 0 for pacers that do not count them)
  std::int64_t tokens_used = 0;      ///< tokens the served calls used (prompt and actual output)
  Time makespan{0};                  ///< when the last call was answered or gave up
  Time bound{0};                     ///< the shortest makespan the provider's limits allow (capacity_bound)
  std::chrono::milliseconds p95_queue_wait{0};  ///< 95th percentile of the wait before a call's first attempt
};

/// Returns a lower bound of the makespan: the last call's readiness, the time the provider's buckets need
/// to admit every call's net tokens and requests beyond what they hold at the start, and what the workers
/// can do one call at a time; plus one latency.
[[nodiscard]] inline Time capacity_bound(const PacedScenario& s) {
  using std::chrono::milliseconds;
  const Workload& w = s.workload;
  Time bound = w.spacing * (w.calls - 1);
  const auto drain = [&](const std::optional<Bucket>& bucket, std::int64_t per_call) {
    if (!bucket || per_call == 0) return;
    const std::int64_t beyond = w.calls * per_call - bucket->capacity;
    if (beyond > 0) bound = std::max(bound, milliseconds{beyond * bucket->period.count() / bucket->capacity});
  };
  drain(s.provider.requests, 1);
  const std::int64_t net = s.provider_counts_usage ? w.prompt_tokens + w.output_tokens : w.prompt_tokens + w.max_tokens;
  drain(s.provider.tokens, net);
  if (w.workers > 0) bound = std::max(bound, s.provider.latency * ((w.calls + w.workers - 1) / w.workers - 1));
  return bound + s.provider.latency;
}

}  // namespace sim
LLMRETRY_END_NAMESPACE

LLMRETRY_BEGIN_NAMESPACE
namespace detail {

/// What a simulated answer tells the guard of its attempt: the usage the provider counted (nullopt: the
/// estimate stays charged) and the limits its headers reported.
struct PacedAnswer {
  std::optional<Cost> usage;
  RateLimits rate_limits;
};

/// A guard that starts one attempt every `interval` (shared by every call through `next_start`), tokens
/// ignored.
class Spacing {
 public:
  using Ticket = NoGuard::Ticket;
  /// `next_start` and `now` are the run's, and outlive the guard.
  Spacing(sim::Time& next_start, std::chrono::milliseconds interval, const sim::Time& now) noexcept
      : next_start_(&next_start), interval_(interval), now_(&now) {}
  [[nodiscard]] Admission<Ticket> admit(const Attempt& /*attempt*/) noexcept {
    const sim::Time start = std::max(*now_, *next_start_);
    *next_start_ = start + interval_;
    return Admission<Ticket>::go(Ticket{}, start - *now_);
  }

 private:
  sim::Time* next_start_;
  std::chrono::milliseconds interval_;
  const sim::Time* now_;
};

/// A guard that charges each attempt's estimate to request and token buckets of a minute each (shared by
/// every call), never refunded, and holds every start for 15 s after any 429.
class Buckets {
 public:
  struct Ticket {
    RateLimiter* buckets;
    const sim::Time* now;
    template <class... Answer>
    void succeeded(const Answer&... /*answer*/) const noexcept {}
    void failed(const Failure& failure) const noexcept {
      if (failure.kind == FailureKind::rate_limited)
        buckets->pause_until(std::chrono::steady_clock::time_point{} + *now + std::chrono::seconds{15});
    }
  };
  /// `buckets`, `now` and `reserved` (the tokens reserved, counted) are the run's, and outlive the guard.
  Buckets(RateLimiter& buckets, const Cost& estimate, const sim::Time& now, std::int64_t& reserved) noexcept
      : buckets_(&buckets), estimate_(estimate), now_(&now), reserved_(&reserved) {}
  [[nodiscard]] Admission<Ticket> admit(const Attempt& /*attempt*/) noexcept {
    const auto at = std::chrono::steady_clock::time_point{} + *now_;
    const Reservation held = buckets_->reserve(estimate_, at);
    *reserved_ += estimate_.tokens();
    return Admission<Ticket>::go(Ticket{buckets_, now_}, held.wait_after(at));
  }

 private:
  RateLimiter* buckets_;
  Cost estimate_;
  const sim::Time* now_;
  std::int64_t* reserved_;
};

/// What run_paced did: over every call, and over the calls of each pool of workers (whose `bound` is 0).
struct PooledTotals {
  sim::PacedTotals all;
  std::vector<sim::PacedTotals> pools;
};

/// The run of simulate_paced with the calls shared out among `pools` pools of workers (call i in pool
/// i mod pools), each with Workload::workers workers and its own backlog, and admitted by the guards
/// `make_guard(pool)` returns, one per call. Requires pools >= 1.
template <class MakeGuard>
PooledTotals run_paced(const sim::PacedScenario& scenario, sim::ProviderModel& provider, sim::Time& now,
                       std::size_t pools, MakeGuard make_guard) {
  const sim::Workload& w = scenario.workload;
  const Cost estimate{1, w.prompt_tokens, w.max_tokens};
  const Cost usage{1, w.prompt_tokens, w.output_tokens};
  using Guard = decltype(make_guard(std::size_t{0}));
  const CallOptions call_options;  // safe to repeat, no deadline: the run's waits are virtual

  struct Call {
    sim::SplitMix64 rng{0};
    sim::Time taken{0};  // when a worker took it, or it became ready
    bool started = false;
    std::optional<CallEngine<Guard>> engine;
  };
  std::deque<Call> calls;  // engines stay where they are made
  const auto pool_of = [pools](std::size_t i) { return i % pools; };
  for (std::int64_t i = 0; i < w.calls; ++i) {
    Call& call = calls.emplace_back();
    call.rng = sim::stream(scenario.seed, static_cast<std::uint64_t>(i) + 1);
    call.engine.emplace(validate_later, scenario.policy, make_guard(pool_of(static_cast<std::size_t>(i))),
                        call_options);
  }

  enum class Kind : std::uint8_t { ready, start, resume, answered };
  struct Due {
    Kind kind = Kind::ready;
    std::size_t call = 0;
    sim::Reply reply;
  };
  // One pool of workers: its ready calls waiting for a worker, and what its calls did.
  struct Pool {
    std::deque<std::size_t> backlog;
    int busy_workers = 0;
    sim::PacedTotals totals;
    std::vector<std::chrono::milliseconds> queue_waits;
  };
  sim::EventQueue<Due> queue;
  std::vector<Pool> by_pool(pools);

  const auto rank = [](std::size_t i) { return static_cast<std::uint64_t>(i); };
  const auto take_up = [&](std::size_t i) {
    calls[i].taken = now;
    queue.push(now, rank(i), Due{Kind::start, i, {}});
  };
  const auto finish = [&](Pool& pool) {
    pool.totals.makespan = std::max(pool.totals.makespan, now);
    if (w.workers == 0) return;
    --pool.busy_workers;
    if (pool.backlog.empty()) return;
    const std::size_t next = pool.backlog.front();
    pool.backlog.pop_front();
    ++pool.busy_workers;
    take_up(next);
  };
  // Carries out `step` of call i: a wait is an event later, the attempt is sent, a call done is finished.
  const auto carry_out = [&](std::size_t i, const Step& step) {
    Call& call = calls[i];
    Pool& pool = by_pool[pool_of(i)];
    if (step.kind == Step::Kind::wait) {
      queue.push(now + step.wait, rank(i), Due{Kind::resume, i, {}});
      return;
    }
    if (step.kind == Step::Kind::done) {
      ++(call.engine->gave_up() == nullptr ? pool.totals.served : pool.totals.gave_up);
      finish(pool);
      return;
    }
    if (!std::exchange(call.started, true)) pool.queue_waits.push_back(now - call.taken);
    ++pool.totals.requests;
    const sim::Reply reply = provider.request(now, estimate.tokens());
    queue.push(now + reply.latency, rank(i), Due{Kind::answered, i, reply});
  };

  for (std::size_t i = 0; i < calls.size(); ++i)
    queue.push(w.spacing * static_cast<std::int64_t>(i), rank(i), Due{Kind::ready, i, {}});
  while (!queue.empty()) {
    sim::Event<Due> event = queue.pop();
    now = event.at;
    const std::size_t i = event.payload.call;
    Call& call = calls[i];
    Pool& pool = by_pool[pool_of(i)];
    switch (event.payload.kind) {
      case Kind::ready:
        if (w.workers == 0 || pool.busy_workers < w.workers) {
          if (w.workers > 0) ++pool.busy_workers;
          take_up(i);
        } else {
          pool.backlog.push_back(i);
        }
        break;
      case Kind::start: carry_out(i, call.engine->start()); break;
      case Kind::resume: carry_out(i, call.engine->resume()); break;
      case Kind::answered: {
        const sim::Reply& reply = event.payload.reply;
        if (!reply.failure) {
          if (scenario.provider_counts_usage) provider.refund(now, w.max_tokens - w.output_tokens);
          pool.totals.tokens_used += usage.tokens();
          carry_out(i,
                    call.engine->succeeded(PacedAnswer{
                        scenario.provider_counts_usage ? std::optional<Cost>(usage) : std::nullopt, reply.reported}));
          break;
        }
        if (reply.outcome == sim::Outcome::refused) ++pool.totals.refused;
        carry_out(i, call.engine->failed(*reply.failure, call.rng));
        break;
      }
    }
  }
  PooledTotals totals;
  std::vector<std::chrono::milliseconds> queue_waits;
  queue_waits.reserve(calls.size());
  for (Pool& pool : by_pool) {
    sim::PacedTotals& t = pool.totals;
    std::sort(pool.queue_waits.begin(), pool.queue_waits.end());
    t.p95_queue_wait = sim::percentile(pool.queue_waits, 95);
    queue_waits.insert(queue_waits.end(), pool.queue_waits.begin(), pool.queue_waits.end());
    sim::PacedTotals& all = totals.all;
    all.served += t.served;
    all.gave_up += t.gave_up;
    all.requests += t.requests;
    all.refused += t.refused;
    all.tokens_used += t.tokens_used;
    all.makespan = std::max(all.makespan, t.makespan);
    totals.pools.push_back(t);
  }
  std::sort(queue_waits.begin(), queue_waits.end());
  totals.all.p95_queue_wait = sim::percentile(queue_waits, 95);
  return totals;
}

}  // namespace detail
LLMRETRY_END_NAMESPACE

LLMRETRY_BEGIN_NAMESPACE
namespace sim {

/// Runs `scenario` in virtual time: each call is ready at its time (or when a worker is free) and driven
/// by its own CallEngine, admitted before each attempt as the admission mode says (the wait counts toward
/// its policy's wait budget); llmretry's modes admit with a real llmretry::Deployment's guard
/// (Deployment::pace) on the virtual clock, the baselines with guards of their own. The same scenario
/// gives the same totals on every run.
/// Throws std::invalid_argument naming the field when the scenario makes no sense.
[[nodiscard]] inline PacedTotals simulate_paced(const PacedScenario& scenario) {
  scenario.validate();
  const Workload& w = scenario.workload;
  const Cost estimate{1, w.prompt_tokens, w.max_tokens};
  ProviderModel provider{scenario.provider, stream(scenario.seed, 0)(), detail::prevalidated};
  Time now{0};
  PacedTotals totals;
  switch (scenario.admission) {
    case AdmissionMode::none:
      totals = detail::run_paced(scenario, provider, now, 1, [](std::size_t) { return NoGuard{}; }).all;
      break;
    case AdmissionMode::spacing: {
      const std::chrono::milliseconds interval{
          60'000 / std::max<std::int64_t>(1, scenario.limits[Dimension::requests_per_minute]->limit)};
      Time next_start{0};
      totals = detail::run_paced(scenario, provider, now, 1, [&](std::size_t) {
                 return detail::Spacing(next_start, interval, now);
               }).all;
      break;
    }
    case AdmissionMode::buckets: {
      Limits minute;
      for (const Dimension d : {Dimension::requests_per_minute, Dimension::tokens_per_minute})
        if (scenario.limits[d]) minute[d] = Limit::per_minute(scenario.limits[d]->limit);
      RateLimiter buckets(minute);
      std::int64_t reserved = 0;
      totals = detail::run_paced(scenario, provider, now, 1, [&](std::size_t) {
                 return detail::Buckets(buckets, estimate, now, reserved);
               }).all;
      totals.tokens_reserved = reserved;
      break;
    }
    case AdmissionMode::deployment:
    case AdmissionMode::learned: {
      DeploymentOptions options;
      options.name = "simulated";
      if (scenario.admission == AdmissionMode::deployment) options.limits = scenario.limits;
      options.clock = [&now] { return std::chrono::steady_clock::time_point{} + now; };
      Deployment deployment(options);
      totals =
          detail::run_paced(scenario, provider, now, 1, [&](std::size_t) { return deployment.pace(estimate); }).all;
      totals.tokens_reserved = deployment.limiter().stats().tokens_reserved;
      break;
    }
  }
  totals.bound = capacity_bound(scenario);
  return totals;
}

}  // namespace sim
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_SIM_PACING_HPP
