// A relay's interactive calls beside a batch on one quota, with real processes on loopback: the loopback
// provider (in this process) enforces a per-minute limit per second; llmretry-relay (a child process) relays
// interactive chat completions that this process sends as a Poisson process; llmretry-batch workers (child
// processes) send a batch submitted at the start, from a while later to its end. The relay and the workers
// pace on one limiter in one redis-server (named after the provider's base URL and key, given to all the
// same). Run twice, each with a fresh redis-server, provider and relay: the workers first come, first served
// (--priority interactive), then as a batch (--priority batch, only what the interactive calls leave).
// Prints per run the interactive calls' wait (their latency less the provider's) before and during the
// batch, the batch's rate against what the interactive calls leave, and the provider's 429s.
// --scenario tenants: two clients of one llmretry-relay (its --config names clients a and b, each with a key
// of its own), a sending interactive calls at ten times b's rate, together past the provider's limit. Three
// phases, each with a fresh provider and relay: b alone (its client key); a and b with one shared key
// (LLMRETRY_RELAY_CLIENT_KEY, no tenant: first come, first served); each with its client key (tenants a and
// b). Prints per phase b's wait (latency less the provider's), a's served rate, the answers other than 200
// by client, the provider's 429s, and b's P95 as tenants against alone. The relay's --max-wait bounds a
// call's wait for capacity: past it, a call is answered 429 (counted, not a failure).
// Exits non-zero only when something broke (a program did not start or failed, a batch line was not
// answered, a call answered neither 200 nor 429 in the tenants scenario), never for a figure.
#include <llmretry/loopback/provider.hpp>
#include <llmretry/redis/connection.hpp>
#include <llmretry/redis/testing_server.hpp>

#include <curl/curl.h>
#include <signal.h>
#include <stdlib.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_support.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
using llmretry::testing::LoopbackLimits;
using llmretry::testing::LoopbackProvider;

/// What the command line sets.
struct Settings {
  std::string relay;                          ///< the llmretry-relay program
  std::string batch;                          ///< the llmretry-batch program
  std::string redis_server = "redis-server";  ///< looked up in PATH unless it holds a '/'
  std::vector<std::string> modes{"fcfs", "prioritized"};
  std::int64_t rpm = 1200;         ///< the provider's, the relay's and the workers' limit
  std::int64_t tpm = 10'000'000;   ///< idem: more than the runs use
  int latency_ms = 200;            ///< the provider's time per answer
  double rate = 6;                 ///< interactive calls per second
  int lines = 1500;                ///< of the batch
  int workers = 3;                 ///< llmretry-batch work processes
  int concurrency = 8;             ///< each worker's --concurrency
  double start_after = 15;         ///< seconds from the start of the interactive calls to the workers'
  int batch_timeout = 900;         ///< seconds the workers are given to end the batch
  std::uint64_t seed = 1;          ///< of the interactive calls' arrivals
  std::string scenario = "batch";  ///< or "tenants"
  double b_rate = 2.5;             ///< tenants: client b's calls per second (a's: ten times as many)
  double phase_seconds = 60;       ///< tenants: how long each phase sends
  int max_wait_ms = 2000;          ///< tenants: the relay's --max-wait
};

/// Set by SIGINT or SIGTERM: the run stops at its next check, its children ended by their destructors.
volatile std::sig_atomic_t interrupted = 0;

extern "C" void on_stop_signal(int /*signal*/) { interrupted = 1; }

/// Throws std::runtime_error when SIGINT or SIGTERM arrived.
void check_interrupted() {
  if (interrupted != 0) throw std::runtime_error("interrupted");
}

/// One interactive call.
struct Sample {
  double sent = 0;        ///< seconds from the start of the load
  double latency_ms = 0;  ///< from sent to the end of the answer (or of the failure)
  bool ok = false;        ///< answered 200
  long status = 0;        ///< the answer's HTTP status; 0: none (not sent, or no answer)
};

