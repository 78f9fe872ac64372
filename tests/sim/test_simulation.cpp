#include <llmretry/sim/scenarios.hpp>
#include <llmretry/sim/simulation.hpp>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "llmretry_catch.hpp"

using namespace std::chrono_literals;
using llmretry::Jitter;
using llmretry::StopReason;
using llmretry::sim::Attempt;
using llmretry::sim::Bucket;
using llmretry::sim::Outcome;
using llmretry::sim::RetryAfterMode;
using llmretry::sim::RunResult;
using llmretry::sim::Scenario;
using llmretry::sim::simulate;
using llmretry::sim::Time;
namespace scenarios = llmretry::sim::scenarios;

namespace {

/// Returns a client's attempts as (sent in ms, served?) pairs.
std::vector<std::pair<long long, bool>> attempts_of(const RunResult& result, std::size_t client) {
  std::vector<std::pair<long long, bool>> out;
  for (const Attempt& a : result.clients[client].attempts)
    out.emplace_back(a.sent.count(), a.outcome == Outcome::served);
  return out;
}

/// Returns everything a result holds as text, to compare two runs byte for byte.
std::string fingerprint(const RunResult& result) {
  std::string text;
  for (const auto& client : result.clients) {
    for (const Attempt& a : client.attempts)
      text += std::to_string(a.sent.count()) + ':' + std::to_string(a.answered.count()) + ':' +
              std::to_string(static_cast<int>(a.outcome)) + ':' + std::to_string(a.status) + ':' +
              std::to_string(a.wait.count()) + ' ';
    text += client.served ? "served " : "gave_up ";
    text += std::to_string(client.finished.count()) + '\n';
  }
  return text;
}

/// Returns the message of the std::invalid_argument that simulating `scenario` throws, or "".
std::string error_of(const Scenario& scenario) {
  try {
    (void)simulate(scenario);
  } catch (const std::invalid_argument& error) {
    return error.what();
  }
  return {};
}

}  // namespace

TEST_CASE("the explorer without jitter: every attempt, wait and finish, exactly") {
  const RunResult result = simulate(scenarios::explorer(Jitter::none));
  using V = std::vector<std::pair<long long, bool>>;
  CHECK(attempts_of(result, 0) == V{{0, true}});
  CHECK(attempts_of(result, 1) == V{{0, false}, {500, true}});
  CHECK(attempts_of(result, 2) == V{{0, false}, {500, false}, {1500, true}});
  CHECK(attempts_of(result, 3) == V{{0, false}, {500, false}, {1500, false}, {3500, true}});
  CHECK(result.clients[3].waited == 3500ms);
  CHECK(result.clients[2].waited == 1500ms);
  for (const auto& client : result.clients) CHECK(client.served);
  CHECK(result.clients[3].finished == 3500ms);
  CHECK(result.totals.requests == 10);
  CHECK(result.totals.refused == 6);
  CHECK(result.totals.served == 4);
  CHECK(result.totals.gave_up == 0);
  CHECK(result.totals.makespan == 3500ms);
  CHECK(result.totals.waited == 500ms + 1500ms + 3500ms);
  CHECK(result.totals.p50 == 500ms);
  CHECK(result.totals.p95 == 3500ms);
  CHECK(result.totals.largest_retry_group == 3);  // clients 2, 3 and 4 back together at 0.5 s
  CHECK(result.totals.largest_retry_group_at == 500ms);
}

TEST_CASE("one attempt fewer, and the explorer's client 4 gives up") {
  Scenario s = scenarios::explorer(Jitter::none);
  s.policy.max_attempts = 3;
  const RunResult result = simulate(s);
  CHECK_FALSE(result.clients[3].served);
  CHECK(result.clients[3].gave_up == StopReason::attempts_exhausted);
  CHECK(result.clients[3].finished == 1500ms);
  CHECK(result.totals.gave_up == 1);
}

