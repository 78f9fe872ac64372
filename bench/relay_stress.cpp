// The relay under load, beside the provider it relays to: llmretry-relay runs as a child process in front
// of a provider, and clients fire the same requests, many at once from one thread, at the provider directly
// and through the relay. Four scenarios: an event-loop provider (this program again, as a child:
// bench/stream_server.hpp) without limits, each answer after a latency (the relay's overhead and
// throughput); the loopback provider (in this process) with per-minute limits hit by a burst (the 429s the
// clients see, directly and through a relay started with the same limits); then the event-loop provider
// answering at once (the relay's throughput and its own cost per request), and streaming (thousands of long
// streams at once: how many end whole, the relay's peak memory and threads), over HTTP/2 and TLS as providers
// serve them (bench/h2_stream_server.hpp) or over HTTP/1.1. Prints each run's figures and the targets met or missed;
// exits non-zero only when something broke (the relay did not start, requests failed otherwise than with a
// 429), never for a target.
#include <llmretry/curl/async.hpp>
#include <llmretry/curl/curl.hpp>
#include <llmretry/http/sse.hpp>
#include <llmretry/http/stream.hpp>
#include <llmretry/loopback/provider.hpp>

#include <curl/curl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_support.hpp"
#if LLMRETRY_BENCH_HTTP2
#include "h2_stream_server.hpp"
#endif
#include "stream_server.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
using bench::Child;
using bench::discard;
using bench::percentile;
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

/// Opens `count` streamed chat completions to `base_url` all at once, from this thread (one
/// curl::AsyncClient on one io_context), each given up after `timeout`. A success is a stream that ended
/// whole (its `data: [DONE]` arrived); its latency is the time from the start to its end. Calls `sample()`
/// every 100 ms while they run. `ca_file`: the authority of an https provider; `connections`: the most
/// connections to it (unset: no limit).
Figures stream_at_once(const std::string& base_url, int count, std::chrono::milliseconds timeout,
                       const std::function<void()>& sample, const std::string& ca_file = {},
                       std::optional<std::size_t> connections = std::nullopt) {
  const llmretry::curl::Request request{
      "POST",
      base_url + "/v1/chat/completions",
      {{"Content-Type", "application/json"}},
      R"({"model":"loopback","stream":true,"messages":[{"role":"user","content":"Say hello."}]})"};
  llmretry::curl::Options options;
  options.connect_timeout = timeout;
  options.timeout = timeout;
  options.accept_encoding = "identity";
  options.ca_file = ca_file;
  struct Stream {
    std::function<void(const llmretry::SseEvent&)> on_event;
    llmretry::StreamGuard guard;
    bool whole = false;  ///< its data: [DONE] arrived
  };
  std::vector<Stream> streams(static_cast<std::size_t>(count));
  Figures figures;
  figures.count = count;
  figures.latencies_ms.reserve(streams.size());
  boost::asio::io_context io{1};
  llmretry::curl::ClientOptions held;
  held.max_host_connections = connections;
  llmretry::curl::AsyncClient client(io.get_executor(), held);
  const auto start = clock_type::now();
  const auto ended = [&figures, start](const Stream& stream, const std::exception_ptr& error) {
    const std::chrono::duration<double, std::milli> latency = clock_type::now() - start;
    figures.latencies_ms.push_back(latency.count());
    std::string failure = "a stream ended without data: [DONE]";
    if (error) {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        const llmretry::curl::Response* response = llmretry::curl::response_of(e);
        if (response != nullptr && response->status == 429) {
          ++figures.rate_limited;
          return;
        }
        failure = e.what();
      }
    } else if (stream.whole) {
      ++figures.successes;
      return;
    }
    if (figures.other++ == 0) figures.first_other = failure;
  };
  for (Stream& stream : streams) {
    stream.on_event = [&stream](const llmretry::SseEvent& event) {
      stream.whole = stream.whole || event.data == "[DONE]";
    };
    client.async_perform(
        request, options, {}, &stream.on_event, &stream.guard, std::nullopt,
        [&ended, &stream](const std::exception_ptr& error, const llmretry::curl::Response&) { ended(stream, error); });
  }
  boost::asio::steady_timer sampler(io);
  std::function<void()> next_sample = [&] {
    sampler.expires_after(std::chrono::milliseconds(100));
    sampler.async_wait([&](boost::system::error_code error) {
      if (error || figures.latencies_ms.size() == streams.size()) return;
      sample();
      next_sample();
    });
  };
  sample();
  next_sample();
  io.run();
  std::sort(figures.latencies_ms.begin(), figures.latencies_ms.end());
  figures.seconds = figures.latencies_ms.empty() ? 0.0 : figures.latencies_ms.back() / 1000;
  return figures;
}

