#ifndef LLMRETRY_SIM_FLEET_HPP
#define LLMRETRY_SIM_FLEET_HPP

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "../admission/circuit_breaker.hpp"
#include "../admission/retry_budget.hpp"
#include "../decision.hpp"
#include "../detail/config.hpp"
#include "../detail/uniform.hpp"
#include "../engine.hpp"
#include "../failure.hpp"
#include "../fallback.hpp"
#include "../policy.hpp"
#include "../version.hpp"
#include "event_queue.hpp"
#include "provider.hpp"
#include "random.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace sim {

/// A deployment of a fleet run: a provider model and a window of trouble.
struct FleetProvider {
  ProviderSpec spec;  ///< its limits (429s), latency and random failures outside the trouble
  /// While from <= t < until, this share of requests fails with 503 after trouble_latency, without
  /// reaching the provider's limits: 1 for an outage, 0.5 for a brownout.
  Time trouble_from{0};
  Time trouble_until{0};
  double trouble_rate = 0.0;
  std::chrono::milliseconds trouble_latency{100};  ///< how long a 503 in trouble takes to come back
};

/// Which of the mechanisms for many calls at once a fleet run uses.
struct Mechanisms {
  bool budget = false;    ///< a RetryBudget per deployment
  bool breaker = false;   ///< a CircuitBreaker per deployment
  bool fallback = false;  ///< a FallbackChain: the primary, then the fallback
};

/// Returns a short label such as "budget + breaker + fallback", or "retries only".
[[nodiscard]] inline std::string to_string(const Mechanisms& use) {
  std::string label;
  const auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!label.empty()) label += " + ";
    label += name;
  };
  add(use.budget, "budget");
  add(use.breaker, "breaker");
  add(use.fallback, "fallback");
  return label.empty() ? "retries only" : label;
}

/// Many calls to a primary deployment that is in trouble, with a fallback deployment beside it.
struct FleetScenario {
  std::int64_t calls = 3000;              ///< call i arrives at i x spacing
  std::chrono::milliseconds spacing{20};  ///< between arrivals
  FleetProvider primary;
  FleetProvider fallback;  ///< used only with Mechanisms::fallback
  std::vector<FallbackReason> fallback_when{FallbackReason::provider_5xx, FallbackReason::rate_limit_after_retry_budget,
                                            FallbackReason::primary_unavailable};  ///< reasons to move to it
  RetryPolicy policy;             ///< every call's retries on each deployment
  RetryBudgetOptions budget;      ///< each deployment's budget (its clock is the run's)
  CircuitBreakerOptions breaker;  ///< each deployment's breaker (its clock is the run's)
  Mechanisms use;
  std::uint64_t seed = 1;

  /// Throws std::invalid_argument naming the field when the scenario makes no sense.
  void validate() const {
    if (calls < 1 || calls > 10'000'000)
      detail::throw_invalid_argument("FleetScenario::calls must be in [1, 10000000]");
    if (spacing < std::chrono::milliseconds::zero())
      detail::throw_invalid_argument("FleetScenario::spacing must not be negative");
    for (const FleetProvider* p : {&primary, &fallback}) {
      p->spec.validate();
      if (!(p->trouble_rate >= 0.0 && p->trouble_rate <= 1.0))
        detail::throw_invalid_argument("FleetProvider::trouble_rate must be in [0, 1]");
      if (p->trouble_latency < std::chrono::milliseconds::zero())
        detail::throw_invalid_argument("FleetProvider::trouble_latency must not be negative");
    }
    policy.validate();
    budget.validate();
    breaker.validate();
  }
};

/// What a fleet run did.
struct FleetTotals {
  std::int64_t calls = 0;
  std::array<std::int64_t, 2> served_by{};      ///< calls served by the primary [0] and the fallback [1]
  std::array<std::int64_t, 2> attempts{};       ///< requests sent to the primary [0] and the fallback [1]
  std::map<std::string, std::int64_t> gave_up;  ///< calls that gave up, by stop reason
  std::int64_t opened = 0;                      ///< times the primary's breaker opened
  Time makespan{0};                             ///< when the last call was served or gave up

