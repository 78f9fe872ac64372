// llmretry-batch: sends the requests of an OpenAI Batch API input file to an OpenAI-compatible endpoint,
// paced by one Deployment, and writes the Batch output format; a rerun resumes where a run stopped.

#include <llmretry/admission/deployment.hpp>
#include <llmretry/store/fingerprint.hpp>
#include <llmretry/store/job_queue.hpp>
#include <llmretry/store/operations.hpp>
#if LLMRETRY_BATCH_REDIS
#include <llmretry/redis/connection.hpp>
#include <llmretry/redis/job_queue.hpp>
#include <llmretry/redis/operations.hpp>

#include "common/redis_pool.hpp"
#endif

#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
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
#include <vector>

#include "answers.hpp"
#include "common/command_line.hpp"
#include "common/periodic_thread.hpp"
#include "common/program.hpp"
#include "files.hpp"
#include "input.hpp"
#include "report.hpp"
#include "runner.hpp"
#include "send_again.hpp"

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
3 stopped by a file or Redis failure (rerun to resume).)";

struct Options {
  std::string input;
  std::string output;
  std::string errors;
  std::optional<std::int64_t> rpm;
  std::optional<std::int64_t> tpm;
  int concurrency = 8;
  std::string redis;
  bool retry_errors = false;
  bool fresh = false;
};

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
  app.add_option("--redis", options.redis,
                 "redis://HOST[:PORT]: keep the job queue and operations table in Redis, and pace with every "
                 "process that uses the same provider and key on it (default: in memory, paced alone)");
  app.add_flag("--retry-errors", options.retry_errors,
               "send again the requests of the errors file given up for a temporary cause (attempts_exhausted, "
               "wait_budget, provider_wait_too_long, ...): their lines leave the errors file");
  app.add_flag("--fresh", options.fresh,
               "with --redis: forget what Redis holds of this batch (its queue, which requests completed) and "
               "send again the requests the errors file says completed in an earlier run (already_completed)");
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

/// A job a worker holds comes back to the queue after this long without an answer: the longest attempt
/// (60 s) and some pacing wait.
constexpr std::chrono::milliseconds visibility_timeout{90'000};

/// Jobs are retried by the RetryPolicy; the queue's own limit only guards against a job taken forever.
llmretry::store::JobQueueOptions queue_options() {
  llmretry::store::JobQueueOptions options;
  options.visibility_timeout = visibility_timeout;
  options.max_attempts = 1000;
  return options;
}

#if LLMRETRY_BATCH_REDIS
/// Returns the host and port of "redis://HOST[:PORT]". Throws UsageError.
llmretry::redis::Options redis_options(const std::string& url) {
  try {
    return llmretry::redis::options_from_url(url);
  } catch (const std::invalid_argument& error) {
    throw UsageError(std::string("--redis: ") + error.what());
  }
}

/// One worker's stores in Redis, over a connection of its own.
class RedisStores final : public batch::Stores {
 public:
  RedisStores(const llmretry::redis::Options& options, const std::string& queue_name)
      : connection_(options), queue_(connection_, queue_name, queue_options()), operations_(connection_) {}
  llmretry::store::JobQueue& queue() override { return queue_; }
  llmretry::store::OperationsTable& operations() override { return operations_; }

 private:
  llmretry::redis::Connection connection_;
  llmretry::redis::JobQueue queue_;
  llmretry::redis::OperationsTable operations_;
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

/// Runs the batch. Returns the exit status.
int run(const Options& options) {
  std::string base_url = environment("OPENAI_BASE_URL");
  const std::string api_key = environment("OPENAI_API_KEY");
  if (base_url.empty()) base_url = "https://api.openai.com/v1";
  if (api_key.empty() && base_url.find("api.openai.com") != std::string::npos)
    throw UsageError("OPENAI_API_KEY is not set");
  if (!options.redis.empty() && !LLMRETRY_BATCH_REDIS) throw UsageError("--redis: this build has no Redis support");

  batch::check_files(options.input, options.output, options.errors);
  const std::vector<batch::Request> requests = batch::read_input(options.input, base_url);
  std::optional<batch::AnswerFile> output;
  std::optional<batch::AnswerFile> errors;
  try {
    output.emplace(options.output);
#if LLMRETRY_BATCH_REDIS
    if (options.fresh) forget_batch(redis_options(options.redis), batch_name(options.output));
#endif
    const auto send_again = [&](std::string_view reason) {
      return (options.retry_errors && batch::is_temporary(reason)) ||
             (options.fresh && reason == batch::already_completed);
    };
    if (options.retry_errors || options.fresh) batch::drop_lines(options.errors, send_again);
    errors.emplace(options.errors);
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

  batch::Settings settings;
  settings.workers = options.concurrency;
  settings.api_key = api_key;
  settings.provider = base_url;
  settings.batch_name = batch_name(options.output) + ":";
  llmretry::DeploymentOptions paced = deployment_options(options);
#if LLMRETRY_BATCH_REDIS
  std::unique_ptr<llmretry_tools::RedisPool> pacing_connections;
  if (!options.redis.empty()) {
    pacing_connections = std::make_unique<llmretry_tools::RedisPool>(
        redis_options(options.redis), static_cast<std::size_t>(std::min(options.concurrency, 8)));
    paced.shared = std::make_shared<llmretry_tools::PooledRateLimiter>(
        *pacing_connections, llmretry_tools::shared_pacing_name("llmretry-batch", base_url, api_key), paced.limits);
  }
#endif
  llmretry::Deployment deployment(std::move(paced));
  llmretry::store::MemoryJobQueue memory_queue(queue_options());
  llmretry::store::MemoryOperationsTable memory_operations;
  batch::OpenStores open_stores = [&] { return std::make_unique<MemoryStores>(memory_queue, memory_operations); };
#if LLMRETRY_BATCH_REDIS
  if (!options.redis.empty()) {
    open_stores = [redis = redis_options(options.redis), name = batch_name(options.output)] {
      return std::make_unique<RedisStores>(redis, name);
    };
  }
#endif

  batch::Stats stats;
  const auto start = std::chrono::steady_clock::now();
  {
    std::optional<Progress> progress;
    if (::isatty(STDERR_FILENO) != 0) progress.emplace(stats, total, done_before);
    batch::Runner(std::move(pending), *output, *errors, deployment, open_stores, settings, stats).run();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  batch::print_summary(stats, deployment, total, done_before, seconds);
  return failed_before + stats.failed > 0 ? 1 : 0;
}

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
  return llmretry_tools::run_main(
      "llmretry-batch", [&] { return run(parse(argc, argv)); }, statuses);
}