/// Interactive chat completions sent to a relay as a Poisson process, from a thread of its own (one libcurl
/// multi handle: each call is sent at its time, whatever is in flight), each given up after 30 s. The
/// destructor stops it (see stop). Thread-safe: stop() may be called from any one thread.
class PoissonLoad {
 public:
  /// Starts sending to `base_url` (such as "http://127.0.0.1:41234") `rate` calls per second on average,
  /// the gaps drawn from `seed`, from now, each with `headers` too (such as "Authorization: Bearer KEY").
  /// Throws std::runtime_error when libcurl cannot be set up.
  PoissonLoad(const std::string& base_url, double rate, std::uint64_t seed,
              const std::vector<std::string>& headers = {})
      : url_(base_url + "/v1/chat/completions"), rate_(rate), seed_(seed), start_(clock_type::now()) {
    headers_ = curl_slist_append(nullptr, "Content-Type: application/json");
    if (headers_ != nullptr) headers_ = curl_slist_append(headers_, "X-LLMRetry-Priority: interactive");
    for (const std::string& header : headers)
      if (headers_ != nullptr) headers_ = curl_slist_append(headers_, header.c_str());
    multi_ = curl_multi_init();
    if (headers_ == nullptr || multi_ == nullptr) {
      release();
      throw std::runtime_error("libcurl could not be set up");
    }
    thread_ = std::thread([this] { run(); });
  }
  PoissonLoad(const PoissonLoad&) = delete;
  PoissonLoad& operator=(const PoissonLoad&) = delete;
  PoissonLoad(PoissonLoad&&) = delete;
  PoissonLoad& operator=(PoissonLoad&&) = delete;
  ~PoissonLoad() {
    static_cast<void>(stop());
    release();
  }

  /// Returns when it started.
  [[nodiscard]] clock_type::time_point start() const noexcept { return start_; }

  /// Stops sending and waits for the calls in flight. Returns every call, in the order they were sent.
  std::vector<Sample> stop() {
    stopping_ = true;
    if (thread_.joinable()) thread_.join();
    return samples_;
  }

 private:
  void run() {
    static const std::string body =
        R"({"model":"loopback","messages":[{"role":"user","content":"Say hello."}],"max_tokens":16})";
    std::mt19937_64 random(seed_);
    std::exponential_distribution<double> gap(rate_);
    const auto draw = [&] {
      return std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(gap(random)));
    };
    std::map<CURL*, std::size_t> in_flight;  // each call's sample
    auto next = start_ + draw();
    while (!stopping_ || !in_flight.empty()) {
      if (!stopping_ && clock_type::now() >= next) {
        CURL* easy = curl_easy_init();
        if (easy == nullptr) {  // counted as a failed call
          samples_.push_back({seconds_since_start(), 0, false, 0});
        } else {
          curl_easy_setopt(easy, CURLOPT_URL, url_.c_str());
          curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers_);
          curl_easy_setopt(easy, CURLOPT_POSTFIELDS, body.c_str());
          curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
          curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, bench::discard);
          curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, 30'000L);
          curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
          in_flight[easy] = samples_.size();
          samples_.push_back({seconds_since_start(), 0, false, 0});
          curl_multi_add_handle(multi_, easy);
        }
        next += draw();
        continue;
      }
      int running = 0;
      curl_multi_perform(multi_, &running);
      int left = 0;
      while (CURLMsg* message = curl_multi_info_read(multi_, &left)) {
        if (message->msg != CURLMSG_DONE) continue;
        CURL* easy = message->easy_handle;
        const auto found = in_flight.find(easy);
        if (found == in_flight.end()) continue;
        Sample& sample = samples_[found->second];
        long status = 0;
        curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
        sample.status = message->data.result == CURLE_OK ? status : 0;
        sample.ok = sample.status == 200;
        sample.latency_ms = (seconds_since_start() - sample.sent) * 1000;
        curl_multi_remove_handle(multi_, easy);
        curl_easy_cleanup(easy);
        in_flight.erase(found);
      }
      const auto until_next = std::chrono::duration_cast<std::chrono::milliseconds>(next - clock_type::now()).count();
      const int wait_ms = stopping_ ? 100 : static_cast<int>(std::clamp<long long>(until_next, 0, 100));
      if (wait_ms > 0) curl_multi_poll(multi_, nullptr, 0, wait_ms, nullptr);
    }
  }

  double seconds_since_start() const { return std::chrono::duration<double>(clock_type::now() - start_).count(); }

  void release() noexcept {
    if (multi_ != nullptr) curl_multi_cleanup(multi_);
    multi_ = nullptr;
    if (headers_ != nullptr) curl_slist_free_all(headers_);
    headers_ = nullptr;
  }

  const std::string url_;
  const double rate_;
  const std::uint64_t seed_;
  const clock_type::time_point start_;
  curl_slist* headers_ = nullptr;
  CURLM* multi_ = nullptr;
  std::atomic<bool> stopping_{false};
  std::vector<Sample> samples_;  ///< written by the thread until it is joined
  std::thread thread_;           ///< last: it starts once the rest is ready
};

