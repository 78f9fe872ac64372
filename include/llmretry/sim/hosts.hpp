#ifndef LLMRETRY_SIM_HOSTS_HPP
#define LLMRETRY_SIM_HOSTS_HPP

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "../admission/deployment.hpp"
#include "../admission/limits.hpp"
#include "../detail/config.hpp"
#include "../version.hpp"
#include "event_queue.hpp"
#include "pacing.hpp"
#include "provider.hpp"
#include "random.hpp"
#include "scenarios.hpp"
#include "store.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace sim {

/// How each host of a fleet paces its calls.
enum class HostPacing {
  shared,       ///< its Deployment reserves on one ModelledStore shared by every host, told the limits
  alone,        ///< its Deployment paces alone, told the whole limits
  alone_split,  ///< its Deployment paces alone, told 1 / hosts of the limits (split_limits)
};

/// Returns a label: "shared store", "alone, full limits" or "alone, limits / H".
[[nodiscard]] constexpr const char* to_string(HostPacing pacing) noexcept {
  switch (pacing) {
    case HostPacing::shared: return "shared store";
    case HostPacing::alone: return "alone, full limits";
    case HostPacing::alone_split: return "alone, limits / H";
  }
  return "unknown";
}

/// Returns each host's share of `limits` among `hosts`: limit / hosts, its burst rounded up but at least
/// what `estimate` charges the dimension (a call must fit), and at most the host's limit.
[[nodiscard]] inline Limits split_limits(const Limits& limits, int hosts, const Cost& estimate) {
  Limits share;
  for (std::size_t i = 0; i < dimension_count; ++i) {
    if (!limits.by_dimension[i]) continue;
    const Limit& whole = *limits.by_dimension[i];
    Limit part = whole;
    part.limit = std::max<std::int64_t>(1, whole.limit / hosts);
    const std::int64_t burst = (whole.burst_or_limit() + hosts - 1) / hosts;
    part.burst = std::min(part.limit, std::max(burst, charge_of(estimate, static_cast<Dimension>(i))));
    share.by_dimension[i] = part;
  }
  return share;
}

/// A fleet of hosts sharing one provider's quota: each host runs its own workers and its own Deployment.
struct HostsScenario {
  /// The workload (`workers` per host; call i on host i mod hosts), the provider, the limits, every call's
  /// policy and the seed; `admission` is not used.
  PacedScenario paced;
  int hosts = 20;
  std::chrono::milliseconds store_round_trip{1};  ///< between a host and the store, for HostPacing::shared
  HostPacing pacing = HostPacing::shared;

  /// Throws std::invalid_argument naming the field when the scenario makes no sense.
  void validate() const {
    paced.validate();
    if (hosts < 1 || hosts > 100'000) detail::throw_invalid_argument("HostsScenario::hosts must be in [1, 100000]");
    if (store_round_trip < std::chrono::milliseconds::zero())
      detail::throw_invalid_argument("HostsScenario::store_round_trip must not be negative");
  }
};

/// What a fleet of hosts did.
struct HostsTotals {
  PacedTotals all;  ///< over every call; `bound` is capacity_bound of every host's workers together
  std::vector<PacedTotals> by_host;
  std::int64_t exchanges = 0;                  ///< with the store (0 unless HostPacing::shared)
  std::int64_t peak_exchanges_per_second = 0;  ///< the most exchanges in one second of virtual time

  /// Returns the exchanges per second over the makespan (0 for an empty one).
  [[nodiscard]] double mean_exchanges_per_second() const noexcept {
    return all.makespan.count() == 0
               ? 0.0
               : static_cast<double>(exchanges) * 1000.0 / static_cast<double>(all.makespan.count());
  }
};

/// Runs `scenario` in virtual time: every call is driven by its own CallEngine, admitted by its host's
/// llmretry::Deployment (Deployment::pace) on the virtual clock, as simulate_paced does; under
/// HostPacing::shared every Deployment's DeploymentOptions::shared is one ModelledStore. The same scenario
/// gives the same totals on every run.
/// Throws std::invalid_argument naming the field when the scenario makes no sense.
[[nodiscard]] inline HostsTotals simulate_hosts(const HostsScenario& scenario) {
  scenario.validate();
  const PacedScenario& paced = scenario.paced;
  const Workload& w = paced.workload;
  const Cost estimate{1, w.prompt_tokens, w.max_tokens};
  ProviderModel provider{paced.provider, stream(paced.seed, 0)(), detail::prevalidated};
  Time now{0};
  std::shared_ptr<ModelledStore> store;
  if (scenario.pacing == HostPacing::shared)
    store = std::make_shared<ModelledStore>(paced.limits, now, scenario.store_round_trip);
  std::deque<Deployment> deployments;  // they stay where they are made
  for (int h = 0; h < scenario.hosts; ++h) {
    DeploymentOptions options;
    options.name = "host " + std::to_string(h + 1);
    options.limits = scenario.pacing == HostPacing::alone_split ? split_limits(paced.limits, scenario.hosts, estimate)
                                                                : paced.limits;
    options.clock = [&now] { return std::chrono::steady_clock::time_point{} + now; };
    options.shared = store;
    deployments.emplace_back(options);
  }
  detail::PooledTotals pooled = detail::run_paced(paced, provider, now, deployments.size(),
                                                  [&](std::size_t host) { return deployments[host].pace(estimate); });

  HostsTotals totals{pooled.all, std::move(pooled.pools), 0, 0};
  if (store) {
    totals.all.tokens_reserved = store->limiter().stats().tokens_reserved;
    totals.exchanges = store->exchanges();
    const auto& per_second = store->exchanges_per_second();
    if (!per_second.empty()) totals.peak_exchanges_per_second = *std::max_element(per_second.begin(), per_second.end());
  } else {
    for (const Deployment& d : deployments) totals.all.tokens_reserved += d.limiter().stats().tokens_reserved;
  }
  PacedScenario together = paced;
  together.workload.workers = w.workers * scenario.hosts;
  totals.all.bound = capacity_bound(together);
  return totals;
}

namespace scenarios {

/// Returns `hosts` hosts of `workers` workers each sharing out the last backlog of paced_workloads(), its
/// provider enforcing per second: 38,000 tickets (prompt 500, max_tokens 300, 150 used), 2.8 s per answer,
/// 1,800 RPM / 900,000 TPM as 30 requests and 15,000 tokens a second, 429s with the precise
/// `retry-after-ms`; every call under RetryPolicy::batch(), each Deployment told the limits; the store
/// 1 ms away.
[[nodiscard]] inline HostsScenario hosts(int hosts = 20, int workers = 50) {
  HostsScenario s;
  s.paced = paced_workloads().back().scenario;
  s.paced.workload.workers = workers;
  s.hosts = hosts;
  return s;
}

}  // namespace scenarios

}  // namespace sim
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_SIM_HOSTS_HPP
