// Faults with several processes (fork): racing claims of one key, a server killed with SIGKILL and
// restarted from its append-only file while workers run, and processes pacing against one shared rate
// limit. Each is its own ctest entry ([race], [kill], [shared_limit]).
#include <llmretry/redis/idempotency_store.hpp>
#include <llmretry/redis/job_queue.hpp>
#include <llmretry/redis/operations.hpp>
#include <llmretry/redis/rate_limiter.hpp>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "llmretry_catch.hpp"
#include "redis_fixture.hpp"

using namespace std::chrono_literals;
namespace store = llmretry::store;

namespace {

/// Runs `child` in a forked process that exits with its return value (1 on an exception); returns its pid.
pid_t spawn(const std::function<int()>& child) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid > 0) return pid;
  int status = 1;
  try {
    status = child();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "child %d: %s\n", static_cast<int>(::getpid()), error.what());
  }
  std::fflush(stderr);
  ::_exit(status);
}

/// Waits for `pid` and returns its exit status (-1 when it did not exit normally).
int wait_for(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/// Returns `call()`, called again every 20 ms while it throws redis::RedisError (the server is down), for up to 30 s.
template <class Call>
auto persist(Call call) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (true) {
    try {
      return call();
    } catch (const llmretry::redis::RedisError&) {
      if (std::chrono::steady_clock::now() > deadline) throw;
      std::this_thread::sleep_for(20ms);
    }
  }
}

}  // namespace

TEST_CASE("redis faults: 2 processes x 32 threads claim one key: exactly one wins, every round", "[faults][race]") {
  constexpr int processes = 2, threads = 32, rounds = 25;
  const auto options = redis_fixture::unique_options();
  const auto start = std::chrono::system_clock::now() + 1s;  // every connection is open by then
  std::vector<int> pipes;
  std::vector<pid_t> children;
  for (int p = 0; p < processes; ++p) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    children.push_back(spawn([&, p, write_end = fds[1]] {
      std::vector<std::atomic<int>> wins(rounds);
      std::atomic<int> unexpected{0};
      std::vector<std::thread> workers;
      for (int t = 0; t < threads; ++t)
        workers.emplace_back([&, t] {
          llmretry::redis::Connection connection(options);
          llmretry::redis::IdempotencyStore keys(connection);
          for (int r = 0; r < rounds; ++r) {
            std::this_thread::sleep_until(start + r * 40ms);
            const auto token = std::to_string(p) + ":" + std::to_string(t);
            const auto status = keys.claim("round-" + std::to_string(r), "fp", token).status;
            if (status == store::ClaimStatus::claimed) ++wins[static_cast<std::size_t>(r)];
            if (status != store::ClaimStatus::claimed && status != store::ClaimStatus::in_flight) ++unexpected;
          }
        });
      for (auto& worker : workers) worker.join();
      std::vector<int> report;
      for (auto& w : wins) report.push_back(w.load());
      report.push_back(unexpected.load());
      const auto bytes = static_cast<ssize_t>(report.size() * sizeof(int));
      return ::write(write_end, report.data(), report.size() * sizeof(int)) == bytes ? 0 : 1;
    }));
    ::close(fds[1]);
    pipes.push_back(fds[0]);
  }
  std::vector<int> total(rounds + 1, 0);
  for (int p = 0; p < processes; ++p) {
    std::vector<int> report(rounds + 1, 0);
    const auto bytes = static_cast<ssize_t>(report.size() * sizeof(int));
    CHECK(::read(pipes[static_cast<std::size_t>(p)], report.data(), report.size() * sizeof(int)) == bytes);
    ::close(pipes[static_cast<std::size_t>(p)]);
    for (std::size_t i = 0; i < report.size(); ++i) total[i] += report[i];
    CHECK(wait_for(children[static_cast<std::size_t>(p)]) == 0);
  }
  for (int r = 0; r < rounds; ++r) {
    INFO("round " << r);
    CHECK(total[static_cast<std::size_t>(r)] == 1);
  }
  CHECK(total[rounds] == 0);  // every loser was told in_flight
}