/// Returns the number after `field` (such as "VmHWM:") in /proc/`pid`/status, or -1 when there is none.
long long status_field(pid_t pid, const std::string& field) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind(field, 0) == 0) return std::atoll(line.c_str() + field.size());
  return -1;
}

/// Returns how many files process `pid` has open (the entries of /proc/`pid`/fd), or -1 when unknown.
int open_files(pid_t pid) {
  std::error_code error;
  int count = 0;
  for (std::filesystem::directory_iterator at("/proc/" + std::to_string(pid) + "/fd", error), end; !error && at != end;
       at.increment(error))
    ++count;
  return error ? -1 : count;
}

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

/// Says that the relay's figures of a run were not measured: there is no relay to run.
void print_no_relay() { std::printf("  %-8s not run: pass --relay PATH (the llmretry-relay program)\n", "relay"); }

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
  int instant_requests = 20000;
  int instant_parallel = 32;
  int streams = 10000;
  int stream_ms = 2000;
  int stream_events = 10;
  std::vector<std::string> scenarios{"unlimited", "limited", "instant", "streams"};
  /// How scenario 4's provider serves: http2 (over TLS), when this build has it, or http1.
  std::string streams_upstream = LLMRETRY_BENCH_HTTP2 ? "http2" : "http1";
  bool serve_upstream = false;  ///< this process is the event-loop provider of scenarios 1, 3 and 4
  std::string certificate;      ///< as that provider: serve HTTP/2 over TLS, its certificate written here

  [[nodiscard]] bool runs(const std::string& scenario) const {
    return std::find(scenarios.begin(), scenarios.end(), scenario) != scenarios.end();
  }
};

/// The figures of one scenario: directly, then through the relay (nullopt when there is none).
struct Outcome {
  Figures direct;
  std::optional<Figures> relayed;
};

/// Scenario 2: `count` requests, `parallel` at once, sent to the loopback provider limited by `limits`, then
/// to another such provider (its buckets full too) through a relay started with `relay_arguments`.
/// Throws std::runtime_error when the relay does not start.
Outcome run_limited(const Settings& settings, const LoopbackLimits& limits, int count, int parallel,
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
    print_no_relay();
    return outcome;
  }
  LoopbackProvider provider(0, threads);
  provider.enforce(limits);
  std::vector<std::string> arguments{"--listen", "127.0.0.1:0", "--upstream", provider.base_url()};
  arguments.insert(arguments.end(), relay_arguments.begin(), relay_arguments.end());
  const Child relay("relay", settings.relay, arguments, std::chrono::seconds(10));
  outcome.relayed = fire(relay.base_url(), count, parallel, timeout);
  print_row("relay", *outcome.relayed);
  return outcome;
}

/// The limit of open files of this process and its children.
struct FileLimit {
  long long files = 0;        ///< each process may open so many files; 0: unknown
  std::string short_because;  ///< why it is lower than asked; empty: it is not
};

/// Raises the limit of open files (the soft limit, and the hard one when it is lower and this process may
/// raise it) to `wanted`, else to the hard limit: each request at once holds a socket at both ends, two in the
/// relay. The children started afterwards inherit it.
FileLimit allow_open_files(long long wanted) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return {0, std::string("getrlimit: ") + std::strerror(errno)};
  const auto want = static_cast<rlim_t>(wanted);
  std::string short_because;
  if (limit.rlim_max != RLIM_INFINITY && limit.rlim_max < want) {
    const rlimit raised{want, want};
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) return {wanted, ""};
    short_because = "the hard limit of open files, " + std::to_string(limit.rlim_max) +
                    ", cannot be raised here: " + std::strerror(errno);
  }
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max == RLIM_INFINITY ? std::max(limit.rlim_cur, want) : limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
    ::getrlimit(RLIMIT_NOFILE, &limit);
  }
  return {static_cast<long long>(limit.rlim_cur), short_because};
}

