#ifndef LLMRETRY_SIM_SIMULATION_HPP
#define LLMRETRY_SIM_SIMULATION_HPP

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "../decision.hpp"
#include "../detail/config.hpp"
#include "../engine.hpp"
#include "../policy.hpp"
#include "../version.hpp"
#include "event_queue.hpp"
#include "provider.hpp"
#include "random.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace sim {

/// What to simulate: N clients, each making one logical call under `policy`, against one provider.
/// Each client draws its jitter from its own stream of `seed`; the provider's random failures from another.
struct Scenario {
  int clients = 4;         ///< how many clients, each making one logical call
  RetryPolicy policy;      ///< every client's retry policy
  ProviderSpec provider;   ///< the provider they all call
  std::uint64_t seed = 1;  ///< the one seed all random draws derive from
  /// Client i (0-based) sends its first attempt at i * start_spacing; zero: all at once.
  std::chrono::milliseconds start_spacing{0};
  /// Whether a request that may have been processed (503, timeout) may be sent again.
  bool safe_to_repeat = true;

  /// Throws std::invalid_argument naming the field when the scenario makes no sense: clients outside
  /// [1, 10,000,000], a negative start_spacing, or a bad policy or provider (see their validate()).
  void validate() const {
    if (clients < 1 || clients > 10'000'000)
      detail::throw_invalid_argument("Scenario::clients must be in [1, 10000000]");
    if (start_spacing < std::chrono::milliseconds::zero())
      detail::throw_invalid_argument("Scenario::start_spacing must not be negative");
    policy.validate();
    provider.validate();
  }
};

/// One request of one client.
struct Attempt {
  int number = 1;    ///< 1 for the first attempt
  Time sent{0};      ///< when the request left the client
  Time answered{0};  ///< when the client held the answer (or stopped waiting for it)
  Outcome outcome = Outcome::served;
  int status = 0;                     ///< HTTP status: 200 when served, 429, 409 or 503, 0 when timed out
  std::chrono::milliseconds wait{0};  ///< the wait decided after this attempt; 0 when none followed
};

/// Everything one client did.
struct ClientResult {
  Time start{0};                        ///< when its first attempt was sent
  std::vector<Attempt> attempts;        ///< every request, in order
  bool served = false;                  ///< whether an attempt succeeded
  Time finished{0};                     ///< when it was served or gave up
  std::optional<StopReason> gave_up;    ///< why it stopped, when not served
  std::chrono::milliseconds waited{0};  ///< total of its waits
};

/// Totals over all clients. Completion time is finish minus start, over served clients (0 when none).
struct Totals {
  std::int64_t requests = 0;             ///< attempts sent by all clients
  std::int64_t served = 0;               ///< clients served (one successful request each)
  std::int64_t refused = 0;              ///< refusals for capacity, answered `refusal_status`
  int refusal_status = 429;              ///< the status of a refusal: 429, or 409 for BusyAnswer::conflict
  std::int64_t other_failures = 0;       ///< 503s and timeouts
  std::int64_t gave_up = 0;              ///< clients that stopped without being served
  Time makespan{0};                      ///< the last finish, served or not
  std::chrono::milliseconds p50{0};      ///< median completion time (nearest rank)
  std::chrono::milliseconds p95{0};      ///< 95th percentile completion time (nearest rank)
  std::chrono::milliseconds p99{0};      ///< 99th percentile completion time (nearest rank)
  std::chrono::milliseconds waited{0};   ///< all clients' waits added up
  std::int64_t largest_retry_group = 0;  ///< the most retries sent at one instant
  Time largest_retry_group_at{0};        ///< that instant (the earliest, on a tie)
};

/// What a simulation produced: one ClientResult per client, in client order, and the totals.
struct RunResult {
  std::vector<ClientResult> clients;  ///< one per client, in client order
  Totals totals;                      ///< totals_of(clients), plus the largest group of retries
};

/// Retries sent at one instant, and how many of them were served.
struct Group {
  Time at{0};                 ///< the instant
  std::int64_t requests = 0;  ///< retries sent at that instant
  std::int64_t served = 0;    ///< how many of them were served
};

/// Returns, in time order, every instant at which at least `min_requests` retries (attempts after the
/// first) were sent: the herd, when clients come back together.
[[nodiscard]] inline std::vector<Group> retry_groups(const RunResult& result, std::int64_t min_requests = 2) {
  std::vector<std::pair<Time, bool>> retries;
  for (const auto& client : result.clients)
    for (const auto& attempt : client.attempts)
      if (attempt.number > 1) retries.emplace_back(attempt.sent, attempt.outcome == Outcome::served);
  std::sort(retries.begin(), retries.end());
  std::vector<Group> groups;
  for (std::size_t i = 0; i < retries.size();) {
    Group group{retries[i].first, 0, 0};
    for (; i < retries.size() && retries[i].first == group.at; ++i) {
      ++group.requests;
      if (retries[i].second) ++group.served;
    }
    if (group.requests >= min_requests) groups.push_back(group);
  }
  return groups;
}

