// llmretry-batch: sends the requests of an OpenAI Batch API input file to an OpenAI-compatible endpoint,
// paced by one Deployment, and writes the Batch output format; a rerun resumes where a run stopped.

#include <llmretry/admission/deployment.hpp>
#include <llmretry/metrics/registry.hpp>
#include <llmretry/store/fingerprint.hpp>
#include <llmretry/store/job_queue.hpp>
#include <llmretry/store/operations.hpp>
#if LLMRETRY_BATCH_REDIS
#include <llmretry/redis/connection.hpp>
#include <llmretry/redis/idempotency_store.hpp>
#include <llmretry/redis/job_queue.hpp>
#include <llmretry/redis/operations.hpp>

#include "common/lease_renewer.hpp"
#include "common/redis_pool.hpp"
#endif

#include <sys/stat.h>
#include <unistd.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif
#include <CLI/CLI.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "answers.hpp"
#include "common/command_line.hpp"
#include "common/periodic_thread.hpp"
#include "common/program.hpp"
#include "files.hpp"
#include "input.hpp"
#include "metrics_file.hpp"
#include "replacement.hpp"
#include "report.hpp"
#include "runner.hpp"
#include "send_again.hpp"
#include "stop_signals.hpp"

namespace {

using llmretry_tools::environment;
using llmretry_tools::UsageError;

constexpr const char* description =
    R"(Sends every request of INPUT.jsonl (the OpenAI Batch API input format: custom_id, method, url,
body) to OPENAI_BASE_URL (default https://api.openai.com/v1) with OPENAI_API_KEY, and writes each answer
to OUTPUT.jsonl in the Batch output format; a request that fails for good goes to the errors file with
the reason. Requests are paced under the limits given, or learned from the provider's x-ratelimit-*
headers; failed attempts are retried later (RetryPolicy::batch()), each request under one Idempotency-Key.
Run it again after a crash: lines already answered are not sent again.)";

constexpr const char* footer = R"(
Environment: OPENAI_BASE_URL, OPENAI_API_KEY (required with the default base URL; never printed).
Progress and summary go to stderr.
Exit status: 0 every line answered, 1 some lines in the errors file, 2 bad usage, input or files,
3 stopped by a file or Redis failure (rerun to resume), 130 / 143 stopped by SIGINT / SIGTERM with lines
left (the requests in flight were written; a second signal quits at once; rerun to resume).
Durations carry their unit (h, m, s, ms, us, ns): 500ms, 2s, 1m30s; 0 alone may go without.
One batch, many workers on any hosts: llmretry-batch submit | work | collect | status (see
llmretry-batch work --help).)";

/// The longest wait for Redis to connect or to answer one command, unless --redis-timeout says otherwise.
constexpr std::chrono::milliseconds default_redis_timeout{1000};

struct Options {
  std::string input;
  std::string output;
  std::string errors;
  std::optional<std::int64_t> rpm;
  std::optional<std::int64_t> tpm;
  int concurrency = 8;
  int max_attempts = llmretry::RetryPolicy::batch().max_attempts;
  llmretry::Priority priority = llmretry::Priority::interactive;
  std::string tenant;
  std::string redis;
  std::chrono::milliseconds redis_timeout = default_redis_timeout;
  bool retry_errors = false;
  bool fresh = false;
  std::string metrics_file;
};

/// Returns this host's name ("unknown" when it cannot be found out).
std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

/// Adds --max-attempts to `app`, read into `max_attempts`, described as `what` bounds.
void add_max_attempts_option(CLI::App& app, int& max_attempts, const std::string& what) {
  app.add_option("--max-attempts", max_attempts, what + ", the first included (default 8, 1 to 100)")
      ->check(CLI::Range(1, 100));
}

/// Adds --priority to `app`, read into `priority`.
void add_priority_option(CLI::App& app, llmretry::Priority& priority) {
  app.add_option_function<std::string>(
         "--priority",
         [&priority](const std::string& name) {
           if (const auto known = llmretry::priority_from_string(name)) priority = *known;
         },
         "interactive (default: in line with every call), standard or batch (only what calls of the classes "
         "above leave, through the same limiter or Redis)")
      ->check(CLI::IsMember({"interactive", "standard", "batch"}));
}

/// Adds --tenant to `app`, read into `tenant`.
void add_tenant_option(CLI::App& app, std::string& tenant) {
  app.add_option("--tenant", tenant,
                 "whom the requests are for: tenants share the capacity in equal parts while each wants more than "
                 "its share (1 to 64 visible ASCII characters)")
      ->check([](const std::string& name) -> std::string {
        const bool visible = std::all_of(name.begin(), name.end(), [](char c) { return c > ' ' && c < 127; });
        return !name.empty() && name.size() <= 64 && visible ? "" : "1 to 64 visible ASCII characters";
      });
}

/// Adds --metrics-file to `app`, read into `path`.
void add_metrics_file_option(CLI::App& app, std::string& path) {
  app.add_option("--metrics-file", path,
                 "write the Prometheus text of this process's metrics to PATH every 5 s and at exit (written "
                 "beside it, then renamed over it: node_exporter's textfile collector); PATH must be a regular "
                 "file or a new path");
}

/// Adds --redis-timeout to `app`, read into `timeout`. Returns the option.
CLI::Option* add_redis_timeout_option(CLI::App& app, std::chrono::milliseconds& timeout) {
  return llmretry_tools::add_duration_option(
      app, "--redis-timeout", timeout, std::chrono::milliseconds{10}, std::chrono::minutes{10},
      "the longest wait for Redis to connect or to answer one command (default 1s, 10ms to 10m); past it Redis "
      "counts as out of reach for that operation");
}

