// The herd benchmark: N clients that start together against a rate-limited provider, with each jitter
// mode, beside the physical limit; then the setup of "Exponential Backoff And Jitter" (AWS Architecture
// Blog, 2015); then the simulator's speed. Every figure is a mean over seeds, in virtual time.
//
// usage: llmretry-bench-herd [SEEDS]   (default 20 seeds per jittered row; 100 for the blog's setup)

#include <llmretry/sim.hpp>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string_view>

namespace {

using namespace std::chrono_literals;
using llmretry::Jitter;
using llmretry::sim::Scenario;
namespace sim = llmretry::sim;

constexpr Jitter jitters[] = {Jitter::none, Jitter::full, Jitter::equal, Jitter::decorrelated};

/// Means over seeds of the figures a row shows.
struct Mean {
  double calls = 0, refused = 0, gave_up = 0, makespan_s = 0, p95_s = 0;
};

std::int64_t simulated_requests = 0;
std::chrono::steady_clock::duration simulated_wall{};

Mean run(Scenario scenario, int seeds) {
  Mean mean;
  const auto seconds = [](std::chrono::milliseconds d) { return static_cast<double>(d.count()) / 1000.0; };
  for (int k = 1; k <= seeds; ++k) {
    scenario.seed = static_cast<std::uint64_t>(k);
    const auto start = std::chrono::steady_clock::now();
    const sim::Totals t = sim::simulate(scenario).totals;
    simulated_wall += std::chrono::steady_clock::now() - start;
    simulated_requests += t.requests;
    mean.calls += static_cast<double>(t.requests);
    mean.refused += static_cast<double>(t.refused);
    mean.gave_up += static_cast<double>(t.gave_up);
    mean.makespan_s += seconds(t.makespan);
    mean.p95_s += seconds(t.p95);
  }
  const double n = seeds;
  return {mean.calls / n, mean.refused / n, mean.gave_up / n, mean.makespan_s / n, mean.p95_s / n};
}

void herd_table(const char* title, const llmretry::RetryPolicy& policy, int seeds) {
  std::printf("\n%s\n", title);
  std::printf("%7s  %-12s  %10s  %10s  %8s  %12s  %10s\n", "clients", "jitter", "calls", "429s", "gave up",
              "last finish", "p95");
  for (const int clients : {4, 10, 100, 1000}) {
    Scenario s = sim::scenarios::explorer();
    s.clients = clients;
    s.policy = policy;
    // The provider's capacity: one start every 0.25 s, so client k (from 0) is served at k x 0.25 s at best.
    const double limit_finish = (clients - 1) * 0.25;
    const double limit_p95 = (static_cast<double>((clients * 95 + 99) / 100) - 1) * 0.25;
    std::printf("%7d  %-12s  %10d  %10d  %8d  %11.2fs  %9.2fs\n", clients, "(limit)", clients, 0, 0, limit_finish,
                limit_p95);
    for (const Jitter jitter : jitters) {
      s.policy.jitter = jitter;
      const Mean m = run(s, jitter == Jitter::none ? 1 : seeds);
      std::printf("%7s  %-12s  %10.1f  %10.1f  %8.1f  %11.2fs  %9.2fs\n", "", llmretry::to_string(jitter), m.calls,
                  m.refused, m.gave_up, m.makespan_s, m.p95_s);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int seeds = 20;
  const std::string_view arg = argc > 1 ? argv[1] : "20";
  const auto [end, error] = std::from_chars(arg.data(), arg.data() + arg.size(), seeds);
  if (argc > 2 || error != std::errc{} || end != arg.data() + arg.size() || seeds < 1) {
    std::fprintf(stderr, "llmretry-bench-herd: SEEDS must be a whole number of at least 1\n");
    return 2;
  }
  std::printf(
      "Herd: N clients start together; the provider starts at most one request every 0.25 s and\n"
      "answers the others 429 without Retry-After. Jittered rows: mean over %d seeds. (limit): the\n"
      "provider's capacity, N calls and client k served at k x 0.25 s; gave up: clients never served;\n"
      "last finish: served or not; p95: completion time of the served.\n",
      seeds);
  herd_table("Default policy: 4 attempts, base 0.5 s, cap 8 s, at most 20 s of waiting", llmretry::RetryPolicy{},
             seeds);
  llmretry::RetryPolicy patient;
  patient.max_attempts = std::numeric_limits<int>::max();
  patient.max_total_wait = 24h;
  herd_table("Patient policy: unlimited attempts and 24 h of waiting, base 0.5 s, cap 8 s (everyone is served)",
             patient, seeds);

  const int blog_runs = 5 * seeds;
  std::printf(
      "\n\"Exponential Backoff And Jitter\" (AWS Architecture Blog, 2015): 100 writers on one row under\n"
      "optimistic concurrency, base 5 ms, cap 2 s, retrying until they succeed; mean over %d runs.\n"
      "Network delay: a constant 10 ms each way (the blog: mean 10 ms, sd 2 ms), so a write wins iff no\n"
      "other won in the 20 ms since its read: a provider admitting one request every 20 ms, 40 ms per\n"
      "round trip, losers answered 409 with x-should-retry: true. The blog's calls count writes, as here.\n",
      blog_runs);
  std::printf("%-12s  %10s  %10s  %12s  %10s\n", "jitter", "calls", "conflicts", "last finish", "vs none");
  std::printf("%-12s  %10d  %10d  %11.3fs  %10s\n", "(limit)", 100, 0, (99 * 20 + 40) / 1000.0, "");
  double none_calls = 0;
  for (const Jitter jitter : jitters) {
    const Mean m = run(sim::scenarios::brooker_occ(100, jitter), jitter == Jitter::none ? 1 : blog_runs);
    if (jitter == Jitter::none) none_calls = m.calls;
    std::printf("%-12s  %10.1f  %10.1f  %11.3fs  %9.0f%%\n", llmretry::to_string(jitter), m.calls, m.refused,
                m.makespan_s, 100.0 * m.calls / none_calls);
  }

  const double wall_s = std::chrono::duration<double>(simulated_wall).count();
  std::printf("\nSimulator speed: %lld simulated requests in %.3f s of wall time: %.2f million requests/s\n",
              static_cast<long long>(simulated_requests), wall_s,
              static_cast<double>(simulated_requests) / wall_s / 1e6);
  return 0;
}