/// Starts this program again as the event-loop provider of scenarios 1, 3 and 4 (see serve_upstream), each
/// answer not streamed after `latency`: over HTTP/2 and TLS when `certificate` is set (where it writes its
/// certificate), else HTTP/1.1.
std::unique_ptr<Child> start_upstream(const Settings& settings,
                                      std::chrono::milliseconds latency = std::chrono::milliseconds::zero(),
                                      const std::string& certificate = {}) {
  std::vector<std::string> arguments{"--serve-upstream",
                                     "--stream-ms",
                                     std::to_string(settings.stream_ms),
                                     "--stream-events",
                                     std::to_string(settings.stream_events),
                                     "--latency",
                                     std::to_string(latency.count())};
  if (!certificate.empty()) arguments.insert(arguments.end(), {"--certificate", certificate});
  return std::make_unique<Child>("provider", "/proc/self/exe", arguments, std::chrono::seconds(10));
}

/// Starts the relay in front of `upstream` with `arguments` added, or returns null when there is none.
std::unique_ptr<Child> start_relay(const Settings& settings, const std::string& upstream,
                                   const std::vector<std::string>& arguments) {
  if (settings.relay.empty()) return nullptr;
  std::vector<std::string> words{"--listen", "127.0.0.1:0", "--upstream", upstream};
  words.insert(words.end(), arguments.begin(), arguments.end());
  return std::make_unique<Child>("relay", settings.relay, words, std::chrono::seconds(10));
}

/// Scenario 1: `settings.requests` requests, `settings.parallel` at once, to the event-loop provider, which
/// answers each after `settings.latency_ms` (directly, then through the relay).
Outcome run_unlimited(const Settings& settings) {
  const std::chrono::milliseconds timeout{settings.timeout_ms};
  const auto upstream = start_upstream(settings, std::chrono::milliseconds{settings.latency_ms});
  print_heading();
  Outcome outcome;
  outcome.direct = fire(upstream->base_url(), settings.requests, settings.parallel, timeout);
  print_row("direct", outcome.direct);
  const auto relay = start_relay(settings, upstream->base_url(), {});
  if (!relay) {
    print_no_relay();
    return outcome;
  }
  outcome.relayed = fire(relay->base_url(), settings.requests, settings.parallel, timeout);
  print_row("relay", *outcome.relayed);
  return outcome;
}

/// Scenario 3: requests one at a time, then many at once, to a provider that answers at once (directly,
/// then through the relay).
struct Instant {
  Figures direct_one, direct_many;
  std::optional<Figures> relayed_one, relayed_many;
};

Instant run_instant(const Settings& settings) {
  const std::chrono::milliseconds timeout{settings.timeout_ms};
  const int one_by_one = std::min(2000, settings.instant_requests);
  const auto upstream = start_upstream(settings);
  Instant outcome;
  print_heading();
  std::printf("  one at a time\n");
  outcome.direct_one = fire(upstream->base_url(), one_by_one, 1, timeout);
  print_row("direct", outcome.direct_one);
  const auto relay = start_relay(settings, upstream->base_url(), {});
  if (relay) {
    outcome.relayed_one = fire(relay->base_url(), one_by_one, 1, timeout);
    print_row("relay", *outcome.relayed_one);
  }
  std::printf("  %d at once\n", settings.instant_parallel);
  outcome.direct_many = fire(upstream->base_url(), settings.instant_requests, settings.instant_parallel, timeout);
  print_row("direct", outcome.direct_many);
  if (!relay) {
    print_no_relay();
    return outcome;
  }
  outcome.relayed_many = fire(relay->base_url(), settings.instant_requests, settings.instant_parallel, timeout);
  print_row("relay", *outcome.relayed_many);
  const auto& many = *outcome.relayed_many;
  std::printf("instant: %.0f requests/s through the relay, P50 overhead %.2f ms\n",
              many.seconds > 0 ? many.count / many.seconds : 0.0,
              percentile(outcome.relayed_one->latencies_ms, 50) - percentile(outcome.direct_one.latencies_ms, 50));
  return outcome;
}

/// Scenario 4: long streams all at once, directly and through the relay, with the relay's peak memory and
/// threads.
struct Streams {
  int asked = 0;
  Figures direct;
  std::optional<Figures> relayed;
  long long relay_peak_rss_kb = -1;  ///< VmHWM
  long long relay_threads = -1;      ///< the most seen while the streams ran
};