TEST_CASE("redis faults: SIGKILL mid-run, restart from the append-only file: no job lost, none run twice",
          "[faults][kill]") {
  constexpr int processes = 2, threads = 4, jobs = 400;
  llmretry::testing::RedisServerOptions server_options;
  server_options.append_only = true;
  llmretry::testing::RedisServer server(server_options);
  auto options = server.connection_options();
  options.connect_timeout = options.command_timeout = 300ms;
  const auto effects = (server.directory() / "effects").string();
  {
    llmretry::redis::Connection connection(options);
    llmretry::redis::JobQueue queue(connection, "work");
    char id[16];
    for (int i = 0; i < jobs; ++i) {
      std::snprintf(id, sizeof id, "job-%03d", i);
      REQUIRE(queue.enqueue({id, "payload", 0, 0ms}));
    }
  }
  store::JobQueueOptions queue_options;
  queue_options.visibility_timeout = 1s;  // a take whose answer was lost comes back soon
  queue_options.max_attempts = 100;
  store::IdempotencyOptions key_options;
  key_options.lease = 10s;  // longer than the outage: the holder completes after it

  // A worker runs a job at most once: claim its key, record the operation, do the work (a line in the
  // effects file), complete, ack. Every step is repeated while the server is down, with the same token.
  const auto worker = [&] {
    llmretry::redis::Connection connection(options);
    llmretry::redis::JobQueue queue(connection, "work", queue_options);
    llmretry::redis::IdempotencyStore keys(connection, key_options);
    llmretry::redis::OperationsTable operations(connection);
    const int fd = ::open(effects.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0) throw std::runtime_error("cannot open " + effects);
    while (true) {
      const auto job = persist([&] { return queue.take(); });
      if (!job) {
        const auto counts = persist([&] { return queue.counts(); });
        if (counts.ready + counts.delayed + counts.taken == 0) break;
        std::this_thread::sleep_for(20ms);
        continue;
      }
      const auto claim = persist([&] { return keys.claim(job->id, "fp", job->token); });
      if (claim.status == store::ClaimStatus::in_flight) {
        (void)persist([&] { return queue.retry_later(job->id, job->token, 100ms); });
        continue;
      }
      if (claim.status == store::ClaimStatus::claimed) {
        (void)persist([&] { return operations.begin(job->id, "provider", "model"); });
        std::this_thread::sleep_for(5ms);  // the work
        const std::string line = job->id + "\n";
        if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
          throw std::runtime_error("write failed");
        if (!persist([&] { return operations.complete(job->id, "req-" + job->id, llmretry::Cost{1, 1, 1}); }))
          throw std::runtime_error("operation " + job->id + " not completed");
        if (!persist([&] { return keys.complete(job->id, job->token, {200, "done"}); }))
          throw std::runtime_error("lease of " + job->id + " lost");
      } else if (claim.status == store::ClaimStatus::mismatch) {
        throw std::runtime_error("mismatch on " + job->id);
      }
      (void)persist([&] { return queue.ack(job->id, job->token); });
    }
    ::close(fd);
    return 0;
  };
  const auto effects_done = [&] {
    std::error_code error;
    const auto size = std::filesystem::file_size(effects, error);
    return error ? 0 : static_cast<int>(size / 8);  // "job-NNN\n"
  };

  std::vector<pid_t> children;
  for (int p = 0; p < processes; ++p)
    children.push_back(spawn([&] {
      std::atomic<int> failed{0};
      std::vector<std::thread> workers;
      for (int t = 0; t < threads; ++t)
        workers.emplace_back([&] {
          try {
            worker();
          } catch (const std::exception& error) {
            std::fprintf(stderr, "worker: %s\n", error.what());
            ++failed;
          }
        });
      for (auto& thread : workers) thread.join();
      return failed == 0 ? 0 : 1;
    }));

  for (const int kill_at : {jobs / 4, jobs / 2}) {
    while (effects_done() < kill_at) std::this_thread::sleep_for(2ms);
    server.kill();
    CHECK(effects_done() < jobs);  // killed mid-run
    std::this_thread::sleep_for(300ms);
    server.restart();
  }
  for (const pid_t child : children) CHECK(wait_for(child) == 0);

  std::map<std::string, int> runs;
  std::ifstream lines(effects);
  for (std::string line; std::getline(lines, line);) ++runs[line];
  CHECK(runs.size() == jobs);
  for (const auto& [id, count] : runs) {
    INFO(id);
    CHECK(count == 1);
  }
  llmretry::redis::Connection connection(options);
  llmretry::redis::JobQueue queue(connection, "work");
  const auto counts = queue.counts();
  CHECK(counts.ready + counts.delayed + counts.taken + counts.dead == 0);
  llmretry::redis::OperationsTable operations(connection);
  int completed = 0;
  for (const auto& [id, count] : runs) completed += operations.find(id)->status == store::OperationStatus::completed;
  CHECK(completed == jobs);
}

