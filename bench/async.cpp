// llmretry-bench-async: many long streamed calls at once, made by the asynchronous driver on one io_context
// thread (asio::async_call_with_retry with curl::AsyncCall), then by the blocking driver (call_with_retry
// with curl::Call) on as many threads as the machine allows. The provider is a streaming server in this
// process, on a thread of its own; each driver runs in a child process, whose CPU time and peak RSS the
// kernel reports (wait4). Figures to read, not a test: the last line sums both runs up.
#include <llmretry/asio/call.hpp>
#include <llmretry/curl/async.hpp>
#include <llmretry/curl/curl.hpp>
#include <llmretry/retry.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "stream_server.hpp"

namespace {

llmretry::curl::Request request_to(unsigned short port) {
  llmretry::curl::Request request;
  request.url = "http://127.0.0.1:" + std::to_string(port) + "/v1/chat/completions";
  request.headers = {{"Content-Type", "application/json"}, {"Authorization", "Bearer sk-bench"}};
  request.body = R"({"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]})";
  return request;
}

llmretry::curl::Options bench_options() {
  llmretry::curl::Options options;
  options.connect_timeout = std::chrono::seconds{60};
  options.timeout = std::chrono::seconds{120};
  options.accept_encoding = "identity";
  return options;
}

/// Returns how many threads this process has now (/proc/self/status).
int threads_now() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("Threads:", 0) == 0) return std::atoi(line.c_str() + 8);
  return 0;
}

/// The asynchronous driver: every call at once, on this thread. Prints "<ok> <most threads seen>" (the
/// process's threads, sampled every 100 ms).
int run_async(unsigned short port, int calls) {
  boost::asio::io_context io;
  llmretry::curl::AsyncClient client(io.get_executor());
  const llmretry::RetryPolicy policy;
  std::vector<std::unique_ptr<llmretry::curl::AsyncCall>> in_flight;
  in_flight.reserve(static_cast<std::size_t>(calls));
  int ok = 0;
  for (int i = 0; i < calls; ++i) {
    auto call = std::make_unique<llmretry::curl::AsyncCall>(client, request_to(port), bench_options());
    call->on_event([](const llmretry::SseEvent&) {});
    llmretry::asio::async_call_with_retry<llmretry::curl::Response>(
        io.get_executor(), std::ref(*call), policy, [&ok](std::exception_ptr error, llmretry::curl::Response) {
          if (!error) ++ok;
        });
    in_flight.push_back(std::move(call));
  }
  int peak = threads_now();
  boost::asio::steady_timer sampler(io);
  std::function<void()> sample = [&] {
    sampler.expires_after(std::chrono::milliseconds{100});
    sampler.async_wait([&](boost::system::error_code e) {
      if (e) return;
      peak = std::max(peak, threads_now());
      if (ok < calls) sample();
    });
  };
  sample();
  io.run();
  std::printf("%d %d\n", ok, peak);
  return 0;
}

/// The blocking driver: `threads` threads (fewer when the machine refuses more), each making calls one after
/// another until `calls` are made. Prints "<ok> <threads started>".
int run_blocking(unsigned short port, int calls, int threads) {
  std::atomic<int> next{0}, ok{0};
  const auto work = [&] {
    const llmretry::RetryPolicy policy;
    while (next.fetch_add(1) < calls) {
      llmretry::curl::Call call(request_to(port), bench_options());
      call.on_event([](const llmretry::SseEvent&) {});
      try {
        (void)llmretry::call_with_retry(call, policy);
        ++ok;
      } catch (const std::exception&) {}
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // as many as the machine allows
    }
  }
  const int started = static_cast<int>(pool.size());
  for (auto& thread : pool) thread.join();
  std::printf("%d %d\n", ok.load(), started);
  return 0;
}

struct Run {
  int ok = 0;
  int threads = 0;
  double cpu_seconds = 0;
  double peak_rss_mb = 0;
  double wall_seconds = 0;
};

