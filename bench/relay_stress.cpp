// The relay under load, beside the provider it relays to: the loopback provider runs in this process (each
// answer after a latency), llmretry-relay runs as a child process in front of it, and libcurl's multi
// interface fires the same requests, many at once from one thread, at the provider directly and through
// the relay. Two scenarios: a provider without limits (the relay's overhead and throughput), and a provider
// with per-minute limits hit by a burst (the 429s the clients see, directly and through a relay started with
// the same limits). Prints each run's figures and the targets met or missed; exits non-zero only when
// something broke (the relay did not start, requests failed otherwise than with a 429), never for a target.
#include <llmretry/loopback/provider.hpp>

#include <curl/curl.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;  // NOLINT(readability-redundant-declaration,*-avoid-non-const-global-variables): POSIX

namespace {

using clock_type = std::chrono::steady_clock;
using llmretry::testing::LoopbackLimits;
using llmretry::testing::LoopbackProvider;

/// What the clients of one run saw.
struct Figures {
  int count = 0;
  int successes = 0;                 ///< 2xx
  int rate_limited = 0;              ///< a final 429: not recovered
  int other = 0;                     ///< any other status, or no answer
  std::string first_other;           ///< what the first other failure was
  std::vector<double> latencies_ms;  ///< of every request, sorted
  double seconds = 0;                ///< from the first request sent to the last answer
};

/// Returns the `p`th percentile (nearest rank) of the sorted `values`, or 0 when there are none.
double percentile(const std::vector<double>& values, double p) {
  if (values.empty()) return 0;
  const auto rank = static_cast<std::size_t>(std::ceil(p / 100 * static_cast<double>(values.size())));
  return values[std::min(values.size() - 1, rank == 0 ? 0 : rank - 1)];
}

std::size_t discard(char* /*data*/, std::size_t size, std::size_t count, void* /*user*/) { return size * count; }

/// Sends `count` chat completions to `base_url`, `parallel` at once, with one libcurl multi handle in this
/// thread (a request is sent as soon as one before it is answered). Each request times out after `timeout`.
Figures fire(const std::string& base_url, int count, int parallel, std::chrono::milliseconds timeout) {
  static const std::string body =
      R"({"model":"loopback","messages":[{"role":"user","content":"Say hello."}],"max_tokens":16})";
  const std::string url = base_url + "/v1/chat/completions";
  struct Transfer {
    CURL* easy = nullptr;
    clock_type::time_point sent;
  };
  Figures figures;
  figures.count = count;
  figures.latencies_ms.reserve(static_cast<std::size_t>(count));
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  CURLM* multi = curl_multi_init();
  if (headers == nullptr || multi == nullptr) throw std::runtime_error("libcurl could not be set up");
  curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, static_cast<long>(parallel));
  std::vector<Transfer> transfers(static_cast<std::size_t>(std::min(count, parallel)));
  for (Transfer& transfer : transfers) {
    transfer.easy = curl_easy_init();
    if (transfer.easy == nullptr) throw std::runtime_error("libcurl could not be set up");
    curl_easy_setopt(transfer.easy, CURLOPT_URL, url.c_str());
    curl_easy_setopt(transfer.easy, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(transfer.easy, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(transfer.easy, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    curl_easy_setopt(transfer.easy, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(transfer.easy, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
    curl_easy_setopt(transfer.easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(transfer.easy, CURLOPT_PRIVATE, &transfer);
  }
  int sent = 0, answered = 0;
  const auto send = [&](Transfer& transfer) {
    transfer.sent = clock_type::now();
    curl_multi_add_handle(multi, transfer.easy);
    ++sent;
  };
  const auto start = clock_type::now();
  for (Transfer& transfer : transfers) send(transfer);
  while (answered < count) {
    int running = 0;
    curl_multi_perform(multi, &running);
    int left = 0;
    while (CURLMsg* message = curl_multi_info_read(multi, &left)) {
      if (message->msg != CURLMSG_DONE) continue;
      const CURLcode result = message->data.result;
      CURL* easy = message->easy_handle;
      Transfer* transfer = nullptr;
      curl_easy_getinfo(easy, CURLINFO_PRIVATE, &transfer);
      const std::chrono::duration<double, std::milli> latency = clock_type::now() - transfer->sent;
      figures.latencies_ms.push_back(latency.count());
      long status = 0;
      curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
      if (result == CURLE_OK && status >= 200 && status < 300) {
        ++figures.successes;
      } else if (result == CURLE_OK && status == 429) {
        ++figures.rate_limited;
      } else {
        if (figures.other++ == 0)
          figures.first_other = result != CURLE_OK ? curl_easy_strerror(result) : "HTTP " + std::to_string(status);
      }
      curl_multi_remove_handle(multi, easy);
      ++answered;
      if (sent < count) send(*transfer);
    }
    if (answered < count) curl_multi_poll(multi, nullptr, 0, 100, nullptr);
  }
  figures.seconds = std::chrono::duration<double>(clock_type::now() - start).count();
  for (Transfer& transfer : transfers) curl_easy_cleanup(transfer.easy);
  curl_multi_cleanup(multi);
  curl_slist_free_all(headers);
  std::sort(figures.latencies_ms.begin(), figures.latencies_ms.end());
  return figures;
}

/// llmretry-relay (or a program started the same way) as a child process in a process group of its own:
/// started with `arguments` and OPENAI_API_KEY set, its address read from the line it prints when it
/// accepts connections. The destructor ends the group (SIGTERM, then SIGKILL) and waits for it; on Linux
/// the child is also killed if this process dies first.
class Relay {
 public:
  /// Starts `program`. Throws std::runtime_error when it cannot start or does not print
  /// "listening on http://HOST:PORT" within `startup`.
  Relay(const std::string& program, const std::vector<std::string>& arguments, std::chrono::milliseconds startup) {
    std::vector<std::string> words{program};
    words.insert(words.end(), arguments.begin(), arguments.end());
    std::vector<char*> argv;
    for (std::string& word : words) argv.push_back(word.data());
    argv.push_back(nullptr);
    std::vector<std::string> variables{"OPENAI_API_KEY=sk-loopback"};
    for (char** variable = environ; *variable != nullptr; ++variable)
      if (std::strncmp(*variable, "OPENAI_API_KEY=", 15) != 0) variables.emplace_back(*variable);
    std::vector<char*> envp;
    for (std::string& variable : variables) envp.push_back(variable.data());
    envp.push_back(nullptr);

    int out[2];
    if (::pipe(out) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    pid_ = ::fork();
    if (pid_ < 0) {
      ::close(out[0]);
      ::close(out[1]);
      throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    }
    if (pid_ == 0) {  // the child: only async-signal-safe calls until exec
      ::setpgid(0, 0);
#if defined(__linux__)
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
      ::dup2(out[1], STDOUT_FILENO);
      ::close(out[0]);
      ::close(out[1]);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    ::setpgid(pid_, pid_);  // also here: whichever runs first, the group exists before it is signalled
    ::close(out[1]);
    output_ = out[0];
    try {
      base_url_ = read_address(startup);
    } catch (...) {
      stop();
      throw;
    }
    // The rest of what it prints is read and dropped, so that a full pipe never blocks it.
    drain_ = std::thread([fd = output_] {
      char buffer[4096];
      while (::read(fd, buffer, sizeof buffer) > 0) {}
    });
  }
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;
  Relay(Relay&&) = delete;
  Relay& operator=(Relay&&) = delete;
  ~Relay() { stop(); }

  /// Returns the address it printed, such as "http://127.0.0.1:41234".
  [[nodiscard]] const std::string& base_url() const noexcept { return base_url_; }

 private:
  /// Reads the first line of the child's output. Returns the address in it.
  std::string read_address(std::chrono::milliseconds startup) const {
    const std::string prefix = "listening on ";
    std::string line;
    const auto until = clock_type::now() + startup;
    char c = 0;
    while (line.size() < 1024) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clock_type::now());
      pollfd ready{output_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&ready, 1, static_cast<int>(left.count())) <= 0)
        throw std::runtime_error("the relay printed no address within " + std::to_string(startup.count()) + " ms");
      if (::read(output_, &c, 1) != 1)
        throw std::runtime_error("the relay ended before it printed its address" +
                                 (line.empty() ? std::string() : " (it printed \"" + line + "\")"));
      if (c == '\n') break;
      line += c;
    }
    if (line.rfind(prefix + "http://", 0) != 0)
      throw std::runtime_error("the relay printed \"" + line + "\", not \"listening on http://HOST:PORT\"");
    return line.substr(prefix.size());
  }

  /// Ends the child's group: SIGTERM, SIGKILL after 2 s, and waits for the child.
  void stop() noexcept {
    if (pid_ > 0) {
      ::kill(-pid_, SIGTERM);
      int status = 0;
      const auto until = clock_type::now() + std::chrono::seconds(2);
      while (::waitpid(pid_, &status, WNOHANG) == 0) {
        if (clock_type::now() >= until) {
          ::kill(-pid_, SIGKILL);
          ::waitpid(pid_, &status, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      ::kill(-pid_, SIGKILL);  // whatever else is left in its group
      pid_ = -1;
    }
    if (drain_.joinable()) drain_.join();  // the pipe's writers are gone: the read ends
    if (output_ >= 0) ::close(output_);
    output_ = -1;
  }

  pid_t pid_ = -1;
  int output_ = -1;
  std::string base_url_;
  std::thread drain_;
};

void print_heading() {
  std::printf("  %-8s %7s %7s %8s %8s %8s %8s %9s %6s %6s\n", "", "count", "ok", "P50 ms", "P95 ms", "P99 ms", "max ms",
              "req/s", "429", "other");
}

void print_row(const char* name, const Figures& f) {
  const auto& l = f.latencies_ms;
  std::printf("  %-8s %7d %7d %8.2f %8.2f %8.2f %8.2f %9.0f %6d %6d\n", name, f.count, f.successes, percentile(l, 50),
              percentile(l, 95), percentile(l, 99), l.empty() ? 0.0 : l.back(),
              f.seconds > 0 ? f.count / f.seconds : 0.0, f.rate_limited, f.other);
  if (f.other > 0) std::printf("  %-8s first other failure: %s\n", "", f.first_other.c_str());
}

const char* verdict(bool met) { return met ? "target met" : "target missed"; }

/// What the command line sets.
struct Settings {
  std::string relay;
  int latency_ms = 20;
  int requests = 5000;
  int parallel = 64;
  int limited_requests = 500;
  int limited_parallel = 500;
  std::int64_t rpm = 12000;
  std::int64_t tpm = 1'200'000;
  int timeout_ms = 30000;
};

/// The figures of one scenario: directly, then through the relay (nullopt when there is none).
struct Outcome {
  Figures direct;
  std::optional<Figures> relayed;
};

/// Runs one scenario: `count` requests, `parallel` at once, sent to a provider limited by `limits`, then to
/// another such provider (its buckets full too) through a relay started with `relay_arguments`.
/// Throws std::runtime_error when the relay does not start.
Outcome run(const Settings& settings, const LoopbackLimits& limits, int count, int parallel,
            const std::vector<std::string>& relay_arguments) {
  const std::chrono::milliseconds timeout{settings.timeout_ms};
  const auto threads = static_cast<std::size_t>(parallel) + 16;  // a connection each, and a few to spare
  print_heading();
  Outcome outcome;
  {
    LoopbackProvider provider(0, threads);
    provider.enforce(limits);
    outcome.direct = fire(provider.base_url(), count, parallel, timeout);
    print_row("direct", outcome.direct);
  }
  if (settings.relay.empty()) {
    std::printf("  %-8s not run: pass --relay PATH (the llmretry-relay program)\n", "relay");
    return outcome;
  }
  LoopbackProvider provider(0, threads);
  provider.enforce(limits);
  std::vector<std::string> arguments{"--listen", "127.0.0.1:0", "--upstream", provider.base_url()};
  arguments.insert(arguments.end(), relay_arguments.begin(), relay_arguments.end());
  const Relay relay(settings.relay, arguments, std::chrono::seconds(10));
  outcome.relayed = fire(relay.base_url(), count, parallel, timeout);
  print_row("relay", *outcome.relayed);
  return outcome;
}

/// Raises the limit of open files to its hard limit: each request at once holds a socket at both ends.
void allow_open_files() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Settings settings;
#ifdef LLMRETRY_RELAY_PROGRAM
  settings.relay = LLMRETRY_RELAY_PROGRAM;
#endif
  CLI::App app{
      "Fires chat completions at the loopback provider directly and through llmretry-relay, many at "
      "once, and prints latency percentiles, requests per second and 429s against the relay's targets.",
      "llmretry-bench-relay"};
  app.add_option("--relay", settings.relay, "the llmretry-relay program (needed for the relay's figures)");
  app.add_option("--latency", settings.latency_ms, "milliseconds the provider takes per answer (default 20)")
      ->check(CLI::Range(0, 60'000));
  app.add_option("--requests", settings.requests, "requests of the unlimited scenario (default 5000)")
      ->check(CLI::Range(1, 10'000'000));
  app.add_option("--parallel", settings.parallel, "of them at once (default 64)")->check(CLI::Range(1, 10'000));
  app.add_option("--limited-requests", settings.limited_requests, "requests of the rate-limited scenario (default 500)")
      ->check(CLI::Range(1, 10'000'000));
  app.add_option("--limited-parallel", settings.limited_parallel, "of them at once (default 500)")
      ->check(CLI::Range(1, 10'000));
  app.add_option("--rpm", settings.rpm,
                 "the limited provider's requests per minute, given to the relay too (default 12000)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1'000'000'000}));
  app.add_option("--tpm", settings.tpm, "its tokens per minute, given to the relay too (default 1200000)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1'000'000'000'000}));
  app.add_option("--timeout", settings.timeout_ms, "milliseconds before a request is given up (default 30000)")
      ->check(CLI::Range(1, 600'000));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& error) {
    std::cerr << "llmretry-bench-relay: " << error.what() << " (see --help)\n";
    return 2;
  }
  allow_open_files();
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    std::cerr << "llmretry-bench-relay: curl_global_init failed\n";
    return 1;
  }
  bool broke = false;
  try {
    std::printf("relay stress: provider answers after %d ms; relay: %s\n", settings.latency_ms,
                settings.relay.empty() ? "none (pass --relay PATH)" : settings.relay.c_str());

    LoopbackLimits unlimited;  // limits no run reaches: the provider only adds its latency
    unlimited.requests_per_minute = 1'000'000'000;
    unlimited.tokens_per_minute = 1'000'000'000'000;
    unlimited.latency = std::chrono::milliseconds(settings.latency_ms);
    std::printf("\n1. provider without limits: %d requests, %d at once\n", settings.requests, settings.parallel);
    const Outcome open = run(settings, unlimited, settings.requests, settings.parallel, {});

    LoopbackLimits limited = unlimited;
    limited.requests_per_minute = settings.rpm;
    limited.tokens_per_minute = settings.tpm;
    const std::vector<std::string> limits{"--rpm", std::to_string(settings.rpm), "--tpm", std::to_string(settings.tpm)};
    std::printf(
        "\n2. provider limited to %lld requests and %lld tokens per minute (a second's worth at once): %d "
        "requests, %d at once; relay started with the same limits\n",
        static_cast<long long>(settings.rpm), static_cast<long long>(settings.tpm), settings.limited_requests,
        settings.limited_parallel);
    const Outcome burst = run(settings, limited, settings.limited_requests, settings.limited_parallel, limits);

    std::printf("\ntargets\n");
    if (open.relayed) {
      const double overhead = percentile(open.relayed->latencies_ms, 50) - percentile(open.direct.latencies_ms, 50);
      const double throughput = open.relayed->seconds > 0 ? open.relayed->count / open.relayed->seconds : 0.0;
      std::printf("  overhead at P50 (relay - direct, scenario 1): %.2f ms, target <= 1 ms: %s\n", overhead,
                  verdict(overhead <= 1.0));
      std::printf("  throughput through the relay (scenario 1): %.0f req/s, target >= 1800 req/s: %s\n", throughput,
                  verdict(throughput >= 1800));
    } else {
      std::printf("  overhead at P50, throughput: not measured (no relay)\n");
    }
    if (burst.relayed) {
      std::printf("  unrecovered 429s through the relay, %d at once (scenario 2): %d, target 0: %s\n",
                  settings.limited_parallel, burst.relayed->rate_limited, verdict(burst.relayed->rate_limited == 0));
    } else {
      std::printf("  unrecovered 429s through the relay: not measured (no relay)\n");
    }
    for (const Outcome* outcome : {&open, &burst})
      broke = broke || outcome->direct.other > 0 || (outcome->relayed && outcome->relayed->other > 0);
    if (broke) std::printf("\nFAILED: requests failed otherwise than with a 429 (see \"other\")\n");
  } catch (const std::exception& error) {
    std::fflush(stdout);
    std::cerr << "llmretry-bench-relay: " << error.what() << '\n';
    broke = true;
  }
  curl_global_cleanup();
  return broke ? 1 : 0;
}