TEST_CASE("redis faults: 2 processes x 4 threads pacing against one shared limit stay within it",
          "[faults][shared_limit]") {
  constexpr int processes = 2, threads = 4;
  constexpr std::int64_t rate = 100, burst = 20;  // 100 a second (6,000 a minute), 20 at once
  constexpr auto run = 5s;
  llmretry::Limits limits;
  limits[llmretry::Dimension::requests_per_minute] = llmretry::Limit::per_minute(rate * 60, burst);
  const auto options = redis_fixture::unique_options();
  // steady_clock is the machine's monotonic clock: the same in every process.
  const auto begin = std::chrono::steady_clock::now() + 1s, end = begin + run;
  using nanoseconds = std::chrono::nanoseconds;

  // Each process records when its calls were told to start and when they woke to start, as nanoseconds
  // since begin, and writes them to its pipe.
  std::vector<int> pipes;
  std::vector<pid_t> children;
  for (int p = 0; p < processes; ++p) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    children.push_back(spawn([&, write_end = fds[1]] {
      std::mutex mutex;
      std::vector<std::int64_t> record;  // pairs: told, woke
      std::vector<std::thread> workers;
      for (int t = 0; t < threads; ++t)
        workers.emplace_back([&] {
          llmretry::redis::Connection connection(options);
          llmretry::redis::RateLimiter limiter(connection, "shared", limits);
          std::this_thread::sleep_until(begin);
          while (true) {
            auto reservation = limiter.reserve(llmretry::Cost{}, std::chrono::steady_clock::now());
            if (!reservation.granted()) throw std::runtime_error("refused");
            if (reservation.start() >= end) {
              limiter.cancel(reservation);
              return;
            }
            std::this_thread::sleep_until(reservation.start());
            const auto woke = std::chrono::steady_clock::now();
            limiter.settle(reservation, llmretry::Cost{}, woke);
            const std::lock_guard<std::mutex> lock(mutex);
            record.push_back(std::chrono::duration_cast<nanoseconds>(reservation.start() - begin).count());
            record.push_back(std::chrono::duration_cast<nanoseconds>(woke - begin).count());
          }
        });
      for (auto& worker : workers) worker.join();
      const auto bytes = static_cast<ssize_t>(record.size() * sizeof(std::int64_t));
      return ::write(write_end, record.data(), record.size() * sizeof(std::int64_t)) == bytes ? 0 : 1;
    }));
    ::close(fds[1]);
    pipes.push_back(fds[0]);
  }
  std::vector<std::int64_t> told, woke;
  std::vector<std::size_t> per_process;
  for (int p = 0; p < processes; ++p) {
    std::vector<std::int64_t> record;
    std::int64_t buffer[512];
    for (ssize_t got = 0; (got = ::read(pipes[static_cast<std::size_t>(p)], buffer, sizeof buffer)) > 0;)
      record.insert(record.end(), buffer, buffer + got / static_cast<ssize_t>(sizeof(std::int64_t)));
    ::close(pipes[static_cast<std::size_t>(p)]);
    CHECK(wait_for(children[static_cast<std::size_t>(p)]) == 0);
    per_process.push_back(record.size() / 2);
    for (std::size_t i = 0; i + 1 < record.size(); i += 2) {
      told.push_back(record[i]);
      woke.push_back(record[i + 1]);
    }
  }

  // The most starts in any window of `window` (from one start to just before start + window), beside
  // what the limit allows in it: the burst plus the rate times the window.
  const auto most_in = [](std::vector<std::int64_t> starts, nanoseconds window) {
    std::sort(starts.begin(), starts.end());
    std::size_t most = 0;
    for (std::size_t i = 0, j = 0; i < starts.size(); ++i) {
      while (j < starts.size() && starts[j] < starts[i] + window.count()) ++j;
      most = std::max(most, j - i);
    }
    return static_cast<double>(most);
  };
  const auto allowed = [&](nanoseconds window) {
    return static_cast<double>(burst) + static_cast<double>(rate) * std::chrono::duration<double>(window).count();
  };
  std::printf("shared limit: %lld a second, burst %lld, %d processes x %d threads, %.0f s: %zu starts (",
              static_cast<long long>(rate), static_cast<long long>(burst), processes, threads,
              std::chrono::duration<double>(run).count(), told.size());
  for (const std::size_t n : per_process) std::printf(" %zu", n);
  std::printf(" per process); the limit allows %.0f\n", allowed(run));
  for (const nanoseconds window : {nanoseconds{100ms}, nanoseconds{1s}, nanoseconds{run}}) {
    const double most_told = most_in(told, window), most_woke = most_in(woke, window);
    std::printf(
        "  window %5.1f s: allowed %6.0f, most started %4.0f (overshoot %+.2f %%), most woke %4.0f (%+.2f %%)\n",
        std::chrono::duration<double>(window).count(), allowed(window), most_told,
        100 * (most_told / allowed(window) - 1), most_woke, 100 * (most_woke / allowed(window) - 1));
    INFO("window " << std::chrono::duration<double>(window).count() << " s");
    CHECK(most_told <= allowed(window) * 1.01);
  }
  // Together, not each: two processes get the limit once, not twice, and all of it.
  CHECK(static_cast<double>(told.size()) >= 0.95 * allowed(run));
  for (const std::size_t n : per_process) CHECK(n > 0);
}