/// Runs this program as a child in `mode` and returns what it printed and what the kernel measured.
Run run_child(const char* self, const std::string& mode, unsigned short port, int calls, int threads) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) throw std::runtime_error("pipe failed");
  std::fflush(stdout);  // nothing buffered is printed twice
  const auto start = std::chrono::steady_clock::now();
  const pid_t child = fork();
  if (child < 0) throw std::runtime_error("fork failed");
  if (child == 0) {
    dup2(pipe_fds[1], 1);
    close(pipe_fds[0]);
    const std::string port_text = std::to_string(port), calls_text = std::to_string(calls),
                      threads_text = std::to_string(threads);
    execl(self, self, "--child", mode.c_str(), port_text.c_str(), calls_text.c_str(), threads_text.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(pipe_fds[1]);
  std::string printed;
  char buffer[256];
  for (ssize_t n; (n = read(pipe_fds[0], buffer, sizeof buffer)) > 0;)
    printed.append(buffer, static_cast<std::size_t>(n));
  close(pipe_fds[0]);
  int status = 0;
  rusage usage{};
  wait4(child, &status, 0, &usage);
  Run run;
  run.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
      std::sscanf(printed.c_str(), "%d %d", &run.ok, &run.threads) != 2)
    throw std::runtime_error("the " + mode + " run failed: " + printed);
  run.cpu_seconds = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                    static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  run.peak_rss_mb = static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB on Linux
  return run;
}

void raise_file_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &limit);
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    raise_file_limit();
    if (argc == 6 && std::string(argv[1]) == "--child") {
      const auto port = static_cast<unsigned short>(std::atoi(argv[3]));
      const int calls = std::atoi(argv[4]), threads = std::atoi(argv[5]);
      return std::string(argv[2]) == "async" ? run_async(port, calls) : run_blocking(port, calls, threads);
    }
    int calls = 10'000, blocking_threads = 10'000, chunks = 10;
    long stream_ms = 2000;
    for (int i = 1; i + 1 < argc; i += 2) {
      const std::string flag = argv[i];
      const long value = std::atol(argv[i + 1]);
      if (flag == "--calls") calls = static_cast<int>(value);
      else if (flag == "--blocking-threads") blocking_threads = static_cast<int>(value);
      else if (flag == "--stream-ms") stream_ms = value;
      else if (flag == "--chunks") chunks = static_cast<int>(value);
      else
        throw std::invalid_argument("unknown option " + flag + " (--calls, --blocking-threads, --stream-ms, --chunks)");
    }
    if (calls < 1 || blocking_threads < 1 || chunks < 1 || stream_ms < 0)
      throw std::invalid_argument(
          "--calls, --blocking-threads and --chunks must be positive, --stream-ms not negative");
    boost::asio::io_context serving;
    const bench::StreamServer server(serving, chunks, std::chrono::milliseconds{stream_ms / chunks});
    std::thread serving_thread([&serving] { serving.run(); });
    struct Stop {  // the server's thread, stopped before the server goes
      boost::asio::io_context& io;
      std::thread& thread;
      ~Stop() {
        io.stop();
        thread.join();
      }
    } const stop{serving, serving_thread};
    std::printf("provider: 127.0.0.1:%u, each answer %d events over %ld ms\n", server.port(), chunks + 1, stream_ms);
    const Run async = run_child(argv[0], "async", server.port(), calls, 1);
    std::printf("async run: %.1f s wall\n", async.wall_seconds);
    const Run blocking = run_child(argv[0], "blocking", server.port(), calls, std::min(calls, blocking_threads));
    std::printf("blocking run: %.1f s wall\n", blocking.wall_seconds);
    std::printf(
        "async: %d calls, %d at once, %d ok, %d threads, peak RSS %.0f MB, %.1f s CPU; "
        "blocking: %d ok with %d threads, peak RSS %.0f MB, %.1f s CPU\n",
        calls, calls, async.ok, async.threads, async.peak_rss_mb, async.cpu_seconds, blocking.ok, blocking.threads,
        blocking.peak_rss_mb, blocking.cpu_seconds);
    return async.ok == calls ? 0 : 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "llmretry-bench-async: %s\n", error.what());
    return 1;
  }
}