  /// Returns the calls served.
  [[nodiscard]] std::int64_t served() const noexcept { return served_by[0] + served_by[1]; }
  /// Returns the retry amplification on the primary: requests sent to it per call.
  [[nodiscard]] double primary_amplification() const noexcept {
    return static_cast<double>(attempts[0]) / static_cast<double>(calls);
  }
};

/// Runs `scenario` in virtual time: every call is driven by its own CallEngine on each deployment, which
/// admits each attempt with route_guard (the deployment's CircuitBreaker, then its RetryBudget, as the
/// mechanisms say), as call_with_fallback does, and moves by FallbackChain::after; every clock is the
/// virtual one. The same scenario gives the same totals on every run.
/// Throws std::invalid_argument naming the field when the scenario makes no sense.
[[nodiscard]] inline FleetTotals simulate_fleet(const FleetScenario& scenario) {
  using std::chrono::milliseconds;
  scenario.validate();
  Time now{0};
  const auto clock = [&now] { return std::chrono::steady_clock::time_point{} + now; };

  const std::array<const FleetProvider*, 2> providers{&scenario.primary, &scenario.fallback};
  std::vector<ProviderModel> models;
  std::vector<SplitMix64> trouble_rngs;
  std::vector<std::optional<RetryBudget>> budgets(2);
  std::vector<std::optional<CircuitBreaker>> breakers(2);
  for (std::size_t r = 0; r < 2; ++r) {
    models.emplace_back(providers[r]->spec, stream(scenario.seed, 1'000'000 + r)(), detail::prevalidated);
    trouble_rngs.push_back(stream(scenario.seed, 2'000'000 + r));
    if (scenario.use.budget) {
      RetryBudgetOptions options = scenario.budget;
      options.clock = clock;
      budgets[r].emplace(options);
    }
    if (scenario.use.breaker) {
      CircuitBreakerOptions options = scenario.breaker;
      options.name = r == 0 ? "primary" : "fallback";
      options.clock = clock;
      breakers[r].emplace(options);
    }
  }
  std::vector<Route> routes{Route{"primary", "primary", "", {}}};
  if (scenario.use.fallback) routes.push_back(Route{"fallback", "fallback", "", scenario.fallback_when});
  for (std::size_t r = 0; r < routes.size(); ++r) {
    routes[r].breaker = breakers[r] ? &*breakers[r] : nullptr;
    routes[r].budget = budgets[r] ? &*budgets[r] : nullptr;
  }
  const FallbackChain chain{routes};
  const CallOptions call_options;  // safe to repeat, no deadline: the run's waits are virtual

  // One call: its engine on the route it is on, which admits each attempt with the route's guard.
  struct Call {
    std::size_t route = 0;
    SplitMix64 rng{0};
    std::optional<Failure> last_sent;
    std::optional<CallEngine<RouteGuard>> engine;
  };
  std::deque<Call> calls;  // engines stay where they are made
  const auto start_on = [&](Call& call, std::size_t route) {
    call.route = route;
    call.last_sent.reset();
    call.engine.reset();
    call.engine.emplace(detail::validate_later, scenario.policy, route_guard(chain.routes()[route], Cost{}),
                        call_options);
  };
  for (std::int64_t i = 0; i < scenario.calls; ++i) {
    Call& call = calls.emplace_back();
    call.rng = stream(scenario.seed, static_cast<std::uint64_t>(i) + 1);
    start_on(call, 0);
  }

  enum class Kind : std::uint8_t { start, resume, answered };
  struct Due {
    Kind kind;
    std::size_t call;
    std::optional<Failure> failure;  // answered: none when served
  };
  EventQueue<Due> queue;
  FleetTotals totals;
  totals.calls = scenario.calls;
  const auto rank = [](std::size_t i) { return static_cast<std::uint64_t>(i); };

  // Carries out `step` of call `i`: the attempt is sent to its route's provider, a wait is an event later,
  // and a call done moves to the next route or gives up for good.
  const auto carry_out = [&](std::size_t i, const Step& step) {
    Call& call = calls[i];
    const std::size_t r = call.route;
    if (step.kind == Step::Kind::wait) {
      queue.push(now + step.wait, rank(i), Due{Kind::resume, i, std::nullopt});
      return;
    }
    if (step.kind == Step::Kind::done) {
      const GiveUp* gave_up = call.engine->gave_up();
      if (gave_up == nullptr) {
        ++totals.served_by[r];
        totals.makespan = std::max(totals.makespan, now);
        return;
      }
      const FallbackStep move = chain.after(r, gave_up->reason, call.last_sent, gave_up->failure, true);
      if (move.to) {
        start_on(call, *move.to);
        queue.push(now, rank(i), Due{Kind::start, i, std::nullopt});
        return;
      }
      ++totals.gave_up[to_string(gave_up->reason)];
      totals.makespan = std::max(totals.makespan, now);
      return;
    }
    ++totals.attempts[r];
    const FleetProvider& provider = *providers[r];
    std::optional<Failure> failure;
    milliseconds latency{0};
    const bool in_trouble =
        now >= provider.trouble_from && now < provider.trouble_until &&
        detail::uniform_between(trouble_rngs[r], 0, 999'999) < detail::per_million(provider.trouble_rate);
    if (in_trouble) {
      failure = classify_status(503);
      latency = provider.trouble_latency;
    } else {
      const Reply reply = models[r].request(now);
      failure = reply.failure;
      latency = reply.latency;
    }
    queue.push(now + latency, rank(i), Due{Kind::answered, i, failure});
  };

  for (std::size_t i = 0; i < calls.size(); ++i)
    queue.push(scenario.spacing * static_cast<std::int64_t>(i), rank(i), Due{Kind::start, i, std::nullopt});
  while (!queue.empty()) {
    const auto event = queue.pop();
    now = event.at;
    const std::size_t i = event.payload.call;
    Call& call = calls[i];
    switch (event.payload.kind) {
      case Kind::start: carry_out(i, call.engine->start()); break;
      case Kind::resume: carry_out(i, call.engine->resume()); break;
      case Kind::answered:
        if (const std::optional<Failure>& failure = event.payload.failure) {
          call.last_sent = *failure;
          carry_out(i, call.engine->failed(*failure, call.rng));
        } else {
          carry_out(i, call.engine->succeeded());
        }
        break;
    }
  }
  if (breakers[0]) totals.opened = breakers[0]->stats().opened;
  return totals;
}

namespace scenarios {

/// One fleet scenario, compared under several sets of mechanisms.
struct FleetComparison {
  std::string title;
  FleetScenario scenario;
  std::vector<Mechanisms> rows;
};

/// Returns the three fleet comparisons: a 60 s outage of the primary, a brownout (half its requests
/// 503), and a rate-limited primary beside a fallback with room. 50 calls a second under the default
/// policy; answers take 1 s.
[[nodiscard]] inline std::vector<FleetComparison> fleet() {
  using namespace std::chrono_literals;
  FleetScenario base;
  base.calls = 3000;
  base.spacing = 20ms;
  base.primary.spec.latency = 1s;
  base.fallback.spec.latency = 1s;
  base.breaker.name = "primary";

  FleetScenario outage = base;
  outage.primary.trouble_until = 60s;
  outage.primary.trouble_rate = 1.0;

  FleetScenario brownout = base;
  brownout.primary.trouble_until = 60s;
  brownout.primary.trouble_rate = 0.5;

  FleetScenario limited = base;
  limited.primary.spec.requests = Bucket{600, 60s};  // 10 a second against 50 asked for
  limited.primary.spec.refusal_latency = 100ms;
  limited.primary.spec.retry_after_header = RetryAfterMode::precise;

  const Mechanisms none{};
  const Mechanisms budget{true, false, false};
  const Mechanisms breaker{false, true, false};
  const Mechanisms fallback{false, false, true};
  const Mechanisms all{true, true, true};
  return {{"primary down for 60 s (every request 503), 3,000 calls over 60 s", outage, {none, budget, breaker, all}},
          {"brownout: half the primary's requests 503 for 60 s", brownout, {none, breaker, fallback, all}},
          {"primary rate-limited to 600 RPM, 3,000 calls a minute; the fallback has room",
           limited,
           {none, budget, fallback, all}}};
}

}  // namespace scenarios

}  // namespace sim
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_SIM_FLEET_HPP