TEST_CASE("same seed, same result; another seed, another draw") {
  Scenario s = scenarios::explorer(Jitter::full);
  s.clients = 50;
  s.provider.server_error_rate = 0.1;
  s.provider.latency = 300ms;
  const std::string first = fingerprint(simulate(s));
  CHECK(first == fingerprint(simulate(s)));
  s.seed = 2;
  CHECK(first != fingerprint(simulate(s)));
}

TEST_CASE("everyone waits 30 seconds: obeying a fixed retry-after without jitter comes back in groups") {
  const RunResult fixed = simulate(scenarios::everyone_waits_30s());
  const auto groups = llmretry::sim::retry_groups(fixed);
  REQUIRE(groups.size() == 8);  // 9 refused at 0 s come back at 30 s, 8 of them at 60 s, ...
  for (std::size_t i = 0; i < groups.size(); ++i) {
    CHECK(groups[i].at == Time{30s} * static_cast<long long>(i + 1));
    CHECK(groups[i].requests == 9 - static_cast<long long>(i));
    CHECK(groups[i].served == 1);
  }
  CHECK(fixed.totals.served == 10);
  CHECK(fixed.totals.makespan == 270s);

  // The fix: retry-after-ms gives the time until capacity returns (1 s here), jitter spreads the rest.
  const RunResult precise = simulate(scenarios::precise_retry_after());
  CHECK(precise.totals.served == 10);
  CHECK(precise.totals.makespan < 30s);
  CHECK(precise.totals.refused < fixed.totals.refused);
  // The wait is max(jittered backoff, retry-after): while the backoff is below the precise value, the
  // refused still come back together, at the instant capacity returns; once it is above, jitter spreads them.
  const auto grouped = [](const std::vector<llmretry::sim::Group>& all) {
    long long total = 0;
    for (const auto& group : all) total += group.requests;
    return total;
  };
  const auto precise_groups = llmretry::sim::retry_groups(precise);
  CHECK(grouped(precise_groups) < grouped(groups));
  for (const auto& group : precise_groups) CHECK(group.at % 1s == 0ms);

  // provider_wait_jitter spreads those returns above the provider's wait: smaller groups, all still served.
  const RunResult spread = simulate(scenarios::precise_retry_after_spread());
  CHECK(spread.totals.served == 10);
  CHECK(spread.totals.largest_retry_group < precise.totals.largest_retry_group);
  CHECK(grouped(llmretry::sim::retry_groups(spread)) < grouped(precise_groups));
}

TEST_CASE("Scenario::validate names the bad field") {
  Scenario s;
  CHECK(error_of(s).empty());
  s.clients = 0;
  CHECK(error_of(s).find("Scenario::clients") != std::string::npos);
  s.clients = 1;
  s.start_spacing = -1ms;
  CHECK(error_of(s).find("Scenario::start_spacing") != std::string::npos);
  s.start_spacing = 0ms;
  s.policy.max_attempts = 0;
  CHECK(error_of(s).find("max_attempts") != std::string::npos);
  s.policy.max_attempts = 1;
  s.provider.concurrency = 0;
  CHECK(error_of(s).find("concurrency") != std::string::npos);
}