/// Returns the nearest-rank percentile `percent` (in (0, 100]) of `sorted`, which must be sorted
/// ascending; 0 when it is empty.
[[nodiscard]] inline std::chrono::milliseconds percentile(const std::vector<std::chrono::milliseconds>& sorted,
                                                          int percent) {
  if (sorted.empty()) return std::chrono::milliseconds::zero();
  const auto n = static_cast<std::int64_t>(sorted.size());
  const std::int64_t rank = std::max<std::int64_t>(1, (n * percent + 99) / 100);
  return sorted[static_cast<std::size_t>(std::min(rank, n) - 1)];
}

/// Returns the totals of the given client results.
[[nodiscard]] inline Totals totals_of(const std::vector<ClientResult>& clients) {
  Totals totals;
  std::vector<std::chrono::milliseconds> completions;
  completions.reserve(clients.size());
  for (const auto& client : clients) {
    for (const auto& attempt : client.attempts) {
      ++totals.requests;
      if (attempt.outcome == Outcome::refused) ++totals.refused;
      if (attempt.outcome == Outcome::server_error || attempt.outcome == Outcome::timeout) ++totals.other_failures;
    }
    if (client.served) {
      ++totals.served;
      completions.push_back(client.finished - client.start);
    } else {
      ++totals.gave_up;
    }
    totals.makespan = std::max(totals.makespan, client.finished);
    totals.waited += client.waited;
  }
  std::sort(completions.begin(), completions.end());
  totals.p50 = percentile(completions, 50);
  totals.p95 = percentile(completions, 95);
  totals.p99 = percentile(completions, 99);
  return totals;
}

/// Runs `scenario` in virtual time and returns what every client did. Each client is driven by its own
/// CallEngine, exactly as call_with_retry drives one call; nothing sleeps and no clock is read. Requests
/// sent at the same instant reach the provider in client order. The same scenario (seed included) gives
/// the same result on every run and platform.
/// Throws std::invalid_argument naming the field when the scenario makes no sense.
[[nodiscard]] inline RunResult simulate(const Scenario& scenario) {
  scenario.validate();
  ProviderModel provider{scenario.provider, stream(scenario.seed, 0)(), detail::prevalidated};
  CallOptions options;
  options.safe_to_repeat = scenario.safe_to_repeat;
  struct Caller {
    SplitMix64 rng{0};
    std::optional<CallEngine<NoGuard>> engine;
  };
  std::deque<Caller> callers;  // engines stay where they are made
  RunResult result;
  result.clients.resize(static_cast<std::size_t>(scenario.clients));
  EventQueue<std::size_t> queue;
  queue.reserve(static_cast<std::size_t>(scenario.clients));
  for (std::size_t i = 0; i < result.clients.size(); ++i) {
    Caller& caller = callers.emplace_back();
    caller.rng = stream(scenario.seed, i + 1);
    caller.engine.emplace(detail::validate_later, scenario.policy, NoGuard{}, options);
    result.clients[i].start = scenario.start_spacing * static_cast<std::int64_t>(i);
    queue.push(result.clients[i].start, i, i);
  }
  while (!queue.empty()) {
    const auto event = queue.pop();
    const std::size_t i = event.payload;
    ClientResult& client = result.clients[i];
    CallEngine<NoGuard>& engine = *callers[i].engine;
    // Without a guard or a deadline, each step after a wait (and the first) is the attempt.
    [[maybe_unused]] const Step next = client.attempts.empty() ? engine.start() : engine.resume();
    assert(next.kind == Step::Kind::attempt);
    const Reply reply = provider.request(event.at);
    Attempt attempt;
    attempt.number = engine.attempt().number;
    attempt.sent = event.at;
    attempt.answered = event.at + reply.latency;
    attempt.outcome = reply.outcome;
    client.finished = attempt.answered;
    if (!reply.failure) {
      client.served = true;
      attempt.status = 200;
      (void)engine.succeeded();
    } else {
      attempt.status = reply.failure->status;
      const Step step = engine.failed(*reply.failure, callers[i].rng);
      if (step.kind == Step::Kind::wait) {
        attempt.wait = step.wait;
        queue.push(attempt.answered + step.wait, i, i);
      } else {
        client.gave_up = engine.gave_up()->reason;
      }
      client.waited = engine.waited();
    }
    client.attempts.push_back(attempt);
  }
  result.totals = totals_of(result.clients);
  result.totals.refusal_status = scenario.provider.busy_answer == BusyAnswer::conflict ? 409 : 429;
  for (const Group& group : retry_groups(result, 1)) {
    if (group.requests > result.totals.largest_retry_group) {
      result.totals.largest_retry_group = group.requests;
      result.totals.largest_retry_group_at = group.at;
    }
  }
  return result;
}

}  // namespace sim
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_SIM_SIMULATION_HPP
