#ifndef LLMRETRY_SIM_PRIORITIES_HPP
#define LLMRETRY_SIM_PRIORITIES_HPP

/// Interactive calls and a batch on one quota, in virtual time: what priority classes in admission change.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "../admission/deployment.hpp"
#include "../admission/limits.hpp"
#include "../admission/priority.hpp"
#include "../detail/config.hpp"
#include "../engine.hpp"
#include "../policy.hpp"
#include "../version.hpp"
#include "event_queue.hpp"
#include "pacing.hpp"
#include "provider.hpp"
#include "random.hpp"
#include "report.hpp"
#include "simulation.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace detail {

/// Returns the options of a simulated deployment told `limits`, on the virtual clock `now` (which must
/// outlive it).
[[nodiscard]] inline DeploymentOptions simulated_deployment(const Limits& limits, const sim::Time& now) {
  DeploymentOptions options;
  options.name = "simulated";
  options.limits = limits;
  options.clock = [&now] { return std::chrono::steady_clock::time_point{} + now; };
  return options;
}

/// Returns the next gap between two arrivals of a Poisson process whose mean gap is `mean`: -mean x ln(U),
/// U drawn from `rng` in (0, 1].
[[nodiscard]] inline sim::Time exponential_gap(sim::SplitMix64& rng, std::chrono::milliseconds mean) {
  const double u = (static_cast<double>(rng() >> 11) + 1.0) / 9007199254740992.0;
  return sim::Time{std::llround(-static_cast<double>(mean.count()) * std::log(u))};
}

}  // namespace detail

namespace sim {

/// One deployment, interactive calls arriving at a steady rate (a Poisson process) from the start, and a
/// batch taken by workers from `batch_start`; interactive calls arrive until the batch is done. Every call
/// costs the same and is paced by one llmretry::Deployment told the provider's limits.
struct PriorityScenario {
  ProviderSpec provider;  ///< its requests and tokens buckets and latency (tokens_per_request is not used)
  Limits limits;          ///< what the deployment is told
  std::int64_t prompt_tokens = 500;
  std::int64_t max_tokens = 300;  ///< the estimate is prompt + max_tokens, counted by the provider
  std::chrono::milliseconds interactive_mean_gap{160};  ///< the mean time between two interactive arrivals
  std::int64_t batch_calls = 38'000;
  int batch_workers = 96;  ///< batch calls in progress at most
  Time batch_start{std::chrono::minutes{5}};
  /// True: batch calls are Priority::batch; false: every call is interactive (first come, first served).
  bool priorities = true;
  PriorityOptions options;  ///< what each class leaves to the ones above
  std::uint64_t seed = 1;