/// Writes `lines` chat completions in the OpenAI Batch API input format to `path`. Throws std::runtime_error.
void write_input(const std::filesystem::path& path, int lines) {
  std::ofstream out(path);
  for (int i = 1; i <= lines; ++i)
    out << R"({"custom_id":"line-)" << i
        << R"(","method":"POST","url":"/v1/chat/completions","body":{"model":"loopback","max_tokens":16,)"
        << R"("messages":[{"role":"user","content":"Summarise ticket )" << i << R"("}]}})" << '\n';
  if (!out.flush()) throw std::runtime_error("cannot write " + path.string());
}

/// Returns how many lines the file at `path` holds (0 when it does not exist).
std::int64_t count_lines(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::int64_t count = 0;
  for (std::string line; std::getline(in, line);) ++count;
  return count;
}

/// Returns what a program printed last (up to 2000 characters), for a message.
std::string tail_of(std::string text) {
  if (text.size() > 2000) text.erase(0, text.size() - 2000);
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text.empty() ? " (it printed nothing)" : "; it printed:\n" + text;
}

/// Runs `child` to its end, at most `timeout`. Throws std::runtime_error naming it when it does not end in
/// time or ends with a status other than those `allowed`. Returns its exit status.
int finish(bench::Child& child, std::chrono::seconds timeout, const std::set<int>& allowed = {0}) {
  const auto until = clock_type::now() + timeout;
  std::optional<int> status;
  while (!(status = child.wait_for(std::chrono::milliseconds(100))) && clock_type::now() < until) check_interrupted();
  if (!status)
    throw std::runtime_error("the " + child.name() + " did not end within " + std::to_string(timeout.count()) + " s" +
                             tail_of(child.output()));
  if (allowed.count(*status) == 0)
    throw std::runtime_error("the " + child.name() + " exited with status " + std::to_string(*status) +
                             tail_of(child.output()));
  return *status;
}

/// Throws std::runtime_error naming `child` and what it printed when it has exited.
void check_running(bench::Child& child) {
  if (const auto status = child.poll_exit())
    throw std::runtime_error("the " + child.name() + " exited with status " + std::to_string(*status) +
                             tail_of(child.output()));
}

/// Returns `value` seconds as a duration of the clock.
clock_type::duration seconds(double value) {
  return std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(value));
}

/// Returns at `until`. Throws std::runtime_error when SIGINT or SIGTERM arrived or `watched` exited first.
void wait_until(clock_type::time_point until, bench::Child& watched) {
  while (clock_type::now() < until) {
    check_interrupted();
    check_running(watched);
    std::this_thread::sleep_for(
        std::min<clock_type::duration>(std::chrono::milliseconds(50), until - clock_type::now()));
  }
}

/// Returns a loopback provider enforcing the limits and latency of `settings` per second, its buckets full,
/// serving `connections` connections at once. Throws std::runtime_error when it cannot listen.
std::unique_ptr<LoopbackProvider> limited_provider(const Settings& settings, std::size_t connections) {
  LoopbackLimits limits;
  limits.requests_per_minute = settings.rpm;
  limits.tokens_per_minute = settings.tpm;
  limits.latency = std::chrono::milliseconds(settings.latency_ms);
  auto provider = std::make_unique<LoopbackProvider>(0, connections);
  provider->enforce(limits);
  return provider;
}

