#ifndef LLMRETRY_SIM_FLEET_HPP
#define LLMRETRY_SIM_FLEET_HPP

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "../admission/circuit_breaker.hpp"
#include "../admission/retry_budget.hpp"
#include "../decision.hpp"
#include "../detail/config.hpp"
#include "../detail/uniform.hpp"
#include "../fallback.hpp"
#include "../http/status.hpp"
#include "../policy.hpp"
#include "event_queue.hpp"
#include "provider.hpp"
#include "random.hpp"

namespace llmretry::sim {

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

/// Runs `scenario` in virtual time: every call is driven by its own RetryState on each deployment, and,
/// as the mechanisms say, by the very RetryBudget, CircuitBreaker and FallbackChain::after that
/// call_with_fallback uses (breaker, then budget, before each attempt), on the virtual clock. The same
/// scenario gives the same totals on every run.
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
  const FallbackChain chain{routes};

  struct Call {
    std::size_t route = 0;
    RetryState state;
    SplitMix64 rng;
    int attempt = 0;  // attempts made on this route
    std::optional<Failure> last_sent;
    CircuitBreaker::Pass pass;
  };
  std::vector<Call> calls;
  calls.reserve(static_cast<std::size_t>(scenario.calls));
  for (std::int64_t i = 0; i < scenario.calls; ++i)
    calls.push_back(Call{0,
                         RetryState{detail::prevalidated, scenario.policy},
                         stream(scenario.seed, static_cast<std::uint64_t>(i) + 1),
                         0,
                         std::nullopt,
                         {}});

  enum class Kind : std::uint8_t { admit, answered };
  struct Step {
    Kind kind;
    std::size_t call;
    std::optional<Failure> failure;  // answered: none when served
  };
  EventQueue<Step> queue;
  FleetTotals totals;
  totals.calls = scenario.calls;
  const auto rank = [](std::size_t i) { return static_cast<std::uint64_t>(i); };

  // The call gave up on its route for `stop` after `failure`: it moves on, or gives up for good.
  const auto give_up = [&](std::size_t i, StopReason stop, const Failure& failure) {
    Call& call = calls[i];
    const FallbackStep step = chain.after(call.route, stop, call.last_sent, failure, true);
    if (step.to) {
      call.route = *step.to;
      call.state = RetryState{detail::prevalidated, scenario.policy};
      call.attempt = 0;
      call.last_sent.reset();
      queue.push(now, rank(i), Step{Kind::admit, i, std::nullopt});
      return;
    }
    ++totals.gave_up[to_string(stop)];
    totals.makespan = std::max(totals.makespan, now);
  };

  for (std::size_t i = 0; i < calls.size(); ++i)
    queue.push(scenario.spacing * static_cast<std::int64_t>(i), rank(i), Step{Kind::admit, i, std::nullopt});
  while (!queue.empty()) {
    Event<Step> event = queue.pop();
    now = event.at;
    const std::size_t i = event.payload.call;
    Call& call = calls[i];
    const std::size_t r = call.route;
    if (event.payload.kind == Kind::admit) {
      ++call.attempt;
      call.pass = CircuitBreaker::Pass{true, false, 0, std::nullopt};
      if (breakers[r]) {
        call.pass = breakers[r]->try_pass(clock());
        if (!call.pass.allowed) {
          Failure refusal = Failure::of(FailureKind::server_error, Sent::not_sent);
          refusal.provider_wait = call.pass.wait;
          give_up(i, StopReason::circuit_open, refusal);
          continue;
        }
      }
      if (budgets[r]) {
        if (call.attempt == 1) {
          budgets[r]->deposit(clock());
        } else if (!budgets[r]->try_withdraw(clock())) {
          if (breakers[r]) breakers[r]->abandon(call.pass);
          give_up(i, StopReason::retry_budget, *call.last_sent);
          continue;
        }
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
      queue.push(now + latency, rank(i), Step{Kind::answered, i, failure});
      continue;
    }
    const std::optional<Failure>& failure = event.payload.failure;
    if (breakers[r]) breakers[r]->record(call.pass, failure && CircuitBreaker::counts_as_failure(*failure), clock());
    if (!failure) {
      ++totals.served_by[r];
      totals.makespan = std::max(totals.makespan, now);
      continue;
    }
    call.last_sent = *failure;
    const Decision decision = call.state.next(*failure, call.rng);
    if (decision.retry) {
      queue.push(now + decision.wait, rank(i), Step{Kind::admit, i, std::nullopt});
    } else {
      give_up(i, decision.reason, *failure);
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

}  // namespace llmretry::sim

#endif  // LLMRETRY_SIM_FLEET_HPP