TEST_CASE("invariants over many random seeds and models") {
  llmretry::sim::SplitMix64 pick{2024};
  const auto between = [&](long long lo, long long hi) { return llmretry::detail::uniform_between(pick, lo, hi); };
  const Jitter jitters[] = {Jitter::none, Jitter::full, Jitter::equal, Jitter::decorrelated};
  const RetryAfterMode modes[] = {RetryAfterMode::none, RetryAfterMode::fixed, RetryAfterMode::precise};
  for (int run = 0; run < 300; ++run) {
    Scenario s;
    s.seed = static_cast<std::uint64_t>(run);
    s.clients = static_cast<int>(between(1, 60));
    s.start_spacing = std::chrono::milliseconds{between(0, 1) * between(0, 200)};
    s.policy.max_attempts = static_cast<int>(between(1, 8));
    s.policy.base = std::chrono::milliseconds{between(0, 1000)};
    s.policy.cap = s.policy.base + std::chrono::milliseconds{between(0, 8000)};
    s.policy.max_total_wait = std::chrono::milliseconds{between(0, 30000)};
    s.policy.max_provider_wait = std::chrono::milliseconds{between(0, 40000)};
    s.policy.jitter = jitters[between(0, 3)];
    auto& p = s.provider;
    if (between(0, 1)) p.start_interval = std::chrono::milliseconds{between(1, 500)};
    if (between(0, 1)) p.requests = Bucket{between(1, 20), std::chrono::milliseconds{between(100, 5000)}};
    if (between(0, 1)) {
      p.tokens = Bucket{between(1000, 20000), std::chrono::milliseconds{between(100, 5000)}};
      p.tokens_per_request = between(1, p.tokens->capacity);
    }
    if (between(0, 1)) p.concurrency = static_cast<int>(between(1, 10));
    p.latency = std::chrono::milliseconds{between(0, 2000)};
    p.refusal_latency = std::chrono::milliseconds{between(0, 50)};
    p.server_error_rate = static_cast<double>(between(0, 20)) / 100.0;
    p.timeout_rate = static_cast<double>(between(0, 10)) / 100.0;
    p.timeout = std::chrono::milliseconds{between(0, 5000)};
    p.retry_after_header = modes[between(0, 2)];
    p.fixed_retry_after = std::chrono::milliseconds{between(0, 40000)};
    INFO("run " << run);

    const RunResult result = simulate(s);
    REQUIRE(result.clients.size() == static_cast<std::size_t>(s.clients));
    std::vector<Time> admitted;                      // every request the provider took on
    std::vector<std::pair<Time, int>> flight_edges;  // +1 at start, -1 at answer
    for (const auto& client : result.clients) {
      REQUIRE(!client.attempts.empty());
      CHECK(client.attempts.size() <= static_cast<std::size_t>(s.policy.max_attempts));
      CHECK(client.waited <= s.policy.max_total_wait);
      std::chrono::milliseconds waits{0};
      for (std::size_t a = 0; a < client.attempts.size(); ++a) {
        const Attempt& attempt = client.attempts[a];
        const bool last = a + 1 == client.attempts.size();
        CHECK((attempt.outcome == Outcome::served) == (last && client.served));
        CHECK((attempt.status == 200) == (attempt.outcome == Outcome::served));
        if (!last) CHECK(client.attempts[a + 1].sent == attempt.answered + attempt.wait);
        waits += attempt.wait;
        if (attempt.outcome != Outcome::refused) {
          admitted.push_back(attempt.sent);
          flight_edges.emplace_back(attempt.sent, 1);
          flight_edges.emplace_back(attempt.answered, -1);
        }
      }
      CHECK(waits == client.waited);
      CHECK(client.served != client.gave_up.has_value());
      CHECK(client.finished == client.attempts.back().answered);
    }
    std::sort(admitted.begin(), admitted.end());
    if (p.start_interval)
      for (std::size_t i = 1; i < admitted.size(); ++i) CHECK(admitted[i] - admitted[i - 1] >= *p.start_interval);
    if (p.requests) {  // a full bucket, then its refill: at most 2 * capacity in any window of one period
      for (std::size_t i = 0, j = 0; i < admitted.size(); ++i) {
        while (admitted[i] - admitted[j] > p.requests->period) ++j;
        CHECK(static_cast<long long>(i - j + 1) <= 2 * p.requests->capacity);
      }
    }
    if (p.concurrency) {
      std::sort(flight_edges.begin(), flight_edges.end());  // at one instant, answers (-1) before starts
      int in_flight = 0;
      for (const auto& edge : flight_edges) {
        in_flight += edge.second;
        CHECK(in_flight <= *p.concurrency);
      }
    }
  }
}