Streams run_streams(const Settings& settings, const FileLimit& files) {
  const std::chrono::milliseconds timeout{settings.timeout_ms};
  Streams outcome;
  outcome.asked = settings.streams;
  // Over HTTP/2 a connection carries up to 100 streams (libcurl's default): the clients and the relay hold a
  // fifth more connections than the streams need, so that none waits for room.
  const bool http2 = settings.streams_upstream == "http2";
  if (http2 && (curl_version_info(CURLVERSION_NOW)->features & CURL_VERSION_HTTP2) == 0)
    throw std::runtime_error("the libcurl of this build has no HTTP/2: run the streams with --streams-upstream http1");
  const bench::TemporaryDirectory directory("llmretry-bench-relay");
  const std::string certificate = http2 ? (directory.path() / "certificate.pem").string() : std::string();
  // At least one for each of the relay's event loops (one per core), each holding connections of its own.
  std::optional<std::size_t> connections;
  if (http2)
    connections = std::max<std::size_t>(static_cast<std::size_t>(settings.streams + 99) / 100 * 6 / 5 + 2,
                                        std::thread::hardware_concurrency());
  const auto upstream = start_upstream(settings, std::chrono::milliseconds::zero(), certificate);
  const std::string above = std::to_string(settings.streams + 100);
  std::vector<std::string> relay_arguments{"--max-connections", above, "--max-requests", above};
  if (http2)
    relay_arguments.insert(relay_arguments.end(),
                           {"--upstream-ca", certificate, "--upstream-connections", std::to_string(*connections)});
  const auto relay = start_relay(settings, upstream->base_url(), relay_arguments);
  // As many streams as every process has files for: one socket each here and in the provider, and in the relay
  // its client's, and over HTTP/1.1 its upstream's too.
  int count = settings.streams;
  constexpr int spare = 64;  // files a process may open besides its streams' sockets
  const auto fit = [&](pid_t pid, int sockets) {
    const int open = open_files(pid);
    if (files.files > 0 && open >= 0)
      count = std::min(
          count, static_cast<int>(std::max(
                     0LL, (files.files - open - spare - static_cast<long long>(connections.value_or(0))) / sockets)));
  };
  fit(::getpid(), 1);
  fit(upstream->pid(), 1);
  if (relay) fit(relay->pid(), http2 ? 1 : 2);
  if (count < settings.streams)
    std::printf(
        "  only %d of the %d streams fit: a process may open %lld files%s%s%s\n", count, settings.streams, files.files,
        http2 ? "" : ", and the relay holds two sockets a stream over HTTP/1.1 (its client's and its upstream's)",
        files.short_because.empty() ? "" : "; ", files.short_because.c_str());
  if (count < 1) throw std::runtime_error("no stream fits in the limit of open files");
  print_heading();
  outcome.direct = stream_at_once(
      upstream->base_url(), count, timeout, [] {}, certificate, connections);
  print_row("direct", outcome.direct);
  if (!relay) {
    print_no_relay();
    return outcome;
  }
  outcome.relayed = stream_at_once(relay->base_url(), count, timeout, [&] {
    outcome.relay_threads = std::max(outcome.relay_threads, status_field(relay->pid(), "Threads:"));
  });
  outcome.relay_peak_rss_kb = status_field(relay->pid(), "VmHWM:");
  print_row("relay", *outcome.relayed);
  std::printf("streams: %d at once, %d ok, relay peak RSS %lld MB, %lld threads\n", count, outcome.relayed->successes,
              outcome.relay_peak_rss_kb / 1024, outcome.relay_threads);
  return outcome;
}