  /// Throws std::invalid_argument naming the field when the scenario makes no sense.
  void validate() const {
    if (prompt_tokens < 0 || max_tokens < 0)
      detail::throw_invalid_argument("PriorityScenario::prompt_tokens and max_tokens must not be negative");
    if (interactive_mean_gap <= std::chrono::milliseconds::zero())
      detail::throw_invalid_argument("PriorityScenario::interactive_mean_gap must be positive");
    if (batch_calls < 1 || batch_calls > 10'000'000)
      detail::throw_invalid_argument("PriorityScenario::batch_calls must be in [1, 10000000]");
    if (batch_workers < 1) detail::throw_invalid_argument("PriorityScenario::batch_workers must be at least 1");
    if (batch_start <= Time::zero()) detail::throw_invalid_argument("PriorityScenario::batch_start must be positive");
    provider.validate();
    limits.validate();
    options.validate();
  }
};

/// What the interactive calls of one window saw.
struct WaitFigures {
  std::int64_t calls = 0;            ///< calls that arrived in the window
  std::int64_t refused = 0;          ///< their attempts answered 429
  std::int64_t gave_up = 0;          ///< calls that stopped unanswered
  std::chrono::milliseconds p50{0};  ///< median wait from arrival to the first attempt
  std::chrono::milliseconds p95{0};  ///< 95th percentile of that wait (nearest rank)
};

/// What a run did.
struct PriorityTotals {
  WaitFigures before;  ///< interactive calls that arrived before the batch started
  WaitFigures during;  ///< interactive calls that arrived while the batch ran
  std::int64_t batch_served = 0;
  std::int64_t batch_refused = 0;  ///< batch attempts answered 429
  Time batch_end{0};               ///< when the last batch call was answered or gave up
  double capacity_rate = 0;        ///< calls per second the provider's limits allow
  double interactive_rate = 0;     ///< interactive calls started per second while the batch ran
  double batch_rate = 0;           ///< batch calls served per second while it ran
  /// The batch's rate as a share of what the interactive calls left: batch_rate / (capacity_rate -
  /// interactive_rate).
  [[nodiscard]] double leftover_share() const noexcept {
    const double left = capacity_rate - interactive_rate;
    return left > 0 ? batch_rate / left : 0.0;
  }
};

/// Returns the calls per second `provider`'s buckets allow for calls of `tokens` each.
[[nodiscard]] inline double capacity_rate(const ProviderSpec& provider, std::int64_t tokens) {
  double rate = 1e18;
  const auto per_second = [](const Bucket& b) {
    return static_cast<double>(b.capacity) * 1000.0 / static_cast<double>(b.period.count());
  };
  if (provider.requests) rate = std::min(rate, per_second(*provider.requests));
  if (provider.tokens && tokens > 0) rate = std::min(rate, per_second(*provider.tokens) / static_cast<double>(tokens));
  return rate;
}

/// Runs `scenario` in virtual time: each call is driven by its own CallEngine through the deployment's
/// guard (Deployment::pace with its class), every wait an event. The same scenario gives the same totals on
/// every run. Throws std::invalid_argument naming the field when the scenario makes no sense.
[[nodiscard]] inline PriorityTotals simulate_priorities(const PriorityScenario& scenario) {
  scenario.validate();
  const Cost estimate{1, scenario.prompt_tokens, scenario.max_tokens};
  ProviderModel provider{scenario.provider, stream(scenario.seed, 0)(), detail::prevalidated};
  Time now{0};
  DeploymentOptions options = detail::simulated_deployment(scenario.limits, now);
  options.priorities = scenario.options;
  Deployment deployment(options);
  const RetryPolicy policy = RetryPolicy::batch();
  const CallOptions call_options;  // safe to repeat, no deadline: the waits are virtual

  struct Call {
    bool batch = false;
    Time arrived{0};
    bool started = false;
    std::optional<CallEngine<Deployment::Pacing>> engine;
  };
  std::deque<Call> calls;  // engines stay where they are made
  enum class Kind : std::uint8_t { arrive, resume, answered };
  struct Due {
    Kind kind = Kind::arrive;
    std::size_t call = 0;
    Reply reply;
  };
  EventQueue<Due> queue;
  SplitMix64 rng = stream(scenario.seed, 1);
  SplitMix64 arrivals = stream(scenario.seed, 2);
  PriorityTotals totals;
  std::vector<std::chrono::milliseconds> before_waits;
  std::vector<std::chrono::milliseconds> during_waits;
  std::int64_t batch_next = 0;  // the next batch call to take
  std::int64_t batch_done = 0;
  std::int64_t interactive_started_during = 0;
  const auto window_of = [&](const Call& call) -> WaitFigures& {
    return call.arrived < scenario.batch_start ? totals.before : totals.during;
  };

  const auto make = [&](bool batch) {
    Call& call = calls.emplace_back();
    call.batch = batch;
    call.arrived = now;
    const Priority priority = batch && scenario.priorities ? Priority::batch : Priority::interactive;
    call.engine.emplace(detail::validate_later, policy, deployment.pace(estimate, priority), call_options);
    if (!batch) ++window_of(call).calls;
    return calls.size() - 1;
  };
  const auto next_arrival = [&] {  // the call index is not used for arrivals
    queue.push(now + detail::exponential_gap(arrivals, scenario.interactive_mean_gap), 0,
               Due{Kind::arrive, calls.size(), {}});
  };
  std::function<void(std::size_t, const Step&)> carry_out;
  const auto take_batch = [&] {
    if (batch_next >= scenario.batch_calls) return;
    ++batch_next;
    const std::size_t i = make(true);
    carry_out(i, calls[i].engine->start());
  };
  carry_out = [&](std::size_t i, const Step& step) {
    Call& call = calls[i];
    if (step.kind == Step::Kind::wait) {
      queue.push(now + step.wait, 1, Due{Kind::resume, i, {}});
      return;
    }
    if (step.kind == Step::Kind::done) {
      if (call.batch) {
        if (call.engine->gave_up() == nullptr) ++totals.batch_served;
        ++batch_done;
        totals.batch_end = std::max(totals.batch_end, now);
        call.engine.reset();
        take_batch();
      } else {
        if (call.engine->gave_up() != nullptr) ++window_of(call).gave_up;
        call.engine.reset();
      }
      return;
    }
    if (!std::exchange(call.started, true) && !call.batch) {
      (call.arrived < scenario.batch_start ? before_waits : during_waits).push_back(now - call.arrived);
      if (call.arrived >= scenario.batch_start) ++interactive_started_during;
    }
    const Reply reply = provider.request(now, estimate.tokens());
    queue.push(now + reply.latency, 2, Due{Kind::answered, i, reply});
  };

  next_arrival();
  queue.push(scenario.batch_start, 0, Due{Kind::resume, static_cast<std::size_t>(-1), {}});
  while (!queue.empty()) {
    Event<Due> event = queue.pop();
    now = event.at;
    const std::size_t i = event.payload.call;
    switch (event.payload.kind) {
      case Kind::arrive: {
        if (now >= scenario.batch_start && batch_done >= scenario.batch_calls) break;  // the run is over
        const std::size_t call = make(false);
        carry_out(call, calls[call].engine->start());
        next_arrival();
        break;
      }
      case Kind::resume:
        if (i == static_cast<std::size_t>(-1)) {  // the batch starts
          for (int w = 0; w < scenario.batch_workers; ++w) take_batch();
          break;
        }
        carry_out(i, calls[i].engine->resume());
        break;
      case Kind::answered: {
        Call& call = calls[i];
        const Reply& reply = event.payload.reply;
        if (!reply.failure) {
          carry_out(i, call.engine->succeeded(detail::PacedAnswer{std::nullopt, reply.reported}));
          break;
        }
        if (reply.outcome == Outcome::refused) ++(call.batch ? totals.batch_refused : window_of(call).refused);
        carry_out(i, call.engine->failed(*reply.failure, rng));
        break;
      }
    }
  }
  for (auto* figures : {&before_waits, &during_waits}) std::sort(figures->begin(), figures->end());
  totals.before.p50 = percentile(before_waits, 50);
  totals.before.p95 = percentile(before_waits, 95);
  totals.during.p50 = percentile(during_waits, 50);
  totals.during.p95 = percentile(during_waits, 95);
  const double seconds = std::chrono::duration<double>(totals.batch_end - scenario.batch_start).count();
  totals.capacity_rate = capacity_rate(scenario.provider, estimate.tokens());
  if (seconds > 0) {
    totals.interactive_rate = static_cast<double>(interactive_started_during) / seconds;
    totals.batch_rate = static_cast<double>(totals.batch_served) / seconds;
  }
  return totals;
}

/// Two tenants' interactive calls on one deployment for `duration`, each a Poisson process, each tenant
/// with at most `in_progress` calls under way (the others wait their turn, their wait counted): the heavy
/// tenant "a" `heavy_mean_gap` apart on average (unless `heavy` is false: "b" alone), the light one "b"
/// `light_mean_gap` apart.
struct TenantScenario {
  ProviderSpec provider;  ///< its requests and tokens buckets and latency
  Limits limits;          ///< what the deployment is told
  std::int64_t prompt_tokens = 500;
  std::int64_t max_tokens = 300;
  std::chrono::milliseconds heavy_mean_gap{40};   ///< tenant a: 25 calls a second on average
  std::chrono::milliseconds light_mean_gap{400};  ///< tenant b: 2.5 calls a second on average
  int in_progress = 64;                           ///< per tenant
  Time duration{std::chrono::minutes{5}};
  bool heavy = true;    ///< false: tenant b alone
  bool tenants = true;  ///< false: no tenant given (first come, first served)
  std::uint64_t seed = 1;

