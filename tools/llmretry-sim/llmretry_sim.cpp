// llmretry-sim: many clients, driven by llmretry's own retry decisions, against a rate-limited provider,
// in virtual time. Without flags it runs the explorer: 4 clients, a provider that starts one request
// every 0.25 s, without jitter and then with it.

#include <llmretry/detail/number.hpp>
#include <llmretry/sim.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "common/command_line.hpp"
#include "common/duration.hpp"
#include "common/program.hpp"

namespace {

using namespace std::chrono_literals;
using llmretry::Jitter;
using llmretry::sim::Scenario;
using llmretry_tools::UsageError;
using std::chrono::milliseconds;
namespace sim = llmretry::sim;
namespace scenarios = llmretry::sim::scenarios;

constexpr const char* usage = R"(usage: llmretry-sim [options]

Simulates N clients, each making one call with llmretry's retry decisions, against a rate-limited
provider, in virtual time (instant and repeatable). Without options: the explorer, without and with jitter.

Scenario
  --scenario NAME        explorer (default): 4 clients, one request started every 0.25 s, no Retry-After
                         thirty: 10 clients, one request a second, every 429 says retry-after: 30, clients
                           obey without jitter (10 attempts, max-provider-wait 30 s, max-total-wait 300 s);
                           compared with retry-after-ms and full jitter
                         rpm: 1,000 calls of 200 tokens in a minute (600 RPM and 300,000 TPM, per second)
                         tpm: 100 calls of 5,000 tokens in a minute (same limits)
                         brooker: 100 writers on one optimistic-concurrency row, base 5 ms, cap 2 s,
                           no jitter, compared with full jitter
                         pacing: four workloads (1,000 small calls, 100 large ones, a backlog of 38,000
                           tickets on 96 workers, a provider enforcing per second), each admitted by
                           none (retries only), spacing (one start every 60/RPM s), buckets (request and
                           token buckets, no refunds, 15 s pause after a 429), deployment (llmretry's
                           pacing) and learned (llmretry's pacing told no limits); other options are ignored
                         fleet: 3,000 calls in a minute against a primary that is down, browned out (half
                           its requests 503) or rate-limited, with a fallback beside it, under retries
                           only, a retry budget, a circuit breaker and a fallback chain; other options
                           are ignored
                         hosts: --hosts hosts of --workers workers share out the per-second backlog
                           (38,000 tickets), each with its own Deployment, pacing through one modelled
                           store --store-rtt away (two exchanges per attempt), compared with each host
                           pacing alone told the whole limits, or 1 / hosts of them; prints makespan
                           against the bound, 429s, store exchanges per second and the spread between
                           hosts; options other than these three are ignored
                         hedging: 10,000 calls, one every 10 ms, against a provider whose requests take
                           0.8-1.2 s, 3 % of them 8-8.4 s, without and with hedging (the delay learned,
                           the 95th percentile; at most 5 % more requests); prints the requests sent and
                           the calls' P50 to P99.9; options other than --seed are ignored
                         explorer and brooker compare jitter, thirty compares Retry-After: the comparison
                         is skipped when --jitter or --retry-after is given
  --hosts N              hosts (default 20), for --scenario hosts
  --workers N            workers per host (default 50), for --scenario hosts
  --store-rtt D          round trip between a host and the store (default 1ms), for --scenario hosts
  --clients N            number of clients
  --spacing D            client i starts at i x D (default 0: all at once)
  --seed N               seed of the jitter draws and random failures (default 1)
  --seeds N              runs with jitter or random failures are repeated over N seeds, and the mean
                         last finish and the runs with a give-up are printed (default 50)
Retry policy (llmretry::RetryPolicy)
  --base D  --cap D  --attempts N  --max-total-wait D  --max-provider-wait D
  --provider-wait-jitter D   come back up to D after the provider's wait, never before it
  --jitter MODE          none, full, equal or decorrelated
Provider model (limits combine: a request is admitted only when all have room)
  --interval D           starts at most one request every D
  --rpm N                N requests per minute (token bucket, starts full)
  --tpm N                N tokens per minute; each request costs --tokens
  --tokens N             tokens per request (default 1,000 with --tpm)
  --concurrency N        at most N requests in flight
  --latency D            time an admitted request takes
  --refusal-latency D    time a 429 takes to come back
  --error-rate P         share of admitted requests failing with 503, in [0, 1]
  --timeout-rate P       share of admitted requests never answered, in [0, 1]
  --timeout D            how long a client waits for an answer that never comes (default 10 s)
  --retry-after WHAT     none, precise (retry-after-ms: the time until capacity returns) or a duration
                         sent with every 429 (fixed, as 30s: like retry-after: 30)
Output
  --table                print the per-client table even above 20 clients
  --svg FILE             draw the timeline as SVG; --csv FILE writes one row per attempt
                         (with a comparison, its files get "-2" before the extension, and both
                         SVGs share one time scale); both are checked writable before simulating
  --help                 this text

Options take their value as --option VALUE or --option=VALUE.
Durations: numbers each with its unit h, m, s, ms, us or ns, one after another (0.5s, 500ms,
1m30s), from 0 to 24h; 0 alone may go without a unit. Exit status: 0, or 2 for a bad option.
)";

/// Returns a duration option's value, from 0 to a day, as llmretry_tools::parse_duration reads it. Throws
/// UsageError naming the option otherwise.
milliseconds parse_duration(std::string_view flag, std::string_view text) {
  return llmretry_tools::parse_duration(flag, text, milliseconds::zero(), std::chrono::hours{24});
}

/// Returns an integer option's value in [min, max]. Throws UsageError naming the option otherwise.
std::int64_t parse_integer(std::string_view flag, std::string_view text, std::int64_t min, std::int64_t max) {
  const auto value = llmretry::detail::parse_integer(text);
  if (!value || *value < min || *value > max)
    throw UsageError(std::string(flag) + ": '" + std::string(text) + "' is not a whole number in [" +
                     std::to_string(min) + ", " + std::to_string(max) + "]");
  return *value;
}

double parse_rate(std::string_view flag, std::string_view text) {
  const std::string copy{text};
  char* end = nullptr;
  const double value = std::strtod(copy.c_str(), &end);
  if (copy.empty() || end != copy.c_str() + copy.size() || !(value >= 0.0 && value <= 1.0))
    throw UsageError(std::string(flag) + ": '" + copy + "' is not a share in [0, 1]");
  return value;
}

Jitter parse_jitter(std::string_view text) {
  for (const Jitter jitter : {Jitter::none, Jitter::full, Jitter::equal, Jitter::decorrelated})
    if (text == llmretry::to_string(jitter)) return jitter;
  throw UsageError("--jitter: '" + std::string(text) + "' is not none, full, equal or decorrelated");
}

/// One simulation to show: the scenario's name, the run's title, and what to simulate.
struct Run {
  std::string name;
  std::string title;
  Scenario scenario;
};

/// The runs of a named scenario: the scenario, then its comparison.
std::vector<Run> scenario_runs(std::string_view name) {
  const std::string n{name};
  if (name == "explorer")
    return {{n, "explorer, no jitter", scenarios::explorer(Jitter::none)},
            {n, "explorer, full jitter", scenarios::explorer(Jitter::full)}};
  if (name == "thirty")
    return {
        {n, "retry-after: 30, obeyed without jitter", scenarios::everyone_waits_30s()},
        {n, "retry-after-ms (precise) and full jitter", scenarios::precise_retry_after()},
        {n, "retry-after-ms, full jitter, returns spread up to 1 s above it", scenarios::precise_retry_after_spread()}};
  if (name == "rpm") return {{n, "1,000 small calls a minute: the request limit", scenarios::many_small_calls()}};
  if (name == "tpm") return {{n, "100 large calls a minute: the token limit", scenarios::few_large_calls()}};
  if (name == "brooker")
    return {{n, "one optimistic-concurrency row, no jitter", scenarios::brooker_occ(100, Jitter::none)},
            {n, "one optimistic-concurrency row, full jitter", scenarios::brooker_occ(100, Jitter::full)}};
  throw UsageError("--scenario: '" + n +
                   "' is not explorer, thirty, rpm, tpm, brooker, pacing, fleet, hosts or hedging");
}

/// What the command line asked for.
struct Options {
  std::vector<Run> runs = scenario_runs("explorer");
  bool pacing = false;                      ///< --scenario pacing: the admission comparison instead of runs
  bool fleet = false;                       ///< --scenario fleet: the many-calls comparison instead of runs
  bool hedging = false;                     ///< --scenario hedging: the hedging comparison instead of runs
  bool priorities = false;                  ///< --scenario priorities: interactive calls and a batch on one quota
  std::optional<sim::HostsScenario> hosts;  ///< --scenario hosts: the fleet of hosts instead of runs
  std::int64_t seeds = 50;
  bool table = false;
  std::string svg, csv;
};

/// A change to the scenarios that an option asks for.
using Edit = std::function<void(Scenario&)>;
/// Reads an option's value (throwing UsageError naming the option) and returns its Edit.
using Setter = std::function<Edit(std::string_view flag, std::string_view value)>;

/// Returns a Setter that reads the value with `read(flag, value)` and applies it with `apply(scenario, value)`.
template <class Read, class Apply>
Setter setter(Read read, Apply apply) {
  return [read, apply](std::string_view flag, std::string_view value) -> Edit {
    auto parsed = read(flag, value);
    return [apply, parsed](Scenario& s) { apply(s, parsed); };
  };
}

/// Returns the options that set one field of the scenarios, by name.
std::map<std::string_view, Setter> setters() {
  const auto duration = [](std::string_view flag, std::string_view value) { return parse_duration(flag, value); };
  const auto count = [](std::int64_t max) {
    return [max](std::string_view flag, std::string_view value) { return parse_integer(flag, value, 1, max); };
  };
  const auto seed = [](std::string_view flag, std::string_view value) {
    return static_cast<std::uint64_t>(parse_integer(flag, value, 0, INT64_MAX));
  };
  const auto share = [](std::string_view flag, std::string_view value) { return parse_rate(flag, value); };
  constexpr std::int64_t many = 1'000'000'000'000;
  using D = milliseconds;
  using N = std::int64_t;
  return {
      {"--clients", setter(count(10'000'000), [](Scenario& s, N n) { s.clients = static_cast<int>(n); })},
      {"--spacing", setter(duration, [](Scenario& s, D d) { s.start_spacing = d; })},
      {"--seed", setter(seed, [](Scenario& s, std::uint64_t n) { s.seed = n; })},
      {"--base", setter(duration, [](Scenario& s, D d) { s.policy.base = d; })},
      {"--cap", setter(duration, [](Scenario& s, D d) { s.policy.cap = d; })},
      {"--attempts", setter(count(INT32_MAX), [](Scenario& s, N n) { s.policy.max_attempts = static_cast<int>(n); })},
      {"--max-total-wait", setter(duration, [](Scenario& s, D d) { s.policy.max_total_wait = d; })},
      {"--provider-wait-jitter", setter(duration, [](Scenario& s, D d) { s.policy.provider_wait_jitter = d; })},
      {"--max-provider-wait", setter(duration, [](Scenario& s, D d) { s.policy.max_provider_wait = d; })},
      {"--interval", setter(duration, [](Scenario& s, D d) { s.provider.start_interval = d; })},
      {"--rpm", setter(count(many),
                       [](Scenario& s, N n) {
                         s.provider.requests = sim::Bucket{n, 60s};
                       })},
      {"--tpm", setter(count(many),
                       [](Scenario& s, N n) {
                         s.provider.tokens = sim::Bucket{n, 60s};
                       })},
      {"--tokens", setter(count(many), [](Scenario& s, N n) { s.provider.tokens_per_request = n; })},
      {"--concurrency",
       setter(count(INT32_MAX), [](Scenario& s, N n) { s.provider.concurrency = static_cast<int>(n); })},
      {"--latency", setter(duration, [](Scenario& s, D d) { s.provider.latency = d; })},
      {"--refusal-latency", setter(duration, [](Scenario& s, D d) { s.provider.refusal_latency = d; })},
      {"--error-rate", setter(share, [](Scenario& s, double p) { s.provider.server_error_rate = p; })},
      {"--timeout-rate", setter(share, [](Scenario& s, double p) { s.provider.timeout_rate = p; })},
      {"--timeout", setter(duration, [](Scenario& s, D d) { s.provider.timeout = d; })},
  };
}

/// Returns the Edit of `--retry-after VALUE`: none, precise, or a duration sent with every refusal.
Edit retry_after_header(std::string_view value) {
  if (value == "none") return [](Scenario& s) { s.provider.retry_after_header = sim::RetryAfterMode::none; };
  if (value == "precise") return [](Scenario& s) { s.provider.retry_after_header = sim::RetryAfterMode::precise; };
  const milliseconds fixed = parse_duration("--retry-after", value);
  return [fixed](Scenario& s) {
    s.provider.retry_after_header = sim::RetryAfterMode::fixed;
    s.provider.fixed_retry_after = fixed;
  };
}

/// Returns the options of the command line; exits with status 0 after --help. Throws UsageError.
Options parse(int argc, char** argv) {
  Options options;
  std::vector<Edit> edits;
  bool compare = true;
  CLI::App app{"", "llmretry-sim"};
  app.allow_extras();  // named below, as an unknown option
  const auto value_option = [&app](const std::string& flag, std::function<void(const std::string&)> read) {
    app.add_option_function<std::string>(flag, std::move(read))->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  };
  for (const auto& setter : setters())
    value_option(std::string(setter.first), [&edits, name = setter.first, set = setter.second](
                                                const std::string& value) { edits.push_back(set(name, value)); });
  value_option("--scenario", [&options](const std::string& value) {
    options.pacing = value == "pacing";
    options.fleet = value == "fleet";
    options.hedging = value == "hedging";
    options.priorities = value == "priorities";
    if (value == "hosts") options.hosts = scenarios::hosts();
    else options.hosts.reset();
    if (!options.pacing && !options.fleet && !options.hedging && !options.priorities && !options.hosts)
      options.runs = scenario_runs(value);
  });
  std::vector<std::function<void(sim::HostsScenario&)>> host_edits;
  value_option("--hosts", [&](const std::string& value) {
    const auto n = static_cast<int>(parse_integer("--hosts", value, 1, 100'000));
    host_edits.emplace_back([n](sim::HostsScenario& s) { s.hosts = n; });
  });
  value_option("--workers", [&](const std::string& value) {
    const auto n = static_cast<int>(parse_integer("--workers", value, 1, 1'000'000));
    host_edits.emplace_back([n](sim::HostsScenario& s) { s.paced.workload.workers = n; });
  });
  value_option("--store-rtt", [&](const std::string& value) {
    const milliseconds rtt = parse_duration("--store-rtt", value);
    host_edits.emplace_back([rtt](sim::HostsScenario& s) { s.store_round_trip = rtt; });
  });
  value_option("--seeds",
               [&options](const std::string& value) { options.seeds = parse_integer("--seeds", value, 1, 1'000'000); });
  value_option("--jitter", [&](const std::string& value) {
    const Jitter jitter = parse_jitter(value);
    compare = false;
    edits.push_back([jitter](Scenario& s) { s.policy.jitter = jitter; });
  });
  value_option("--retry-after", [&](const std::string& value) {
    compare = false;
    edits.push_back(retry_after_header(value));
  });
  value_option("--svg", [&options](const std::string& value) { options.svg = value; });
  value_option("--csv", [&options](const std::string& value) { options.csv = value; });
  app.add_flag("--table", options.table);
  for (int i = 1; i < argc; ++i)  // CLI11 would read --table=yes as --table
    if (std::string_view(argv[i]).substr(0, 8) == "--table=") throw UsageError("--table takes no value (see --help)");
  llmretry_tools::parse_command_line(app, argc, argv, usage);
  if (const auto extras = app.remaining(); !extras.empty()) {
    std::string flag = extras.front();
    if (flag.substr(0, 2) == "--") flag = flag.substr(0, flag.find('='));
    throw UsageError("'" + flag + "' is not an option (see --help)");
  }
  if (options.hosts) {
    for (const auto& change : host_edits) change(*options.hosts);
    try {
      options.hosts->validate();
    } catch (const std::invalid_argument& error) {
      throw UsageError(error.what());
    }
  }
  if (!compare) {
    options.runs.resize(1);
    options.runs[0].title = options.runs[0].name;
  }
  for (Run& run : options.runs) {
    for (const auto& change : edits) change(run.scenario);
    if (run.scenario.provider.tokens && run.scenario.provider.tokens_per_request == 0)
      run.scenario.provider.tokens_per_request = 1000;
    try {
      run.scenario.validate();
    } catch (const std::invalid_argument& error) {
      throw UsageError(error.what());
    }
  }
  return options;
}

/// Returns `path` with `suffix` before its extension: "out.svg", "-2" gives "out-2.svg".
std::string with_suffix(const std::string& path, const std::string& suffix) {
  const auto dot = path.find_last_of('.');
  const auto slash = path.find_last_of('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return path + suffix;
  return path.substr(0, dot) + suffix + path.substr(dot);
}

/// Returns the file of run `index` for an output option: `path` itself for the first run, then "-2",
/// "-3"... before the extension; "" when the option was not given.
std::string output_path(const std::string& path, std::size_t index) {
  return path.empty() || index == 0 ? path : with_suffix(path, "-" + std::to_string(index + 1));
}

/// Throws UsageError naming `flag` unless `path` can be opened for writing (creating it when absent).
void check_writable(std::string_view flag, const std::string& path) {
  if (path.empty()) return;
  if (!std::ofstream(path, std::ios::app)) throw UsageError(std::string(flag) + ": cannot write '" + path + "'");
}

void write_file(const std::string& path, const std::function<void(std::ostream&)>& write) {
  std::ofstream file(path, std::ios::binary);
  write(file);
  file.close();
  if (!file) throw std::runtime_error("cannot write " + path);
  std::cout << "wrote " << path << '\n';
}

std::string describe(const Scenario& s) {
  const auto& p = s.provider;
  std::string text = std::to_string(s.clients) + " clients";
  if (s.start_spacing > 0ms) text += " starting " + sim::seconds(s.start_spacing) + " s apart";
  text += "; provider:";
  if (p.start_interval) text += " one request every " + sim::seconds(*p.start_interval) + " s,";
  if (p.requests)
    text += " " + std::to_string(p.requests->capacity) + " requests per " + sim::seconds(p.requests->period) + " s,";
  if (p.tokens)
    text += " " + std::to_string(p.tokens->capacity) + " tokens per " + sim::seconds(p.tokens->period) + " s (" +
            std::to_string(p.tokens_per_request) + " per request),";
  if (p.concurrency) text += " " + std::to_string(*p.concurrency) + " in flight,";
  if (p.latency > 0ms) text += " latency " + sim::seconds(p.latency) + " s,";
  const auto share = [](double rate) {
    std::ostringstream out;
    out << rate;
    return out.str();
  };
  if (p.server_error_rate > 0) text += " 503 for " + share(p.server_error_rate) + " of requests,";
  if (p.timeout_rate > 0) text += " no answer for " + share(p.timeout_rate) + ",";
  text += p.busy_answer == sim::BusyAnswer::conflict ? " conflicts answered 409" : " refusals answered 429";
  text += p.retry_after_header == sim::RetryAfterMode::none ? " without Retry-After"
          : p.retry_after_header == sim::RetryAfterMode::fixed
              ? " with retry-after: " + sim::seconds(p.fixed_retry_after)
              : " with the precise retry-after-ms";
  const auto& r = s.policy;
  text +=
      "\npolicy: base " + sim::seconds(r.base) + " s, cap " + sim::seconds(r.cap) + " s, jitter " +
      llmretry::to_string(r.jitter) + ", " +
      (r.max_attempts == INT32_MAX ? std::string{"unlimited"} : std::to_string(r.max_attempts)) +
      " attempts, at most " + sim::seconds(r.max_total_wait) + " s of waiting, Retry-After up to " +
      sim::seconds(r.provider_wait_limit()) + " s obeyed" +
      (r.provider_wait_jitter > 0ms ? ", spread up to " + sim::seconds(r.provider_wait_jitter) + " s above it" : "") +
      "; seed " + std::to_string(s.seed);
  return text;
}

/// Prints a run and writes its files; `axis_end` is the time axis of its SVG (shared by compared runs).
void show(const Run& run, const sim::RunResult& result, std::size_t index, const Options& options, sim::Time axis_end) {
  std::cout << "== " << run.title << " ==\n" << describe(run.scenario) << "\n\n";
  if (options.table || run.scenario.clients <= 20) {
    std::cout << "attempts: ✓ served, ✗ 429, ✗NNN another status, ⌛ timeout\n";
    sim::write_table(std::cout, result);
    std::cout << '\n';
  }
  sim::write_totals(std::cout, result.totals);
  const auto groups = sim::retry_groups(result);
  if (!groups.empty()) {
    std::cout << "retries arriving together (instant: requests/served):";
    for (std::size_t g = 0; g < groups.size() && g < 12; ++g)
      std::cout << ' ' << sim::seconds(groups[g].at) << " s: " << groups[g].requests << '/' << groups[g].served;
    if (groups.size() > 12) std::cout << " ... (" << groups.size() << " instants)";
    std::cout << '\n';
  }
  const auto& p = run.scenario.provider;
  if (options.seeds > 1 &&
      (run.scenario.policy.jitter != Jitter::none || p.server_error_rate > 0 || p.timeout_rate > 0)) {
    Scenario s = run.scenario;
    std::int64_t finish_sum = 0, runs_with_give_up = 0, requests = 0, refused = 0;
    for (std::int64_t k = 0; k < options.seeds; ++k) {
      s.seed = run.scenario.seed + static_cast<std::uint64_t>(k);
      const auto totals = sim::simulate(s).totals;
      finish_sum += totals.makespan.count();
      runs_with_give_up += totals.gave_up > 0 ? 1 : 0;
      requests += totals.requests;
      refused += totals.refused;
    }
    const auto mean = [&](std::int64_t sum) { return static_cast<double>(sum) / static_cast<double>(options.seeds); };
    std::cout.setf(std::ios::fixed);
    std::cout.precision(2);
    std::cout << "over " << options.seeds << " seeds (" << run.scenario.seed << ".." << s.seed << "): last finish "
              << mean(finish_sum) / 1000.0 << " s on average; " << runs_with_give_up
              << " runs with a client that gave up; " << mean(requests) << " requests and " << mean(refused)
              << " refused on average\n";
    std::cout.unsetf(std::ios::fixed);
  }
  if (!options.svg.empty())
    write_file(output_path(options.svg, index),
               [&](std::ostream& out) { sim::write_svg(out, result, run.title, axis_end); });
  if (!options.csv.empty())
    write_file(output_path(options.csv, index), [&](std::ostream& out) { sim::write_csv(out, result); });
  std::cout << '\n';
}

/// Prints the admission comparison: every paced workload under every admission mode.
void show_pacing() {
  for (const auto& workload : scenarios::paced_workloads()) {
    std::vector<std::pair<std::string, sim::PacedTotals>> rows;
    for (const auto mode : {sim::AdmissionMode::none, sim::AdmissionMode::spacing, sim::AdmissionMode::buckets,
                            sim::AdmissionMode::deployment, sim::AdmissionMode::learned}) {
      sim::PacedScenario scenario = workload.scenario;
      scenario.admission = mode;
      rows.emplace_back(sim::to_string(mode), sim::simulate_paced(scenario));
    }
    std::cout << "== " << workload.title << " ==\ncapacity bound " << sim::seconds(rows.front().second.bound)
              << " s; every call under RetryPolicy::batch()\n";
    sim::write_paced_table(std::cout, rows);
    std::cout << '\n';
  }
}

/// Prints the many-calls comparison: each fleet scenario under each set of mechanisms.
void show_fleet() {
  for (const auto& comparison : scenarios::fleet()) {
    std::cout << "== " << comparison.title << " ==\n";
    std::vector<std::pair<std::string, sim::FleetTotals>> rows;
    for (const auto& use : comparison.rows) {
      sim::FleetScenario scenario = comparison.scenario;
      scenario.use = use;
      rows.emplace_back(sim::to_string(use), sim::simulate_fleet(scenario));
    }
    sim::write_fleet_table(std::cout, rows);
    std::cout << '\n';
  }
}

/// Prints the calls of `scenario` without and with hedging.
void show_hedging(const sim::HedgingScenario& scenario) {
  std::cout << "== " << scenario.calls << " calls, one every " << sim::seconds(scenario.spacing)
            << " s; a request takes " << sim::seconds(scenario.latency) << "-"
            << sim::seconds(scenario.latency + scenario.spread) << " s, " << scenario.slow_share * 100 << " % of them "
            << sim::seconds(scenario.slow_latency) << "-" << sim::seconds(scenario.slow_latency + scenario.spread)
            << " s; seed " << scenario.seed << " ==\nhedging: the delay learned (P" << scenario.hedging.percentile * 100
            << " of the latencies), at most " << scenario.hedging.ratio * 100 << " % more requests; virtual time\n";
  sim::write_hedging_table(std::cout, sim::simulate_hedging(scenario, false), sim::simulate_hedging(scenario, true));
}

/// Prints interactive calls and a batch on one quota, first come first served and under priorities.
void show_priorities(std::uint64_t seed) {
  std::vector<std::pair<std::string, sim::PriorityTotals>> rows;
  for (const bool priorities : {false, true}) {
    sim::PriorityScenario s = sim::interactive_and_batch(priorities);
    s.seed = seed;
    rows.emplace_back(priorities ? "priorities" : "first come", sim::simulate_priorities(s));
  }
  const sim::PriorityScenario s = sim::interactive_and_batch(true);
  std::cout << "== one deployment: " << s.provider.requests->capacity << " requests and " << s.provider.tokens->capacity
            << " tokens a second, " << sim::seconds(s.provider.latency) << " s per answer; calls of "
            << s.prompt_tokens + s.max_tokens << " tokens (" << rows.front().second.capacity_rate
            << " a second at most); interactive calls every " << sim::seconds(s.interactive_mean_gap)
            << " s on average; " << s.batch_calls << " batch calls, " << s.batch_workers << " workers, from "
            << sim::seconds(s.batch_start) << " s; seed " << seed
            << " ==\nbatch calls Priority::batch (half of each burst kept for interactive calls) or all interactive; "
               "virtual time\n";
  sim::write_priority_table(std::cout, rows);
  std::vector<std::pair<std::string, sim::TenantTotals>> tenants;
  for (const auto& [title, heavy, shared] :
       {std::tuple{"b alone", false, true}, std::tuple{"first come", true, false}, std::tuple{"tenants", true, true}}) {
    sim::TenantScenario t = sim::two_tenants(heavy, shared);
    t.seed = seed;
    tenants.emplace_back(title, sim::simulate_tenants(t));
  }
  const sim::TenantScenario t = sim::two_tenants(true, true);
  std::cout << "\n== the same deployment, two tenants' interactive calls for " << sim::seconds(t.duration)
            << " s: a every " << sim::seconds(t.heavy_mean_gap) << " s on average, b every "
            << sim::seconds(t.light_mean_gap) << " s, at most " << t.in_progress
            << " under way each; b alone, both first come first served, both as tenants of weight 1 ==\n";
  sim::write_tenant_table(std::cout, tenants);
}

/// Prints the fleet of hosts under each way of pacing.
void show_hosts(const sim::HostsScenario& scenario) {
  std::vector<std::pair<std::string, sim::HostsTotals>> rows;
  for (const auto pacing : {sim::HostPacing::shared, sim::HostPacing::alone, sim::HostPacing::alone_split}) {
    sim::HostsScenario s = scenario;
    s.pacing = pacing;
    rows.emplace_back(sim::to_string(pacing), sim::simulate_hosts(s));
  }
  const sim::Workload& w = scenario.paced.workload;
  const sim::ProviderSpec& p = scenario.paced.provider;
  std::cout << "== " << scenario.hosts << " hosts x " << w.workers << " workers, " << w.calls
            << " tickets shared out; one quota for all:";
  if (p.requests)
    std::cout << ' ' << p.requests->capacity << " requests per " << sim::seconds(p.requests->period) << " s";
  if (p.tokens)
    std::cout << (p.requests ? ", " : " ") << p.tokens->capacity << " tokens per " << sim::seconds(p.tokens->period)
              << " s";
  std::cout << "; store round trip " << sim::seconds(scenario.store_round_trip) << " s ==\ncapacity bound "
            << sim::seconds(rows.front().second.all.bound)
            << " s; every call under RetryPolicy::batch(); virtual time\n";
  sim::write_hosts_table(std::cout, rows);
}

}  // namespace

int main(int argc, char** argv) {
  return llmretry_tools::run_main("llmretry-sim", [&] {
    const Options options = parse(argc, argv);
    for (std::size_t i = 0; i < options.runs.size(); ++i) {  // before a run that may take long
      check_writable("--svg", output_path(options.svg, i));
      check_writable("--csv", output_path(options.csv, i));
    }
    if (options.pacing) {
      show_pacing();
      return 0;
    }
    if (options.fleet) {
      show_fleet();
      return 0;
    }
    if (options.hedging) {
      sim::HedgingScenario scenario;
      scenario.seed = options.runs.front().scenario.seed;
      show_hedging(scenario);
      return 0;
    }
    if (options.hosts) {
      show_hosts(*options.hosts);
      return 0;
    }
    if (options.priorities) {
      show_priorities(options.runs.front().scenario.seed);
      return 0;
    }
    std::vector<sim::RunResult> results;
    sim::Time axis_end{0};  // compared runs are drawn on one time scale
    for (const Run& run : options.runs) {
      results.push_back(sim::simulate(run.scenario));
      axis_end = std::max(axis_end, results.back().totals.makespan);
    }
    for (std::size_t i = 0; i < options.runs.size(); ++i) show(options.runs[i], results[i], i, options, axis_end);
    return 0;
  });
}