/// The event-loop provider of scenarios 1, 3 and 4, in this process (started by start_upstream): prints its
/// address, serves until SIGTERM or SIGINT.
int serve_upstream(const Settings& settings) {
  boost::asio::io_context io{1};
  const std::chrono::milliseconds interval{settings.stream_ms / (settings.stream_events + 1)};
  std::optional<bench::StreamServer> http1;
  unsigned short port = 0;
#if LLMRETRY_BENCH_HTTP2
  std::optional<bench::H2StreamServer> http2;
  if (!settings.certificate.empty())
    port = http2.emplace(io, settings.stream_events, interval, settings.certificate).port();
#endif
  if (port == 0)
    port = http1.emplace(io, settings.stream_events, interval, std::chrono::milliseconds{settings.latency_ms}).port();
  boost::asio::signal_set stop(io, SIGTERM, SIGINT);
  stop.async_wait([&io](const boost::system::error_code&, int) { io.stop(); });
  std::printf("listening on %s://127.0.0.1:%u\n", http1 ? "http" : "https", static_cast<unsigned>(port));
  std::fflush(stdout);
  io.run();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Settings settings;
#ifdef LLMRETRY_RELAY_PROGRAM
  settings.relay = LLMRETRY_RELAY_PROGRAM;
#endif
  CLI::App app{
      "Fires chat completions at a provider directly and through llmretry-relay, many at once, and prints "
      "latency percentiles, requests per second, 429s, and for long streams the relay's peak memory and threads, "
      "against the relay's targets.",
      "llmretry-bench-relay"};
  app.add_option("--relay", settings.relay, "the llmretry-relay program (needed for the relay's figures)");
  app.add_option("--scenarios", settings.scenarios,
                 "which to run, comma-separated: unlimited, limited, instant, streams (default all)")
      ->delimiter(',')
      ->check(CLI::IsMember({"unlimited", "limited", "instant", "streams"}));
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
  app.add_option("--instant-requests", settings.instant_requests,
                 "requests of the instant scenario, after up to 2000 one at a time (default 20000)")
      ->check(CLI::Range(1, 10'000'000));
  app.add_option("--instant-parallel", settings.instant_parallel, "of them at once (default 32)")
      ->check(CLI::Range(1, 10'000));
  app.add_option("--streams", settings.streams,
                 "streamed requests of the streams scenario, all at once (default 10000)")
      ->check(CLI::Range(1, 1'000'000));
  app.add_option("--stream-ms", settings.stream_ms, "milliseconds each stream lasts (default 2000)")
      ->check(CLI::Range(0, 600'000));
  app.add_option("--stream-events", settings.stream_events, "events of each stream before data: [DONE] (default 10)")
      ->check(CLI::Range(1, 10'000));
  app.add_option("--timeout", settings.timeout_ms, "milliseconds before a request is given up (default 30000)")
      ->check(CLI::Range(1, 600'000));
  app.add_option("--streams-upstream", settings.streams_upstream,
                 "how the streams scenario's provider serves: http2 (over TLS, as providers do; the default when "
                 "built with OpenSSL 3 and nghttp2) or http1")
      ->check(CLI::IsMember({"http1", "http2"}));
  app.add_flag("--serve-upstream", settings.serve_upstream)->group("");  // the child of scenarios 1, 3 and 4
  app.add_option("--certificate", settings.certificate)->group("");      // that child over HTTP/2: its certificate
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& error) {
    std::cerr << "llmretry-bench-relay: " << error.what() << " (see --help)\n";
    return 2;
  }
  if (settings.streams_upstream == "http2" && !LLMRETRY_BENCH_HTTP2) {
    std::cerr << "llmretry-bench-relay: --streams-upstream http2: this build has no HTTP/2 provider (it needs "
                 "OpenSSL 3 and nghttp2)\n";
    return 2;
  }
  if (settings.serve_upstream) return serve_upstream(settings);
  const FileLimit files = allow_open_files(settings.runs("streams") ? 2LL * settings.streams + 1024 : 0);
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    std::cerr << "llmretry-bench-relay: curl_global_init failed\n";
    return 1;
  }
  bool broke = false;
  try {
    std::printf("relay stress: relay: %s\n",
                settings.relay.empty() ? "none (pass --relay PATH)" : settings.relay.c_str());
    const bool relay = !settings.relay.empty();
    std::optional<Outcome> open, burst;
    std::optional<Instant> instant;
    std::optional<Streams> streams;

    if (settings.runs("unlimited")) {
      std::printf(
          "\n1. event-loop provider without limits (a process of its own), each answer after %d ms: %d requests, "
          "%d at once\n",
          settings.latency_ms, settings.requests, settings.parallel);
      open = run_unlimited(settings);
    }
    if (settings.runs("limited")) {
      LoopbackLimits limited;
      limited.latency = std::chrono::milliseconds(settings.latency_ms);
      limited.requests_per_minute = settings.rpm;
      limited.tokens_per_minute = settings.tpm;
      const std::vector<std::string> limits{"--rpm", std::to_string(settings.rpm), "--tpm",
                                            std::to_string(settings.tpm)};
      std::printf(
          "\n2. loopback provider limited to %lld requests and %lld tokens per minute (a second's worth at once), "
          "each answer after %d ms: %d requests, %d at once; relay started with the same limits\n",
          static_cast<long long>(settings.rpm), static_cast<long long>(settings.tpm), settings.latency_ms,
          settings.limited_requests, settings.limited_parallel);
      burst = run_limited(settings, limited, settings.limited_requests, settings.limited_parallel, limits);
    }
    if (settings.runs("instant")) {
      std::printf(
          "\n3. event-loop provider answering at once (a process of its own): %d requests one at a time, then "
          "%d, %d at once\n",
          std::min(2000, settings.instant_requests), settings.instant_requests, settings.instant_parallel);
      instant = run_instant(settings);
    }
    if (settings.runs("streams")) {
      std::printf(
          "\n4. event-loop provider streaming over %s (a process of its own): %d streamed chat completions at once, "
          "each %d events over %d ms, then data: [DONE]\n",
          settings.streams_upstream == "http2" ? "HTTP/2 and TLS" : "HTTP/1.1", settings.streams,
          settings.stream_events, settings.stream_ms);
      streams = run_streams(settings, files);
    }

    std::printf("\ntargets\n");
    if (open && open->relayed) {
      const double overhead = percentile(open->relayed->latencies_ms, 50) - percentile(open->direct.latencies_ms, 50);
      const double throughput = open->relayed->seconds > 0 ? open->relayed->count / open->relayed->seconds : 0.0;
      std::printf("  overhead at P50 (relay - direct, scenario 1): %.2f ms, target <= 1 ms: %s\n", overhead,
                  verdict(overhead <= 1.0));
      std::printf("  throughput through the relay (scenario 1): %.0f req/s, target >= 1800 req/s: %s\n", throughput,
                  verdict(throughput >= 1800));
    }
    if (burst && burst->relayed) {
      std::printf("  unrecovered 429s through the relay, %d at once (scenario 2): %d, target 0: %s\n",
                  settings.limited_parallel, burst->relayed->rate_limited, verdict(burst->relayed->rate_limited == 0));
    }
    if (instant && instant->relayed_many) {
      const Figures& many = *instant->relayed_many;
      const double throughput = many.seconds > 0 ? many.count / many.seconds : 0.0;
      std::printf(
          "  throughput through the relay, provider answering at once (scenario 3): %.0f req/s, aim >= "
          "10000 req/s: %s\n",
          throughput, throughput >= 10000 ? "reached" : "not reached");
    }
    if (streams && streams->relayed) {
      std::printf("  streams ended whole through the relay (scenario 4): %d of %d, target all%s: %s\n",
                  streams->relayed->successes, streams->asked,
                  streams->relayed->count < streams->asked ? " (fewer fit: see above)" : "",
                  verdict(streams->relayed->successes == streams->asked));
      std::printf("  relay's peak RSS (scenario 4): %lld MB, target <= 300 MB: %s\n", streams->relay_peak_rss_kb / 1024,
                  verdict(streams->relay_peak_rss_kb >= 0 && streams->relay_peak_rss_kb <= 300 * 1024));
    }
    if (!relay) std::printf("  none measured: pass --relay PATH (the llmretry-relay program)\n");
    std::vector<const Figures*> every;
    for (const auto* outcome : {&open, &burst})
      if (*outcome) {
        every.push_back(&(*outcome)->direct);
        if ((*outcome)->relayed) every.push_back(&*(*outcome)->relayed);
      }
    if (instant)
      for (const auto* figures : {&instant->direct_one, &instant->direct_many}) every.push_back(figures);
    if (instant && instant->relayed_one) every.push_back(&*instant->relayed_one);
    if (instant && instant->relayed_many) every.push_back(&*instant->relayed_many);
    if (streams) every.push_back(&streams->direct);
    if (streams && streams->relayed) every.push_back(&*streams->relayed);
    for (const Figures* figures : every) broke = broke || figures->other > 0;
    if (broke) std::printf("\nFAILED: requests failed otherwise than with a 429 (see \"other\")\n");
  } catch (const std::exception& error) {
    std::fflush(stdout);
    std::cerr << "llmretry-bench-relay: " << error.what() << '\n';
    broke = true;
  }
  curl_global_cleanup();
  return broke ? 1 : 0;
}