  /// Throws std::invalid_argument naming the field when the scenario makes no sense.
  void validate() const {
    if (prompt_tokens < 0 || max_tokens < 0)
      detail::throw_invalid_argument("TenantScenario::prompt_tokens and max_tokens must not be negative");
    if (heavy_mean_gap <= std::chrono::milliseconds::zero() || light_mean_gap <= std::chrono::milliseconds::zero())
      detail::throw_invalid_argument("TenantScenario: the mean gaps must be positive");
    if (in_progress < 1) detail::throw_invalid_argument("TenantScenario::in_progress must be at least 1");
    if (duration <= Time::zero()) detail::throw_invalid_argument("TenantScenario::duration must be positive");
    provider.validate();
    limits.validate();
  }
};

/// What each tenant saw: its calls' waits from arrival to the first attempt (the calls that arrived before the
/// last 30 s), and how many of all its calls were served.
struct TenantTotals {
  WaitFigures heavy;
  WaitFigures light;
  std::int64_t heavy_served = 0;
  std::int64_t light_served = 0;
};

/// Runs `scenario` in virtual time, every call interactive and driven by its CallEngine through one
/// Deployment (Deployment::pace with its tenant when `tenants`). Calls that arrive in the last 30 s of
/// `duration` are not counted in the waits (their wait may run past its end). The same scenario gives the
/// same totals on every run. Throws std::invalid_argument naming the field when it makes no sense.
[[nodiscard]] inline TenantTotals simulate_tenants(const TenantScenario& scenario) {
  scenario.validate();
  const Cost estimate{1, scenario.prompt_tokens, scenario.max_tokens};
  ProviderModel provider{scenario.provider, stream(scenario.seed, 0)(), detail::prevalidated};
  Time now{0};
  Deployment deployment(detail::simulated_deployment(scenario.limits, now));
  const RetryPolicy policy = RetryPolicy::batch();
  const CallOptions call_options;
  struct Call {
    int tenant = 0;
    Time arrived{0};
    bool started = false;
    std::optional<CallEngine<Deployment::Pacing>> engine;
  };
  struct Tenant {
    const char* name;
    std::chrono::milliseconds gap;
    SplitMix64 arrivals;
    std::deque<std::size_t> backlog;
    int under_way = 0;
    std::vector<std::chrono::milliseconds> waits;
    WaitFigures* figures;
    std::int64_t* served;
  };
  TenantTotals totals;
  std::vector<Tenant> tenants{
      {"a", scenario.heavy_mean_gap, stream(scenario.seed, 1), {}, 0, {}, &totals.heavy, &totals.heavy_served},
      {"b", scenario.light_mean_gap, stream(scenario.seed, 2), {}, 0, {}, &totals.light, &totals.light_served}};
  std::deque<Call> calls;
  enum class Kind : std::uint8_t { arrive, resume, answered };
  struct Due {
    Kind kind = Kind::arrive;
    std::size_t index = 0;  // arrive: the tenant; otherwise the call
    Reply reply;
  };
  EventQueue<Due> queue;
  SplitMix64 rng = stream(scenario.seed, 3);
  const Time counted_until = scenario.duration - std::min(scenario.duration, Time{std::chrono::seconds{30}});
  const auto next_arrival = [&](std::size_t t) {
    const Time at = now + detail::exponential_gap(tenants[t].arrivals, tenants[t].gap);
    if (at < scenario.duration) queue.push(at, 0, Due{Kind::arrive, t, {}});
  };
  std::function<void(std::size_t, const Step&)> carry_out;
  const auto begin = [&](std::size_t i) {
    ++tenants[static_cast<std::size_t>(calls[i].tenant)].under_way;
    carry_out(i, calls[i].engine->start());
  };
  carry_out = [&](std::size_t i, const Step& step) {
    Call& call = calls[i];
    Tenant& tenant = tenants[static_cast<std::size_t>(call.tenant)];
    if (step.kind == Step::Kind::wait) {
      queue.push(now + step.wait, 1, Due{Kind::resume, i, {}});
      return;
    }
    if (step.kind == Step::Kind::done) {
      if (call.engine->gave_up() == nullptr) ++*tenant.served;
      else if (call.arrived < counted_until) ++tenant.figures->gave_up;
      call.engine.reset();
      --tenant.under_way;
      if (!tenant.backlog.empty()) {
        const std::size_t next = tenant.backlog.front();
        tenant.backlog.pop_front();
        begin(next);
      }
      return;
    }
    if (!std::exchange(call.started, true) && call.arrived < counted_until) tenant.waits.push_back(now - call.arrived);
    const Reply reply = provider.request(now, estimate.tokens());
    queue.push(now + reply.latency, 2, Due{Kind::answered, i, reply});
  };
  if (scenario.heavy) next_arrival(0);
  next_arrival(1);
  while (!queue.empty()) {
    Event<Due> event = queue.pop();
    now = event.at;
    const std::size_t i = event.payload.index;
    switch (event.payload.kind) {
      case Kind::arrive: {
        Tenant& tenant = tenants[i];
        Call& call = calls.emplace_back();
        call.tenant = static_cast<int>(i);
        call.arrived = now;
        call.engine.emplace(detail::validate_later, policy,
                            deployment.pace(estimate, Priority::interactive, scenario.tenants ? tenant.name : ""),
                            call_options);
        if (now < counted_until) ++tenant.figures->calls;
        if (tenant.under_way < scenario.in_progress) begin(calls.size() - 1);
        else tenant.backlog.push_back(calls.size() - 1);
        next_arrival(i);
        break;
      }
      case Kind::resume: carry_out(i, calls[i].engine->resume()); break;
      case Kind::answered: {
        const Reply& reply = event.payload.reply;
        if (!reply.failure) {
          carry_out(i, calls[i].engine->succeeded(detail::PacedAnswer{std::nullopt, reply.reported}));
          break;
        }
        if (reply.outcome == Outcome::refused && calls[i].arrived < counted_until)
          ++tenants[static_cast<std::size_t>(calls[i].tenant)].figures->refused;
        carry_out(i, calls[i].engine->failed(*reply.failure, rng));
        break;
      }
    }
  }
  for (Tenant& tenant : tenants) {
    std::sort(tenant.waits.begin(), tenant.waits.end());
    tenant.figures->p50 = percentile(tenant.waits, 50);
    tenant.figures->p95 = percentile(tenant.waits, 95);
  }
  return totals;
}

/// Returns the scenario of the comparison: the 38,000-ticket backlog's provider (1,800 RPM and 900,000 TPM
/// enforced per second: 30 requests and 15,000 tokens a second, 2.8 s per answer, the precise
/// `retry-after-ms`), calls of 800 tokens (prompt 500, max_tokens 300: 18.75 a second at most),
/// interactive calls 6.25 a second on average from the start, 38,000 batch calls taken by 96 workers
/// from the fifth minute; under priorities or first come, first served.
[[nodiscard]] inline PriorityScenario interactive_and_batch(bool priorities) {
  PriorityScenario s;
  s.provider.requests = Bucket{30, std::chrono::seconds{1}};
  s.provider.tokens = Bucket{15'000, std::chrono::seconds{1}};
  s.provider.tokens_per_request = 1;
  s.provider.latency = std::chrono::milliseconds{2800};
  s.provider.retry_after_header = RetryAfterMode::precise;
  s.limits[Dimension::requests_per_minute] = Limit::per_minute(1800, 30);
  s.limits[Dimension::tokens_per_minute] = Limit::per_minute(900'000, 15'000);
  s.priorities = priorities;
  return s;
}

/// Returns the tenants' comparison: the provider of interactive_and_batch, tenant a sending 25 calls a
/// second on average (more than the 18.75 the limits allow), tenant b 2.5, for five minutes; `heavy`
/// false: b alone; `tenants` false: no tenant given to the deployment.
[[nodiscard]] inline TenantScenario two_tenants(bool heavy, bool tenants) {
  const PriorityScenario base = interactive_and_batch(false);
  TenantScenario s;
  s.provider = base.provider;
  s.limits = base.limits;
  s.heavy = heavy;
  s.tenants = tenants;
  return s;
}

/// Writes the side-by-side table of `rows` (a title and a run's totals each): each tenant's waits.
inline void write_tenant_table(std::ostream& out, const std::vector<std::pair<std::string, TenantTotals>>& rows) {
  const auto ms = [](std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; };
  std::vector<std::vector<std::string>> table{
      {"", "a: calls", "served", "P50", "P95", "429s", "b: calls", "P50", "P95", "429s"}};
  for (const auto& [title, t] : rows)
    table.push_back({title, std::to_string(t.heavy.calls), std::to_string(t.heavy_served), ms(t.heavy.p50),
                     ms(t.heavy.p95), std::to_string(t.heavy.refused), std::to_string(t.light.calls), ms(t.light.p50),
                     ms(t.light.p95), std::to_string(t.light.refused)});
  detail::write_columns(out, table);
}

/// Writes the side-by-side table of `rows` (a title and a run's totals each): the interactive calls' waits
/// and 429s before and during the batch, and the batch's rate as a share of what they left.
inline void write_priority_table(std::ostream& out, const std::vector<std::pair<std::string, PriorityTotals>>& rows) {
  const auto ms = [](std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; };
  const auto hundredths = [](double value) {  // "12.45"
    const long long scaled = std::llround(value * 100.0);
    const std::string fraction = std::to_string(scaled % 100);
    return std::to_string(scaled / 100) + (fraction.size() < 2 ? ".0" : ".") + fraction;
  };
  std::vector<std::vector<std::string>> table{{"", "before: calls", "P50", "P95", "429s", "during: calls", "P50", "P95",
                                               "429s", "batch: served", "429s", "per s", "leftover used"}};
  for (const auto& [title, t] : rows)
    table.push_back({title, std::to_string(t.before.calls), ms(t.before.p50), ms(t.before.p95),
                     std::to_string(t.before.refused), std::to_string(t.during.calls), ms(t.during.p50),
                     ms(t.during.p95), std::to_string(t.during.refused), std::to_string(t.batch_served),
                     std::to_string(t.batch_refused), hundredths(t.batch_rate),
                     hundredths(100.0 * t.leftover_share()) + " %"});
  detail::write_columns(out, table);
}

}  // namespace sim
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_SIM_PRIORITIES_HPP