/// Returns true when `word` names a command of the fleet form.
bool is_fleet_command(const std::string& word) {
  return word == "submit" || word == "work" || word == "collect" || word == "status";
}

/// Returns the options of the command line; exits with status 0 after --help. Throws UsageError.
Options parse(int argc, char** argv) {
  Options options;
  CLI::App app{description, "llmretry-batch"};
  app.footer(footer);
  // INPUT and OUTPUT are checked after parsing, so that an unknown option is named before a missing file.
  app.add_option("INPUT", options.input, "requests, one JSON object a line (required)");
  app.add_option("OUTPUT", options.output, "answers, appended one JSON object a line (required)");
  app.add_option("--errors", options.errors, "requests that failed for good (default: OUTPUT with .errors.jsonl)");
  app.add_option("--rpm", options.rpm, "requests per minute, enforced per second (default: learned)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1'000'000'000}));
  app.add_option("--tpm", options.tpm, "tokens per minute, enforced per second (default: learned)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1'000'000'000'000}));
  app.add_option("--concurrency", options.concurrency, "requests in flight at most (default 8)")
      ->check(CLI::Range(1, 256));
  add_max_attempts_option(app, options.max_attempts,
                          "the attempts of each request at most (1: each request sent once, a failure written to "
                          "the errors file at once)");
  add_priority_option(app, options.priority);
  add_tenant_option(app, options.tenant);
  app.add_option("--redis", options.redis,
                 "redis://HOST[:PORT]: keep the job queue and operations table in Redis, and pace with every "
                 "process that uses the same provider and key on it (default: in memory, paced alone)");
  const CLI::Option* redis_timeout = add_redis_timeout_option(app, options.redis_timeout);
  app.add_flag("--retry-errors", options.retry_errors,
               "send again the requests of the errors file given up for a temporary cause (attempts_exhausted, "
               "wait_budget, provider_wait_too_long, ...): their lines leave the errors file");
  app.add_flag("--fresh", options.fresh,
               "with --redis: forget what Redis holds of this batch (its queue, which requests completed) and "
               "send again the requests the errors file says completed in an earlier run (already_completed)");
  add_metrics_file_option(app, options.metrics_file);
  llmretry_tools::parse_command_line(app, argc, argv);
  if (options.input.empty()) throw UsageError("INPUT is required");
  if (options.output.empty()) throw UsageError("OUTPUT is required");
  if (options.errors.empty()) {
    const std::string& out = options.output;
    const bool jsonl = out.size() > 6 && out.compare(out.size() - 6, 6, ".jsonl") == 0;
    options.errors = (jsonl ? out.substr(0, out.size() - 6) : out) + ".errors.jsonl";
  }
  if (options.errors == options.output) throw UsageError("--errors: must not be OUTPUT");
  if (options.fresh && options.redis.empty())
    throw UsageError("--fresh: only with --redis (without it, the output and errors files alone say what is done)");
  if (redis_timeout->count() > 0 && options.redis.empty()) throw UsageError("--redis-timeout: only with --redis");
  return options;
}

/// Returns the deployment's options: the limits given, each enforced per second (a burst of a minute's
/// limit / 60, as OpenAI enforces them); the others are learned from the answers' headers.
llmretry::DeploymentOptions deployment_options(const Options& options) {
  llmretry::DeploymentOptions deployment;
  deployment.name = "llmretry-batch";
  if (options.rpm)
    deployment.limits[llmretry::Dimension::requests_per_minute] = llmretry::Limit::per_minute_paced(*options.rpm);
  if (options.tpm)
    deployment.limits[llmretry::Dimension::tokens_per_minute] = llmretry::Limit::per_minute_paced(*options.tpm);
  return deployment;
}

/// The in-memory stores, shared by every worker of the process.
class MemoryStores final : public batch::Stores {
 public:
  MemoryStores(llmretry::store::JobQueue& queue, llmretry::store::OperationsTable& operations)
      : queue_(queue), operations_(operations) {}
  llmretry::store::JobQueue& queue() override { return queue_; }
  llmretry::store::OperationsTable& operations() override { return operations_; }

 private:
  llmretry::store::JobQueue& queue_;
  llmretry::store::OperationsTable& operations_;
};

/// A job a worker holds comes back to the queue after this long without being renewed (the worker renews
/// it every third of it while it holds it).
constexpr std::chrono::milliseconds visibility_timeout{30'000};

/// Jobs are retried by the RetryPolicy; the queue's own limit only guards against a job taken forever.
llmretry::store::JobQueueOptions queue_options(std::chrono::milliseconds lease = visibility_timeout) {
  llmretry::store::JobQueueOptions options;
  options.visibility_timeout = lease;
  options.max_attempts = 1000;
  return options;
}

#if LLMRETRY_BATCH_REDIS
/// Returns the options of "redis://HOST[:PORT]", waiting at most `timeout` to connect and for each reply.
/// Throws UsageError.
llmretry::redis::Options redis_options(const std::string& url, std::chrono::milliseconds timeout) {
  try {
    llmretry::redis::Options options = llmretry::redis::options_from_url(url);
    options.connect_timeout = options.command_timeout = timeout;
    return options;
  } catch (const std::invalid_argument& error) {
    throw UsageError(std::string("--redis: ") + error.what());
  }
}

/// Returns true when `error` says Redis could not be reached, did not answer in time, or answered that it
/// cannot serve yet (LOADING its data after a restart, BUSY with a script, MASTERDOWN, TRYAGAIN): an outage a
/// worker rides out (batch::Settings::outage_limit) rather than stops at.
bool is_redis_outage(const std::exception& error) {
  const auto* failure = dynamic_cast<const llmretry::redis::RedisError*>(&error);
  if (failure == nullptr) return false;
  if (failure->kind() != llmretry::redis::ErrorKind::reply) return true;
  const std::string_view text = failure->what();  // "redis OPERATION on SERVER: reply: DETAIL"
  for (const char* not_yet : {": reply: LOADING ", ": reply: BUSY ", ": reply: MASTERDOWN ", ": reply: TRYAGAIN "})
    if (text.find(not_yet) != std::string_view::npos) return true;
  return false;
}

/// Returns how many connections a process of `concurrency` workers paces through: one each, 8 at most.
std::size_t pacing_connection_count(int concurrency) { return static_cast<std::size_t>(std::clamp(concurrency, 1, 8)); }

/// Makes `deployment` pace with every process that sends to `base_url` with `api_key` through `pool`'s
/// server (which must outlive it): the limits, those learned and a 429's pause hold for all of them together.
void share_pacing(llmretry::DeploymentOptions& deployment, llmretry_tools::RedisPool& pool, const std::string& base_url,
                  const std::string& api_key) {
  deployment.shared = std::make_shared<llmretry_tools::PooledRateLimiter>(
      pool, llmretry_tools::shared_pacing_name("", base_url, api_key), deployment.limits);
}

/// One worker's stores in Redis, over a connection of its own.
class RedisStores final : public batch::Stores {
 public:
  RedisStores(const llmretry::redis::Options& options, const std::string& queue_name,
              std::chrono::milliseconds lease = visibility_timeout)
      : connection_(options), queue_(connection_, queue_name, queue_options(lease)), operations_(connection_) {}
  llmretry::store::JobQueue& queue() override { return queue_; }
  llmretry::store::OperationsTable& operations() override { return operations_; }

 private:
  llmretry::redis::Connection connection_;
  llmretry::redis::JobQueue queue_;
  llmretry::redis::OperationsTable operations_;
};

/// Holds the run lease of the batch `name` in Redis from construction to destruction: one run of a batch at
/// a time, whatever the host. The holder is named after this host, so that a rerun on the host of a run
/// that died (it holds the output file's lock, so that run is gone) takes the lease at once, and a run on
/// another host is refused until the lease lapses (30 s after its holder stopped renewing it).
class RunLease {
 public:
  /// Takes the lease. Throws batch::FileProblem naming `output` when another host holds it, and
  /// redis::RedisError.
  RunLease(const llmretry::redis::Options& redis, const std::string& name, const std::string& output)
      : connection_(redis), store_(connection_, lease_options()), key_("run:" + name), token_("host:" + host_name()) {
    const auto claim = store_.claim(key_, "llmretry-batch run", token_);
    if (claim.status != llmretry::store::ClaimStatus::claimed)
      throw batch::FileProblem(output + ": in use by another llmretry-batch on another host (its run lease ends " +
                               std::to_string(claim.lease_left.count() / 1000) + " s after it last renewed it)");
    renewer_.emplace(store_, key_, token_, lease_options().lease / 3);
  }
  RunLease(const RunLease&) = delete;
  RunLease& operator=(const RunLease&) = delete;
  RunLease(RunLease&&) = delete;
  RunLease& operator=(RunLease&&) = delete;
  ~RunLease() {
    renewer_.reset();
    try {
      (void)store_.release(key_, token_);
    } catch (const std::exception&) {  // the lease lapses by itself
    }
  }

 private:
  static llmretry::store::IdempotencyOptions lease_options() {
    llmretry::store::IdempotencyOptions options;
    options.lease = std::chrono::seconds{30};
    return options;
  }

  llmretry::redis::Connection connection_;
  llmretry::redis::IdempotencyStore store_;
  const std::string key_;
  const std::string token_;
  std::optional<llmretry_tools::LeaseRenewer> renewer_;  ///< last: it renews once the rest is ready
};

/// Deletes what Redis holds of the batch `name`: its job queue (`<prefix>queue:{<name>}:...`, as
/// redis::JobQueue names it) and its operation records (`<prefix>op:<name>:...`, redis::OperationsTable).
/// The caller holds the output file's lock. Throws redis::RedisError.
void forget_batch(const llmretry::redis::Options& redis, const std::string& name) {
  llmretry::redis::Connection connection(redis);
  const std::string& prefix = redis.prefix;
  for (const std::string& pattern : {prefix + "queue:{" + name + "}:*", prefix + "op:" + name + ":*"}) {
    std::string cursor = "0";
    do {
      const auto found = connection.command("forget", {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
      cursor = found[0].text();
      std::vector<std::string> keys;
      for (std::size_t i = 0; i < found[1].size(); ++i) keys.push_back(found[1][i].text());
      std::vector<std::string_view> unlink{"UNLINK"};
      unlink.insert(unlink.end(), keys.begin(), keys.end());
      if (!keys.empty()) (void)connection.command("forget", unlink);
    } while (cursor != "0");
  }
}
#endif

/// Returns the name of the batch that writes `output`: "batch:" and the start of the SHA-256 of its
/// absolute path, so that a rerun finds its queue and records in Redis.
std::string batch_name(const std::string& output) {
  const std::string fingerprint = llmretry::store::fingerprint(std::filesystem::absolute(output).string());
  return "batch:" + fingerprint.substr(fingerprint.find(':') + 1, 16);
}

/// Prints the progress line on stderr every half second until destroyed, then once more and a newline.
class Progress {
 public:
  Progress(const batch::Stats& stats, std::int64_t total, std::int64_t done_before)
      : stats_(stats), total_(total), done_before_(done_before) {
    thread_.emplace(std::chrono::milliseconds{500}, [this] { return print(""); });
  }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  Progress(Progress&&) = delete;
  Progress& operator=(Progress&&) = delete;
  ~Progress() {
    thread_.reset();
    print("\n");
  }

 private:
  /// Prints the line over the last one, then `end`. Returns true.
  bool print(const char* end) const {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::fprintf(stderr, "\r%s\x1b[K%s", batch::progress_line(stats_, total_, done_before_, seconds).c_str(), end);
    return true;
  }

  const batch::Stats& stats_;
  const std::int64_t total_;
  const std::int64_t done_before_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::optional<llmretry_tools::PeriodicThread> thread_;  ///< last: it starts once the rest is ready
};

/// Returns the provider's base URL (OPENAI_BASE_URL, OpenAI's by default) and key (OPENAI_API_KEY). Throws
/// UsageError when OpenAI's own URL has no key.
std::pair<std::string, std::string> provider_from_environment() {
  std::string base_url = environment("OPENAI_BASE_URL");
  std::string api_key = environment("OPENAI_API_KEY");
  if (base_url.empty()) base_url = "https://api.openai.com/v1";
  if (api_key.empty() && base_url.find("api.openai.com") != std::string::npos)
    throw UsageError("OPENAI_API_KEY is not set");
  return {std::move(base_url), std::move(api_key)};
}

/// What the first SIGINT or SIGTERM writes.
constexpr const char* stopping_words =
    "llmretry-batch: stopping: nothing more is sent, the requests in flight finish and are written (a second "
    "signal quits at once)\n";

/// Returns the name of a stop signal.
const char* signal_name(int signal) { return signal == SIGINT ? "SIGINT" : "SIGTERM"; }

/// Runs the batch. Returns the exit status (128 + the signal when one stopped
/// it: main then ends the process by that signal).
int run(const Options& options) {
  const batch::StopSignals stop_signals(stopping_words);  // before any thread starts
  const std::pair<std::string, std::string> provider = provider_from_environment();
  const std::string& base_url = provider.first;
  const std::string& api_key = provider.second;
  if (!options.redis.empty() && !LLMRETRY_BATCH_REDIS) throw UsageError("--redis: this build has no Redis support");

  batch::check_files(options.input, options.output, options.errors);
  if (!options.metrics_file.empty())
    batch::check_metrics_file(options.metrics_file, {options.input, options.output, options.errors});
  const std::vector<batch::Request> requests = batch::read_input(options.input, base_url);
  if (const int signal = stop_signals.signal(); signal != 0) {
    std::fprintf(stderr, "llmretry-batch: stopped by %s before sending anything\n", signal_name(signal));
    return 128 + signal;
  }
  std::optional<batch::AnswerFile> output;
  std::optional<batch::AnswerFile> errors;
#if LLMRETRY_BATCH_REDIS
  std::optional<RunLease> run_lease;
#endif
  try {
    output.emplace(options.output);
#if LLMRETRY_BATCH_REDIS
    if (!options.redis.empty())
      run_lease.emplace(redis_options(options.redis, options.redis_timeout), batch_name(options.output),
                        options.output);
    if (options.fresh) forget_batch(redis_options(options.redis, options.redis_timeout), batch_name(options.output));
#endif
    const auto send_again = [&](std::string_view reason) {
      return (options.retry_errors && batch::is_temporary(reason)) ||
             (options.fresh && reason == batch::already_completed);
    };
    errors.emplace(options.errors);  // locked before its lines are dropped: no other run writes to it meanwhile
    if ((options.retry_errors || options.fresh) && batch::drop_lines(options.errors, send_again) > 0) {
      errors.reset();  // the lock of the version replaced: the new one is locked as it is opened again
      errors.emplace(options.errors);
    }
  } catch (const batch::FileError& error) {
    throw batch::FileProblem(error.what());
  }
  std::vector<batch::Request> pending;
  std::int64_t failed_before = 0;
  for (const auto& request : requests) {
    if (output->answered().count(request.custom_id) != 0) continue;
    if (errors->answered().count(request.custom_id) != 0) {
      ++failed_before;
      continue;
    }
    pending.push_back(request);
  }
  const auto total = static_cast<std::int64_t>(requests.size());
  const std::int64_t done_before = total - static_cast<std::int64_t>(pending.size());
  llmretry::metrics::Registry registry;
  batch::Stats stats;
  std::optional<batch::MetricsFile> metrics_file;
  if (!options.metrics_file.empty())
    metrics_file.emplace(options.metrics_file,
                         [&registry, &stats, labels = batch::RunLabels{options.priority, options.tenant},
                          remaining = total - done_before] {
                           return registry.prometheus_text() + batch::progress_metrics(stats, labels, remaining);
                         });

  batch::Settings settings;
  settings.workers = options.concurrency;
  settings.policy.max_attempts = options.max_attempts;
  settings.priority = options.priority;
  settings.tenant = options.tenant;
  settings.api_key = api_key;
  settings.provider = base_url;
  settings.batch_name = batch_name(options.output) + ":";
  settings.renew_every = visibility_timeout / 3;
  settings.observer = &registry;
  settings.stop_requested = &stop_signals.requested();
  llmretry::DeploymentOptions paced = deployment_options(options);
#if LLMRETRY_BATCH_REDIS
  std::unique_ptr<llmretry_tools::RedisPool> pacing_connections;
  if (!options.redis.empty()) {
    pacing_connections = std::make_unique<llmretry_tools::RedisPool>(
        redis_options(options.redis, options.redis_timeout), pacing_connection_count(options.concurrency));
    share_pacing(paced, *pacing_connections, base_url, api_key);
  }
#endif
  llmretry::Deployment deployment(std::move(paced));
  llmretry::store::MemoryJobQueue memory_queue(queue_options());
  llmretry::store::MemoryOperationsTable memory_operations;
  batch::OpenStores open_stores = [&] { return std::make_unique<MemoryStores>(memory_queue, memory_operations); };
#if LLMRETRY_BATCH_REDIS
  if (!options.redis.empty()) {
    open_stores = [redis = redis_options(options.redis, options.redis_timeout), name = batch_name(options.output)] {
      return std::make_unique<RedisStores>(redis, name);
    };
    settings.is_outage = is_redis_outage;
  }
#endif

  const auto start = std::chrono::steady_clock::now();
  std::int64_t left = 0;
  bool interrupted = false;
  {
    std::optional<Progress> progress;
    if (::isatty(STDERR_FILENO) != 0) progress.emplace(stats, total, done_before);
    batch::FileDestination destination(*output, *errors);
    batch::Runner runner(std::move(pending), destination, deployment, open_stores, settings, stats);
    runner.run();
    left = runner.remaining();
    interrupted = runner.interrupted();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  batch::print_summary(stats, deployment, total, done_before, seconds);
  if (interrupted && left > 0) {
    std::fprintf(stderr, "llmretry-batch: stopped by %s: %lld lines without an answer; run again to send them\n",
                 signal_name(stop_signals.signal()), static_cast<long long>(left));
    return 128 + stop_signals.signal();
  }
  return failed_before + stats.failed > 0 ? 1 : 0;
}

#if LLMRETRY_BATCH_REDIS
// The fleet form: `submit` puts a batch in Redis, any number of `work` processes on any hosts send it,
// `collect` writes its answers, `status` tells where it stands.

constexpr const char* fleet_description = R"(The fleet form: one batch, many workers, through one Redis.
  llmretry-batch submit  INPUT.jsonl --redis URL --batch NAME
  llmretry-batch work    --redis URL --batch NAME [--concurrency N] [--max-attempts N] [--rpm N] [--tpm N]
                         [--lease DURATION] [--redis-wait DURATION] [--priority CLASS] [--tenant NAME]
                         [--metrics-file PATH]
  llmretry-batch collect --redis URL --batch NAME OUTPUT.jsonl [--errors ERRORS.jsonl]
  llmretry-batch status  --redis URL --batch NAME
Each takes --redis-timeout DURATION too (default 1s).)";

constexpr const char* fleet_footer = R"(
submit enqueues every line of INPUT once (again: a no-op for the lines already there or done). work sends
the batch's jobs until none is left (exit 0), holding each under a lease it renews (--lease, default 30s:
a worker killed loses its jobs to the others once it lapses) and riding out Redis unreachable or slow for
--redis-wait (default 30s) before it stops. collect writes one line per custom_id:
exit 0 all answered, 1 some in the errors file, 4 the batch is not finished (nothing written). work reads
OPENAI_BASE_URL and OPENAI_API_KEY. Durations carry their unit (h, m, s, ms, us, ns): 500ms, 2s, 1m30s;
0 alone may go without. Exit status 2: bad usage, input or files; 3: stopped by a Redis failure; work:
130 / 143 stopped by SIGINT / SIGTERM (its requests in flight written first; a second signal quits at once).)";

/// The command line of a fleet command.
struct FleetOptions {
  std::string command;  ///< submit, work, collect or status
  std::string file;     ///< submit: INPUT; collect: OUTPUT
  std::string errors;
  std::string redis;
  std::string batch;
  std::optional<std::int64_t> rpm;
  std::optional<std::int64_t> tpm;
  int concurrency = 8;
  int max_attempts = llmretry::RetryPolicy::batch().max_attempts;
  llmretry::Priority priority = llmretry::Priority::interactive;
  std::string tenant;
  std::chrono::milliseconds lease = visibility_timeout;
  std::chrono::milliseconds redis_wait{30'000};
  std::chrono::milliseconds redis_timeout = default_redis_timeout;
  std::string metrics_file;  ///< work: where its metrics are written, empty: nowhere
};

/// Returns the options of a fleet command line (argv[1] is the command); exits with status 0 after --help.
/// Throws UsageError.
FleetOptions parse_fleet(int argc, char** argv) {
  FleetOptions options;
  options.command = argv[1];
  CLI::App app{fleet_description, "llmretry-batch " + options.command};
  app.footer(fleet_footer);
  if (options.command == "submit") app.add_option("INPUT", options.file, "requests, one JSON object a line (required)");
  if (options.command == "collect") {
    app.add_option("OUTPUT", options.file, "answers, one line per custom_id, replaced whole (required)");
    app.add_option("--errors", options.errors, "requests that failed for good (default: OUTPUT with .errors.jsonl)");
  }
  app.add_option("--redis", options.redis, "redis://HOST[:PORT] (required)");
  app.add_option("--batch", options.batch, "the batch's name: letters, digits, '.', '_' and '-' (required)");
  add_redis_timeout_option(app, options.redis_timeout);
  if (options.command == "work") {
    app.add_option("--rpm", options.rpm, "requests per minute, enforced per second (default: learned)")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1'000'000'000}));
    app.add_option("--tpm", options.tpm, "tokens per minute, enforced per second (default: learned)")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1'000'000'000'000}));
    app.add_option("--concurrency", options.concurrency, "requests in flight at most (default 8)")
        ->check(CLI::Range(1, 256));
    add_max_attempts_option(app, options.max_attempts,
                            "the attempts this worker makes of a request at most (a retry taken by another "
                            "worker starts a new count)");
    add_priority_option(app, options.priority);
    add_tenant_option(app, options.tenant);
    llmretry_tools::add_duration_option(app, "--lease", options.lease, std::chrono::milliseconds{300},
                                        std::chrono::hours{1},
                                        "how long a job stays this worker's without being renewed (default 30s, "
                                        "300ms to 1h)");
    llmretry_tools::add_duration_option(app, "--redis-wait", options.redis_wait, std::chrono::milliseconds::zero(),
                                        std::chrono::hours{1},
                                        "how long Redis may stay unreachable or slow before this worker stops "
                                        "(default 30s, 0 to 1h)");
    add_metrics_file_option(app, options.metrics_file);
  }
  llmretry_tools::parse_command_line(app, argc - 1, argv + 1);
  if ((options.command == "submit" || options.command == "collect") && options.file.empty())
    throw UsageError(std::string(options.command == "submit" ? "INPUT" : "OUTPUT") + " is required");
  if (options.redis.empty()) throw UsageError("--redis is required");
  if (options.batch.empty()) throw UsageError("--batch is required");
  if (!llmretry_tools::is_plain_name(options.batch, 100))
    throw UsageError("--batch: \"" + options.batch + "\": 1 to 100 letters, digits, '.', '_' or '-'");
  if (options.command == "collect") {
    if (options.errors.empty()) {
      const std::string& out = options.file;
      const bool jsonl = out.size() > 6 && out.compare(out.size() - 6, 6, ".jsonl") == 0;
      options.errors = (jsonl ? out.substr(0, out.size() - 6) : out) + ".errors.jsonl";
    }
    if (options.errors == options.file) throw UsageError("--errors: must not be OUTPUT");
  }
  (void)redis_options(options.redis, options.redis_timeout);  // throws UsageError for a bad URL
  return options;
}

/// The Redis keys of the batch `name`: its queue (redis::JobQueue "fleet:<name>", which keeps the answers
/// as its jobs' results), and beside it in the same hash slot its description and its workers.
struct FleetKeys {
  FleetKeys(const llmretry::redis::Options& redis, const std::string& name)
      : queue("fleet:" + name),
        operations("fleet:" + name + ":"),
        meta(redis.prefix + "queue:{" + queue + "}:meta"),
        workers(redis.prefix + "queue:{" + queue + "}:workers") {}
  std::string queue;       ///< the JobQueue's name
  std::string operations;  ///< the prefix of its records in the operations table
  std::string meta;        ///< hash: lines, digest, input, started_at, requests, rate_limited, tokens_used
  std::string workers;     ///< sorted set: "host:pid" -> the end of its lease (server time, ms)
};

/// Returns the server's time in milliseconds since the epoch.
long long server_ms(llmretry::redis::Connection& connection) {
  const auto time = connection.command("time", {"TIME"});
  return time[0].number() * 1000 + time[1].number() / 1000;
}

/// Returns "host:pid" of this process.
std::string worker_name() { return host_name() + ":" + std::to_string(::getpid()); }

/// The batch's description is kept as long as its results: this long after it was last written.
constexpr std::chrono::milliseconds meta_retention = std::chrono::hours(24 * 7);

/// llmretry-batch submit: enqueues every line of INPUT once. Returns the exit status.
int submit(const FleetOptions& options) {
  const auto redis = redis_options(options.redis, options.redis_timeout);
  const FleetKeys keys(redis, options.batch);
  std::string digest_input;  // every line's Idempotency-Key: the batch's identity
  const std::size_t lines =
      batch::for_each_request(options.file, "http://127.0.0.1", [&](batch::Request request, std::string_view) {
        digest_input += request.key;
        digest_input += '\n';
      });
  const std::string digest = llmretry::store::fingerprint(digest_input);
  digest_input.clear();
  digest_input.shrink_to_fit();
  llmretry::redis::Connection connection(redis);
  const auto before = connection.command("submit", {"HGET", keys.meta, "digest"});
  if (!before.is_nil() && before.text() != digest)
    throw UsageError("--batch " + options.batch + ": already holds another input; choose another name");
  (void)connection.command("submit", {"HSET", keys.meta, "digest", digest, "lines", std::to_string(lines), "input",
                                      std::filesystem::absolute(options.file).string()});
  (void)connection.command("submit", {"PEXPIRE", keys.meta, std::to_string(meta_retention.count())});
  llmretry::redis::JobQueue queue(connection, keys.queue, queue_options());
  std::size_t added = 0;
  (void)batch::for_each_request(options.file, "http://127.0.0.1", [&](batch::Request request, std::string_view text) {
    if (queue.enqueue({request.key, std::string(text), 0, std::chrono::milliseconds::zero()})) ++added;
  });
  std::fprintf(stderr, "batch %s: %zu lines, %zu enqueued now, %zu already there or done\n", options.batch.c_str(),
               lines, added, lines - added);
  return 0;
}

/// Returns the number of lines submitted to the batch. Throws UsageError when none was.
std::int64_t submitted_lines(llmretry::redis::Connection& connection, const FleetKeys& keys, const std::string& name) {
  const auto lines = connection.command("meta", {"HGET", keys.meta, "lines"});
  if (lines.is_nil())
    throw UsageError("--batch " + name +
                     ": no such batch in Redis (submit it first; a batch is forgotten 7 days after its last answer)");
  return lines.number();
}

/// Tells Redis, every third of the lease, that this worker is alive and what it sent since the last time.
class Heartbeat {
 public:
  Heartbeat(const llmretry::redis::Options& redis, FleetKeys keys, std::chrono::milliseconds lease,
            const batch::Stats& stats)
      : connection_(redis), keys_(std::move(keys)), lease_(lease), stats_(stats), name_(worker_name()) {
    beat();
    thread_.emplace(lease / 3, [this] {
      try {
        beat();
      } catch (const std::exception&) {  // tried again at the next turn
      }
      return true;
    });
  }
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;
  Heartbeat(Heartbeat&&) = delete;
  Heartbeat& operator=(Heartbeat&&) = delete;
  ~Heartbeat() {
    thread_.reset();
    try {
      flush();
      (void)connection_.command("heartbeat", {"ZREM", keys_.workers, name_});
    } catch (const std::exception&) {  // its entry lapses by itself
    }
  }

 private:
  void beat() {
    const long long now = server_ms(connection_);
    (void)connection_.command("heartbeat", {"ZADD", keys_.workers, std::to_string(now + lease_.count()), name_});
    (void)connection_.command("heartbeat", {"ZREMRANGEBYSCORE", keys_.workers, "-inf", std::to_string(now)});
    (void)connection_.command("heartbeat", {"HSETNX", keys_.meta, "started_at", std::to_string(now)});
    flush();
  }
  /// Adds what was counted since the last flush to the batch's tallies.
  void flush() {
    const std::int64_t counts[] = {stats_.requests, stats_.rate_limited, stats_.tokens_used};
    const char* names[] = {"requests", "rate_limited", "tokens_used"};
    for (std::size_t i = 0; i < 3; ++i) {
      if (counts[i] == flushed_[i]) continue;
      (void)connection_.command("heartbeat",
                                {"HINCRBY", keys_.meta, names[i], std::to_string(counts[i] - flushed_[i])});
      flushed_[i] = counts[i];
    }
  }

  llmretry::redis::Connection connection_;
  const FleetKeys keys_;
  const std::chrono::milliseconds lease_;
  const batch::Stats& stats_;
  const std::string name_;
  std::int64_t flushed_[3] = {0, 0, 0};
  std::optional<llmretry_tools::PeriodicThread> thread_;  ///< last: it starts once the rest is ready
};

/// llmretry-batch work: sends the batch's jobs until none is left. Returns the exit status (128 + the
/// signal when one stopped it: main then ends the process by that signal).
int work(const FleetOptions& options) {
  const batch::StopSignals stop_signals(stopping_words);  // before any thread starts
  const std::pair<std::string, std::string> provider = provider_from_environment();
  const std::string& base_url = provider.first;
  const std::string& api_key = provider.second;
  if (!options.metrics_file.empty()) batch::check_metrics_file(options.metrics_file);
  const auto redis = redis_options(options.redis, options.redis_timeout);
  const FleetKeys keys(redis, options.batch);
  std::int64_t submitted = 0;
  {
    llmretry::redis::Connection connection(redis);
    submitted = submitted_lines(connection, keys, options.batch);
  }
  llmretry::metrics::Registry registry;
  batch::Stats stats;
  std::optional<batch::MetricsFile> metrics_file;
  if (!options.metrics_file.empty())
    metrics_file.emplace(options.metrics_file,
                         [&registry, &stats, labels = batch::RunLabels{options.priority, options.tenant}] {
                           return registry.prometheus_text() + batch::progress_metrics(stats, labels, std::nullopt);
                         });
  batch::Settings settings;
  settings.workers = options.concurrency;
  settings.policy.max_attempts = options.max_attempts;
  settings.priority = options.priority;
  settings.tenant = options.tenant;
  settings.api_key = api_key;
  settings.provider = base_url;
  settings.batch_name = keys.operations;
  settings.renew_every = options.lease / 3;
  settings.submitted = submitted;
  settings.idle_wait = std::chrono::milliseconds{25};
  settings.is_outage = is_redis_outage;
  settings.outage_limit = options.redis_wait;
  settings.observer = &registry;
  settings.stop_requested = &stop_signals.requested();
  settings.read_job = [base_url](const llmretry::store::Job& job) {
    return batch::detail::parse_line(job.payload, 0, "job " + job.id, base_url);
  };
  Options single;
  single.rpm = options.rpm;
  single.tpm = options.tpm;
  llmretry::DeploymentOptions paced = deployment_options(single);
  llmretry_tools::RedisPool pacing_connections(redis, pacing_connection_count(options.concurrency));
  share_pacing(paced, pacing_connections, base_url, api_key);
  llmretry::Deployment deployment(std::move(paced));
  const batch::OpenStores open_stores = [redis, name = keys.queue, lease = options.lease] {
    return std::make_unique<RedisStores>(redis, name, lease);
  };
  batch::QueueDestination destination;
  const auto start = std::chrono::steady_clock::now();
  bool interrupted = false;
  {
    const Heartbeat heartbeat(redis, keys, options.lease, stats);
    batch::Runner runner({}, destination, deployment, open_stores, settings, stats);
    runner.run();
    interrupted = runner.interrupted();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int stopped_by = interrupted ? stop_signals.signal() : 0;
  if (stopped_by != 0)
    std::fprintf(stderr,
                 "worker %s of batch %s: stopped by %s; the jobs it had not sent are back in the queue; %lld jobs "
                 "lost to other workers (lease lapsed)\n",
                 worker_name().c_str(), options.batch.c_str(), signal_name(stopped_by),
                 static_cast<long long>(stats.leases_lost.load()));
  else
    std::fprintf(stderr, "worker %s of batch %s: no job left; %lld jobs lost to other workers (lease lapsed)\n",
                 worker_name().c_str(), options.batch.c_str(), static_cast<long long>(stats.leases_lost.load()));
  batch::print_summary(stats, deployment, stats.answered + stats.failed, 0, seconds);
  return stopped_by != 0 ? 128 + stopped_by : 0;
}

/// llmretry-batch collect: writes the batch's answers and errors, one line per custom_id, streamed from
/// Redis a page at a time. Returns the exit status: 0, 1 or 4 (not finished, nothing written).
int collect(const FleetOptions& options) {
  const auto redis = redis_options(options.redis, options.redis_timeout);
  const FleetKeys keys(redis, options.batch);
  llmretry::redis::Connection connection(redis);
  llmretry::redis::JobQueue queue(connection, keys.queue, queue_options());
  const auto counts = queue.counts();
  const std::int64_t lines = submitted_lines(connection, keys, options.batch);
  if (counts.ready + counts.delayed + counts.taken > 0) {
    std::fprintf(stderr,
                 "llmretry-batch: batch %s is not finished: %zu queued, %zu in flight, %zu done, %zu failed of %lld "
                 "lines; nothing written (run llmretry-batch work, or wait for the workers)\n",
                 options.batch.c_str(), counts.ready + counts.delayed, counts.taken, counts.done, counts.failed,
                 static_cast<long long>(lines));
    return 4;
  }
  try {
    batch::check_files("", options.file, options.errors);
    // What OUTPUT and ERRORS hold must be lines of the Batch output format (an earlier collect's), so that
    // no other file is replaced; their locks keep a run of the single form away while this one writes.
    const batch::AnswerFile output_check(options.file);
    const batch::AnswerFile errors_check(options.errors);
    batch::Replacement output(options.file, batch::Links::follow);
    batch::Replacement errors(options.errors, batch::Links::follow);
    std::string cursor;
    do {
      auto page = queue.results(cursor, 1000);
      for (const auto& result : page.results) (result.failed ? errors : output).write(result.value);
      cursor = std::move(page.cursor);
    } while (!cursor.empty());
    // A job that used up the queue's attempts has no result: its request goes to the errors file.
    for (const auto& job : queue.dead_letters(counts.dead)) {
      const auto request = batch::detail::parse_line(job.payload, 0, "job " + job.id, "http://127.0.0.1");
      errors.write(batch::error_line(
          request, "dead_letter", "taken " + std::to_string(job.attempts) + " times without an end (its workers died)",
          "attempts_exhausted", job.attempts, nullptr));
    }
    output.commit();
    errors.commit();
    std::fprintf(stderr, "batch %s: %zu answers to %s, %zu errors to %s, of %lld lines\n", options.batch.c_str(),
                 output.lines(), options.file.c_str(), errors.lines(), options.errors.c_str(),
                 static_cast<long long>(lines));
    return errors.lines() > 0 ? 1 : 0;
  } catch (const batch::FileError& error) {
    throw batch::FileProblem(error.what());
  }
}

/// llmretry-batch status: prints where the batch stands on stdout. Returns the exit status.
int status(const FleetOptions& options) {
  const auto redis = redis_options(options.redis, options.redis_timeout);
  const FleetKeys keys(redis, options.batch);
  llmretry::redis::Connection connection(redis);
  const std::int64_t lines = submitted_lines(connection, keys, options.batch);
  llmretry::redis::JobQueue queue(connection, keys.queue, queue_options());
  const auto counts = queue.counts();
  const long long now = server_ms(connection);
  const long long alive =
      connection.command("status", {"ZCOUNT", keys.workers, "(" + std::to_string(now), "+inf"}).integer();
  const auto meta =
      connection.command("status", {"HMGET", keys.meta, "requests", "rate_limited", "tokens_used", "started_at"});
  const auto number = [&](std::size_t i) { return meta[i].is_nil() ? 0LL : meta[i].number(); };
  const std::size_t left = counts.ready + counts.delayed + counts.taken;
  const std::size_t ended = counts.done + counts.failed;
  std::printf("batch %s: %lld lines\n", options.batch.c_str(), static_cast<long long>(lines));
  std::printf("queued %zu (ready %zu, waiting to retry %zu), in flight %zu, done %zu, failed %zu, dead %zu\n",
              counts.ready + counts.delayed, counts.ready, counts.delayed, counts.taken, counts.done, counts.failed,
              counts.dead);
  std::printf("workers alive %lld\n", alive);
  const long long requests = number(0);
  std::printf("requests %lld sent, %lld answered 429 (%.2f %%); tokens %lld used\n", requests, number(1),
              requests > 0 ? 100.0 * static_cast<double>(number(1)) / static_cast<double>(requests) : 0.0, number(2));
  if (left == 0) {
    std::printf("ETA finished: run llmretry-batch collect\n");
  } else if (number(3) > 0 && ended > 0 && alive > 0) {
    const double seconds = static_cast<double>(now - number(3)) / 1000.0;
    std::printf("ETA %.0f s\n", static_cast<double>(left) * seconds / static_cast<double>(ended));
  } else {
    std::printf("ETA unknown (%s)\n", alive > 0 ? "nothing done yet" : "no worker alive");
  }
  return 0;
}

/// Runs a fleet command. Returns the exit status.
int run_fleet(const FleetOptions& options) {
  if (options.command == "submit") return submit(options);
  if (options.command == "work") return work(options);
  if (options.command == "collect") return collect(options);
  return status(options);
}
#endif

}  // namespace

int main(int argc, char** argv) {
  llmretry_tools::MainOptions statuses;
  statuses.usage_suffix = " (see --help)";
  statuses.other = [](const std::exception& error) -> llmretry_tools::Exit {
    if (dynamic_cast<const batch::InputError*>(&error) != nullptr ||
        dynamic_cast<const batch::FileProblem*>(&error) != nullptr)
      return {2, error.what()};
    return {3, std::string("stopped: ") + error.what() + "; what is written stays valid: rerun to resume"};
  };
  const int status = llmretry_tools::run_main(
      "llmretry-batch",
      [&] {
        if (argc > 1 && is_fleet_command(argv[1])) {
#if LLMRETRY_BATCH_REDIS
          return run_fleet(parse_fleet(argc, argv));
#else
          throw UsageError(std::string(argv[1]) + ": this build has no Redis support");
#endif
        }
        return run(parse(argc, argv));
      },
      statuses);
  if (status == 128 + SIGINT || status == 128 + SIGTERM) {  // a run stopped by that signal, everything written
    std::fflush(nullptr);
#if defined(__SANITIZE_ADDRESS__)
    __lsan_do_leak_check();  // what the exit would check: ending by a signal skips it
#endif
    batch::end_by(status - 128);
  }
  return status;
}