/// Returns the keys of `server` that match `pattern`.
std::set<std::string> keys_matching(const llmretry::testing::RedisServer& server, const std::string& pattern) {
  llmretry::redis::Connection connection(server.connection_options());
  std::set<std::string> keys;
  std::string cursor = "0";
  do {
    const auto found = connection.command("scan", {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
    cursor = found[0].text();
    for (std::size_t i = 0; i < found[1].size(); ++i) keys.insert(found[1][i].text());
  } while (cursor != "0");
  return keys;
}

/// The figures of one run.
struct Run {
  std::vector<double> before_ms, during_ms;  ///< interactive waits (latency less the provider's), sorted
  int interactive_failed = 0;                ///< calls not answered 200, before, during or after the batch
  std::int64_t answered = 0;                 ///< batch lines in collect's output
  std::int64_t failed = 0;                   ///< in its errors file
  double batch_seconds = 0;                  ///< from the workers' start to the last one's exit
  double interactive_rate = 0;               ///< interactive calls sent per second during the batch
  std::int64_t rate_limited = 0;             ///< the provider's 429s
  std::int64_t served = 0;                   ///< the requests the provider admitted
  std::set<std::string> limiters;            ///< the pacing states seen in Redis while the batch ran
};

/// Runs one mode: a fresh redis-server, provider and relay; the batch submitted; the interactive calls from
/// now; the workers (`priority`) after Settings::start_after; collect once they have all exited.
/// Throws std::runtime_error naming a program that did not start, failed or did not end in time.
Run run_mode(const Settings& settings, const std::string& priority, const std::filesystem::path& input,
             const std::filesystem::path& directory) {
  llmretry::testing::RedisServerOptions redis_options;
  redis_options.executable = settings.redis_server;
  const llmretry::testing::RedisServer redis(redis_options);
  const std::string redis_url = "redis://127.0.0.1:" + std::to_string(redis.port());

  // A connection each for the workers' requests and the relay's, and some to spare.
  const auto provider =
      limited_provider(settings, static_cast<std::size_t>(settings.workers * settings.concurrency) + 64);
  // One string for both: the shared pacing is named after the base URL as given (and the key).
  const std::string base_url = provider->base_url() + "/v1";
  const std::string rpm = std::to_string(settings.rpm);
  const std::string tpm = std::to_string(settings.tpm);

  bench::ChildOptions relay_options;
  relay_options.address_within = std::chrono::seconds(10);
  relay_options.capture_errors = true;
  bench::Child relay(
      "relay (" + settings.relay + ")", settings.relay,
      {"--listen", "127.0.0.1:0", "--upstream", base_url, "--redis", redis_url, "--rpm", rpm, "--tpm", tpm},
      relay_options);

  bench::ChildOptions batch_options;
  batch_options.environment = {"OPENAI_API_KEY=sk-loopback", "OPENAI_BASE_URL=" + base_url};
  batch_options.capture_errors = true;
  batch_options.directory = directory.string();
  const std::string name = "priorities";
  {
    bench::Child submit("llmretry-batch submit (" + settings.batch + ")", settings.batch,
                        {"submit", input.string(), "--redis", redis_url, "--batch", name}, batch_options);
    finish(submit, std::chrono::seconds(120));
  }

  std::optional<PoissonLoad> load;
  load.emplace(relay.base_url(), settings.rate, settings.seed);
  wait_until(load->start() + seconds(settings.start_after), relay);
  Run run;
  std::vector<std::unique_ptr<bench::Child>> workers;
  const auto workers_started = clock_type::now();
  for (int w = 1; w <= settings.workers; ++w)
    workers.push_back(std::make_unique<bench::Child>(
        "batch worker " + std::to_string(w) + " (" + settings.batch + " work)", settings.batch,
        std::vector<std::string>{"work", "--redis", redis_url, "--batch", name, "--concurrency",
                                 std::to_string(settings.concurrency), "--rpm", rpm, "--tpm", tpm, "--priority",
                                 priority},
        batch_options));
  // Until every worker has exited 0 (the batch is done); the pacing states in Redis looked at every second.
  const auto until = workers_started + std::chrono::seconds(settings.batch_timeout);
  auto look_at = workers_started + std::chrono::milliseconds(500);
  clock_type::time_point batch_end;
  for (std::size_t running = workers.size(); running > 0;) {
    check_interrupted();
    running = 0;
    for (auto& worker : workers) {
      const std::optional<int> status = worker->poll_exit();
      if (!status) {
        ++running;
      } else if (*status != 0) {
        throw std::runtime_error("the " + worker->name() + " exited with status " + std::to_string(*status) +
                                 tail_of(worker->output()));
      }
    }
    batch_end = clock_type::now();
    if (running == 0) break;
    check_running(relay);
    if (batch_end > until)
      throw std::runtime_error("the batch did not end within " + std::to_string(settings.batch_timeout) +
                               " s of the workers' start (see --batch-timeout)");
    if (batch_end >= look_at) {
      for (const std::string& key : keys_matching(redis, "*limit:{*}")) run.limiters.insert(key);
      look_at = batch_end + std::chrono::seconds(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const std::vector<Sample> samples = load->stop();
  const auto load_started = load->start();
  load.reset();

  // Each call counts where it was sent: before the workers started, or from then to the batch's end.
  run.batch_seconds = std::chrono::duration<double>(batch_end - workers_started).count();
  const double from = std::chrono::duration<double>(workers_started - load_started).count();
  const double to = from + run.batch_seconds;
  std::size_t during = 0;
  for (const Sample& sample : samples) {
    const bool is_during = sample.sent >= from && sample.sent < to;
    if (is_during) ++during;
    if (!sample.ok) {
      ++run.interactive_failed;
    } else if (sample.sent < from) {
      run.before_ms.push_back(sample.latency_ms - settings.latency_ms);
    } else if (is_during) {
      run.during_ms.push_back(sample.latency_ms - settings.latency_ms);
    }
  }
  std::sort(run.before_ms.begin(), run.before_ms.end());
  std::sort(run.during_ms.begin(), run.during_ms.end());
  run.interactive_rate = run.batch_seconds > 0 ? static_cast<double>(during) / run.batch_seconds : 0.0;

  const std::filesystem::path output = directory / (priority + "-output.jsonl");
  const std::filesystem::path errors = directory / (priority + "-errors.jsonl");
  {
    bench::Child collect(
        "llmretry-batch collect (" + settings.batch + ")", settings.batch,
        {"collect", "--redis", redis_url, "--batch", name, output.string(), "--errors", errors.string()},
        batch_options);
    finish(collect, std::chrono::seconds(120), {0, 1});
  }
  run.answered = count_lines(output);
  run.failed = count_lines(errors);
  run.rate_limited = provider->refused();
  run.served = provider->served();
  return run;
}

/// Prints the line of `mode` and, indented, what else was seen.
void print_run(const Settings& settings, const std::string& mode, const Run& run) {
  const double capacity = static_cast<double>(settings.rpm) / 60;
  const double leftover = std::max(0.01, capacity - run.interactive_rate);
  const double batch_rate = run.batch_seconds > 0 ? static_cast<double>(run.answered) / run.batch_seconds : 0.0;
  std::printf(
      "priorities %s: interactive before the batch P50 %.1f ms P95 %.1f ms (%zu), during it P50 %.1f ms P95 %.1f ms "
      "(%zu), non-200 %d; batch %lld lines in %.1f s, %.1f/s = %.0f %% of the leftover (capacity %.0f/s - "
      "interactive %.1f/s); upstream 429s %lld\n",
      mode.c_str(), bench::percentile(run.before_ms, 50), bench::percentile(run.before_ms, 95), run.before_ms.size(),
      bench::percentile(run.during_ms, 50), bench::percentile(run.during_ms, 95), run.during_ms.size(),
      run.interactive_failed, static_cast<long long>(run.answered), run.batch_seconds, batch_rate,
      100 * batch_rate / leftover, capacity, run.interactive_rate, static_cast<long long>(run.rate_limited));
  std::printf("  %s: the provider admitted %lld requests; %zu pacing state(s) in Redis while the batch ran%s\n",
              mode.c_str(), static_cast<long long>(run.served), run.limiters.size(),
              run.limiters.size() == 1 ? " (the relay and the workers share one)" : "");
  if (run.failed > 0)
    std::printf("  %s: %lld batch lines given up (in the errors file)\n", mode.c_str(),
                static_cast<long long>(run.failed));
  std::fflush(stdout);
}

/// The phases of the tenants scenario: b alone; a and b with one key (no tenant: first come, first served);
/// each with its client's key (tenants a and b of the relay's config).
enum class TenantPhase : std::uint8_t { alone, fcfs, tenants };

/// Returns the name of `phase` in what is printed.
const char* to_string(TenantPhase phase) {
  switch (phase) {
    case TenantPhase::alone: return "b alone";
    case TenantPhase::fcfs: return "fcfs";
    case TenantPhase::tenants: return "tenants";
  }
  return "?";
}

/// The keys the relay is given in its environment: clients a and b of the config, and the one key taken at
/// its headers' word (LLMRETRY_RELAY_CLIENT_KEY).
constexpr const char* a_key = "sk-bench-client-a";
constexpr const char* b_key = "sk-bench-client-b";
constexpr const char* shared_key = "sk-bench-shared";

/// What one client's calls saw in one phase.
struct ClientFigures {
  std::vector<double> waits_ms;  ///< of the calls answered 200: latency less the provider's, sorted
  std::size_t sent = 0;
  std::size_t served = 0;   ///< answered 200
  std::size_t refused = 0;  ///< answered 429 (the relay's no_capacity past --max-wait)
  std::size_t other = 0;    ///< any other answer, or none
};

/// Returns the figures of `samples`, less the provider's `latency_ms`.
ClientFigures figures_of(const std::vector<Sample>& samples, int latency_ms) {
  ClientFigures figures;
  figures.sent = samples.size();
  for (const Sample& sample : samples) {
    if (sample.ok) {
      ++figures.served;
      figures.waits_ms.push_back(sample.latency_ms - latency_ms);
    } else if (sample.status == 429) {
      ++figures.refused;
    } else {
      ++figures.other;
    }
  }
  std::sort(figures.waits_ms.begin(), figures.waits_ms.end());
  return figures;
}

/// The figures of one phase.
struct TenantRun {
  ClientFigures a, b;
  double seconds = 0;             ///< from the first call sent to the last answer
  std::int64_t rate_limited = 0;  ///< the provider's 429s
};

/// Runs one phase: a fresh provider and relay (told `config`, its clients' keys and the one key in its
/// environment); b's calls, and a's at ten times b's rate unless alone, for Settings::phase_seconds.
/// Throws std::runtime_error naming a program that did not start or exited.
TenantRun run_tenant_phase(const Settings& settings, TenantPhase phase, const std::filesystem::path& config) {
  // The relay's connections upstream (about the rate times the latency at once), and many to spare.
  const auto provider = limited_provider(settings, 64);
  bench::ChildOptions relay_options;
  relay_options.environment = {"OPENAI_API_KEY=sk-loopback", std::string("A_KEY=") + a_key,
                               std::string("B_KEY=") + b_key, std::string("LLMRETRY_RELAY_CLIENT_KEY=") + shared_key};
  relay_options.address_within = std::chrono::seconds(10);
  relay_options.capture_errors = true;
  bench::Child relay("relay (" + settings.relay + ")", settings.relay,
                     {"--listen", "127.0.0.1:0", "--upstream", provider->base_url() + "/v1", "--rpm",
                      std::to_string(settings.rpm), "--tpm", std::to_string(settings.tpm), "--max-wait",
                      std::to_string(settings.max_wait_ms) + "ms", "--config", config.string()},
                     relay_options);
  const auto bearer = [&](const char* own) {
    return "Authorization: Bearer " + std::string(phase == TenantPhase::fcfs ? shared_key : own);
  };
  std::optional<PoissonLoad> b, a;
  b.emplace(relay.base_url(), settings.b_rate, settings.seed, std::vector<std::string>{bearer(b_key)});
  if (phase != TenantPhase::alone)
    a.emplace(relay.base_url(), 10 * settings.b_rate, settings.seed + 1, std::vector<std::string>{bearer(a_key)});
  wait_until(b->start() + seconds(settings.phase_seconds), relay);
  TenantRun run;
  if (a) run.a = figures_of(a->stop(), settings.latency_ms);
  run.b = figures_of(b->stop(), settings.latency_ms);
  run.seconds = std::chrono::duration<double>(clock_type::now() - b->start()).count();
  check_running(relay);
  run.rate_limited = provider->refused();
  return run;
}

/// Prints the line of `phase`.
void print_tenant_phase(TenantPhase phase, const TenantRun& run) {
  std::printf("tenants %s: b P50 %.1f ms P95 %.1f ms (%zu served of %zu)", to_string(phase),
              bench::percentile(run.b.waits_ms, 50), bench::percentile(run.b.waits_ms, 95), run.b.served, run.b.sent);
  if (phase != TenantPhase::alone)
    std::printf("; a served %.1f/s (%zu of %zu), P50 %.1f ms P95 %.1f ms",
                static_cast<double>(run.a.served) / run.seconds, run.a.served, run.a.sent,
                bench::percentile(run.a.waits_ms, 50), bench::percentile(run.a.waits_ms, 95));
  std::printf("; non-200 b %zu (429 %zu)", run.b.refused + run.b.other, run.b.refused);
  if (phase != TenantPhase::alone) std::printf(", a %zu (429 %zu)", run.a.refused + run.a.other, run.a.refused);
  std::printf("; upstream 429s %lld\n", static_cast<long long>(run.rate_limited));
  std::fflush(stdout);
}

/// Runs the tenants scenario's three phases, each printed as it ends, then b's P95 in each against alone. Returns true
/// when a call was answered neither 200 nor 429.
bool run_tenants(const Settings& settings) {
  std::printf(
      "tenants: provider %lld RPM enforced per second (%.0f/s), %lld TPM, %d ms an answer; one llmretry-relay told "
      "the same limits, --max-wait %d ms, clients a and b in its --config; b %.2f calls/s, a %.1f/s (Poisson, "
      "interactive), %.0f s a phase, fresh processes each\n",
      static_cast<long long>(settings.rpm), static_cast<double>(settings.rpm) / 60,
      static_cast<long long>(settings.tpm), settings.latency_ms, settings.max_wait_ms, settings.b_rate,
      10 * settings.b_rate, settings.phase_seconds);
  std::fflush(stdout);
  const bench::TemporaryDirectory directory("llmretry-bench-priorities");
  const std::filesystem::path config = directory.path() / "relay.json";
  {
    std::ofstream out(config);
    out << R"({"clients": {"a": {"key_env": "A_KEY"}, "b": {"key_env": "B_KEY"}}})" << '\n';
    if (!out.flush()) throw std::runtime_error("cannot write " + config.string());
  }
  std::map<TenantPhase, double> p95;
  bool broke = false;
  for (const TenantPhase phase : {TenantPhase::alone, TenantPhase::fcfs, TenantPhase::tenants}) {
    const TenantRun run = run_tenant_phase(settings, phase, config);
    print_tenant_phase(phase, run);
    p95[phase] = bench::percentile(run.b.waits_ms, 95);
    broke = broke || run.a.other > 0 || run.b.other > 0;
  }
  const double alone = p95[TenantPhase::alone];
  if (alone > 0)
    std::printf("tenants: b's P95 as tenants / alone = %.2f (target <= 1.5); beside a first come, first served %.2f\n",
                p95[TenantPhase::tenants] / alone, p95[TenantPhase::fcfs] / alone);
  else std::printf("tenants: b's P95 alone is 0 ms: no ratio\n");
  if (broke) std::printf("FAILED: calls answered neither 200 nor 429 (see above)\n");
  std::fflush(stdout);
  return broke;
}

/// Runs the batch scenario's modes in `settings.modes`' order, each printed as it ends. Returns true when
/// batch lines were not answered.
bool run_batch(const Settings& settings) {
  bool broke = false;
  std::printf(
      "priorities: provider %lld RPM enforced per second (%.0f/s), %lld TPM, %d ms an answer; relay and %d workers "
      "(--concurrency %d) told the same limits, pacing through one redis-server; interactive calls %.1f/s "
      "(Poisson) through the relay; a batch of %d lines, its workers started after %.0f s\n",
      static_cast<long long>(settings.rpm), static_cast<double>(settings.rpm) / 60,
      static_cast<long long>(settings.tpm), settings.latency_ms, settings.workers, settings.concurrency, settings.rate,
      settings.lines, settings.start_after);
  std::fflush(stdout);
  const bench::TemporaryDirectory directory("llmretry-bench-priorities");
  const std::filesystem::path input = directory.path() / "input.jsonl";
  write_input(input, settings.lines);
  for (const std::string& mode : settings.modes) {
    const Run run = run_mode(settings, mode == "fcfs" ? "interactive" : "batch", input, directory.path());
    print_run(settings, mode, run);
    broke = broke || run.failed > 0 || run.answered != settings.lines;
  }
  if (broke) std::printf("FAILED: batch lines were not answered (see above)\n");
  return broke;
}

}  // namespace

int main(int argc, char** argv) {
  Settings settings;
#ifdef LLMRETRY_RELAY_PROGRAM
  settings.relay = LLMRETRY_RELAY_PROGRAM;
#endif
#ifdef LLMRETRY_BATCH_PROGRAM
  settings.batch = LLMRETRY_BATCH_PROGRAM;
#endif
  bool small = false;
  CLI::App app{
      "Interactive chat completions through llmretry-relay beside an llmretry-batch fleet on one quota shared "
      "through redis-server, against the loopback provider: the workers first come, first served (fcfs: "
      "--priority interactive), then yielding (prioritized: --priority batch). Prints per mode the interactive "
      "calls' wait before and during the batch, the batch's rate, and the provider's 429s. --scenario tenants: "
      "two clients of one relay, a sending ten times b's rate: b's wait alone, beside a first come first served, "
      "and as tenants.",
      "llmretry-bench-priorities"};
  app.add_option("--relay", settings.relay, "the llmretry-relay program");
  app.add_option("--batch-program", settings.batch, "the llmretry-batch program");
  app.add_option("--redis-server", settings.redis_server, "the redis-server program (default: redis-server in PATH)");
  app.add_option("--modes", settings.modes, "which to run, comma-separated: fcfs, prioritized (default both)")
      ->delimiter(',')
      ->check(CLI::IsMember({"fcfs", "prioritized"}));
  app.add_option("--rpm", settings.rpm,
                 "requests per minute the provider enforces per second, given to the relay and workers (default 1200)")
      ->check(CLI::Range(std::int64_t{60}, std::int64_t{1'000'000}));
  app.add_option("--tpm", settings.tpm, "tokens per minute, idem (default 10000000)")
      ->check(CLI::Range(std::int64_t{10'000}, std::int64_t{1'000'000'000'000}));
  app.add_option("--latency", settings.latency_ms, "milliseconds the provider takes per answer (default 200)")
      ->check(CLI::Range(0, 60'000));
  app.add_option("--rate", settings.rate, "interactive calls per second, a Poisson process (default 6)")
      ->check(CLI::Range(0.1, 1000.0));
  app.add_option("--lines", settings.lines, "lines of the batch (default 1500; --small: 150)")
      ->check(CLI::Range(1, 1'000'000));
  app.add_option("--workers", settings.workers, "llmretry-batch work processes (default 3)")->check(CLI::Range(1, 64));
  app.add_option("--concurrency", settings.concurrency, "each worker's --concurrency (default 8)")
      ->check(CLI::Range(1, 256));
  app.add_option("--start-after", settings.start_after,
                 "seconds of interactive calls alone before the workers start (default 15; --small: 3)")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--batch-timeout", settings.batch_timeout,
                 "seconds the workers are given to end the batch, else a failure (default 900)")
      ->check(CLI::Range(1, 86'400));
  app.add_option("--seed", settings.seed, "of the interactive calls' arrivals (default 1)");
  app.add_option("--scenario", settings.scenario,
                 "batch (default: the relay's interactive calls beside a batch, in --modes) or tenants (two clients "
                 "of one relay, a sending ten times b's rate: b alone, both first come first served, both as tenants)")
      ->check(CLI::IsMember({"batch", "tenants"}));
  app.add_option("--b-rate", settings.b_rate,
                 "tenants: client b's calls per second, a Poisson process; a sends ten times as many (default 2.5)")
      ->check(CLI::Range(0.1, 100.0));
  app.add_option("--phase-seconds", settings.phase_seconds,
                 "tenants: seconds each phase sends (default 60; --small: 5)")
      ->check(CLI::Range(1.0, 3600.0));
  app.add_option("--max-wait", settings.max_wait_ms,
                 "tenants: the relay's --max-wait in ms, the longest a call waits for capacity before a 429 "
                 "(default 2000)")
      ->check(CLI::Range(0, 3'600'000));
  app.add_flag("--small", small,
               "a short run (both modes, or the three phases, in under a minute): --lines 150 --start-after 3 "
               "--phase-seconds 5, unless given");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& error) {
    std::cerr << "llmretry-bench-priorities: " << error.what() << " (see --help)\n";
    return 2;
  }
  if (small) {
    if (app.count("--lines") == 0) settings.lines = 150;
    if (app.count("--start-after") == 0) settings.start_after = 3;
    if (app.count("--phase-seconds") == 0) settings.phase_seconds = 5;
  }
  const bool tenants = settings.scenario == "tenants";
  if (settings.relay.empty() || (settings.batch.empty() && !tenants)) {
    std::cerr << "llmretry-bench-priorities: "
              << (settings.relay.empty() ? "pass --relay PATH (the llmretry-relay program)"
                                         : "pass --batch-program PATH (the llmretry-batch program)")
              << " (see --help)\n";
    return 2;
  }
  struct sigaction stop {};
  stop.sa_handler = on_stop_signal;  // no SA_RESTART: a wait in progress ends at once
  sigemptyset(&stop.sa_mask);
  sigaction(SIGINT, &stop, nullptr);
  sigaction(SIGTERM, &stop, nullptr);
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    std::cerr << "llmretry-bench-priorities: curl_global_init failed\n";
    return 1;
  }
  bool broke = false;
  try {
    broke = tenants ? run_tenants(settings) : run_batch(settings);
  } catch (const std::exception& error) {
    std::fflush(stdout);
    std::cerr << "llmretry-bench-priorities: " << error.what() << '\n';
    broke = true;
  }
  curl_global_cleanup();
  return broke ? 1 : 0;
}
