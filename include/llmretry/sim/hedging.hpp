#ifndef LLMRETRY_SIM_HEDGING_HPP
#define LLMRETRY_SIM_HEDGING_HPP

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "../admission/hedging.hpp"
#include "../detail/config.hpp"
#include "../detail/uniform.hpp"
#include "../engine.hpp"
#include "../policy.hpp"
#include "../version.hpp"
#include "event_queue.hpp"
#include "random.hpp"
#include "simulation.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace sim {

/// Calls against a provider whose latency has a slow tail, each driven by its own CallEngine, without and
/// with hedging: what a hedge buys (the tail's percentiles) and what it costs (extra requests).
struct HedgingScenario {
  int calls = 10000;                             ///< calls, in [1, 10,000,000]
  std::chrono::milliseconds spacing{10};         ///< call i starts at i x spacing, at least 0
  std::chrono::milliseconds latency{800};        ///< a usual request takes [latency, latency + spread]
  std::chrono::milliseconds spread{400};         ///< at least 0
  double slow_share = 0.03;                      ///< the share of requests in the tail, in [0, 1]
  std::chrono::milliseconds slow_latency{8000};  ///< a request of the tail takes [slow_latency, + spread]
  /// The hedging of the second run (its clock is the simulation's). The default: the delay learned, the
  /// 95th percentile of the latencies, at most 5 % more requests.
  HedgingOptions hedging;
  std::uint64_t seed = 1;  ///< the one seed of the latency draws

  /// Throws std::invalid_argument naming the field when the scenario makes no sense.
  void validate() const {
    if (calls < 1 || calls > 10'000'000)
      detail::throw_invalid_argument("HedgingScenario::calls must be in [1, 10000000]");
    if (spacing < std::chrono::milliseconds::zero() || latency < std::chrono::milliseconds::zero() ||
        spread < std::chrono::milliseconds::zero() || slow_latency < std::chrono::milliseconds::zero())
      detail::throw_invalid_argument("HedgingScenario: spacing, latency, spread and slow_latency must not be negative");
    if (!(slow_share >= 0.0 && slow_share <= 1.0))
      detail::throw_invalid_argument("HedgingScenario::slow_share must be in [0, 1]");
    hedging.validate();
  }
};

/// What one run of a HedgingScenario did.
struct HedgingTotals {
  std::int64_t calls = 0;                                             ///< calls, all served
  std::int64_t requests = 0;                                          ///< requests sent: one per call, plus the hedges
  std::int64_t hedges = 0;                                            ///< hedges sent
  std::int64_t hedge_wins = 0;                                        ///< hedges whose answer came first
  std::chrono::milliseconds p50{0}, p95{0}, p99{0}, p999{0}, max{0};  ///< of the calls' durations
};

/// Runs `scenario` in virtual time, hedged when `hedged`, and returns its totals. Each call is a CallEngine
/// with the scenario's Hedging in its CallOptions: this driver only carries out its steps (the hedge's
/// timer, the second request, the first answer). Requests never fail. Deterministic for one seed.
/// Throws std::invalid_argument naming the field when the scenario makes no sense.
[[nodiscard]] inline HedgingTotals simulate_hedging(const HedgingScenario& scenario, bool hedged) {
  scenario.validate();
  enum class Kind : unsigned char { start, hedge_timer, answer, hedge_answer };
  struct Payload {
    std::size_t call;
    Kind kind;
  };
  // The latency of request `lane` (0: the call's own, 1: its hedge) of call `call`: the same in every run
  // of one seed, so that the runs differ only by the hedges.
  const auto latency_of = [&scenario](std::size_t call, std::uint64_t lane) {
    SplitMix64 rng = stream(scenario.seed, call * 2 + lane);
    const bool slow = static_cast<double>(rng() >> 11) * 0x1.0p-53 < scenario.slow_share;
    const std::chrono::milliseconds base = slow ? scenario.slow_latency : scenario.latency;
    return base + std::chrono::milliseconds{detail::uniform_between(rng, 0, scenario.spread.count())};
  };
  EventQueue<Payload> queue;
  HedgingOptions hedging_options = scenario.hedging;
  using time_point = std::chrono::steady_clock::time_point;
  hedging_options.clock = [&queue] { return time_point{} + queue.now(); };  // virtual time
  Hedging hedging(hedging_options);
  const RetryPolicy policy;
  CallOptions options;
  if (hedged) options.hedging = &hedging;
  std::deque<CallEngine<NoGuard>> engines;  // engines stay where they are made
  std::vector<std::chrono::milliseconds> durations;
  durations.reserve(static_cast<std::size_t>(scenario.calls));
  HedgingTotals totals;
  totals.calls = scenario.calls;
  for (std::size_t i = 0; i < static_cast<std::size_t>(scenario.calls); ++i)
    queue.push(scenario.spacing * static_cast<std::int64_t>(i), i, Payload{i, Kind::start});
  while (!queue.empty()) {
    const auto event = queue.pop();
    const std::size_t i = event.payload.call;
    switch (event.payload.kind) {
      case Kind::start: {
        CallEngine<NoGuard>& engine = engines.emplace_back(detail::validate_later, policy, NoGuard{}, options);
        [[maybe_unused]] const Step step = engine.start();  // without a guard or deadline: the attempt
        ++totals.requests;
        queue.push(event.at + latency_of(i, 0), i, Payload{i, Kind::answer});
        if (const auto delay = engine.hedge_delay()) queue.push(event.at + *delay, i, Payload{i, Kind::hedge_timer});
        break;
      }
      case Kind::hedge_timer: {
        CallEngine<NoGuard>& engine = engines[i];
        if (engine.in_flight(false) && engine.hedge()) {
          ++totals.requests;
          ++totals.hedges;
          queue.push(event.at + latency_of(i, 1), i, Payload{i, Kind::hedge_answer});
        }
        break;
      }
      case Kind::answer:
      case Kind::hedge_answer: {
        CallEngine<NoGuard>& engine = engines[i];
        const bool hedge = event.payload.kind == Kind::hedge_answer;
        if (hedged && !engine.in_flight(hedge)) break;  // it lost: cancelled, its answer never read
        (void)(hedge ? engine.hedge_succeeded() : engine.succeeded());
        if (hedge) ++totals.hedge_wins;
        durations.push_back(event.at - scenario.spacing * static_cast<std::int64_t>(i));
        break;
      }
    }
  }
  std::sort(durations.begin(), durations.end());
  totals.p50 = percentile(durations, 50);
  totals.p95 = percentile(durations, 95);
  totals.p99 = percentile(durations, 99);
  const auto at = static_cast<std::size_t>((durations.size() * 999 + 999) / 1000);
  totals.p999 = durations.empty() ? std::chrono::milliseconds::zero() : durations[std::max<std::size_t>(at, 1) - 1];
  totals.max = durations.empty() ? std::chrono::milliseconds::zero() : durations.back();
  return totals;
}

}  // namespace sim
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_SIM_HEDGING_HPP
