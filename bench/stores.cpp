// Operations per second of the stores, in memory and in Redis over loopback (a redis-server started on a free
// port, one connection, one thread): claim + complete of an idempotency key, enqueue + take + ack of a job;
// rate-limiter reservations, beside a fixed-window limiter (INCR + EXPIRE of a key per minute, the common
// approach); an attempt of a Deployment whose pacing is shared through Redis (reserve, then finish with the
// answer's rate-limit headers): its round trips, counted by the server, and how many one server carries from
// several threads, each on its own connection. Prints the median of 5 runs and the spread (lowest, highest).
#include <llmretry/admission/deployment.hpp>
#include <llmretry/admission/rate_limiter.hpp>
#include <llmretry/redis/idempotency_store.hpp>
#include <llmretry/redis/job_queue.hpp>
#include <llmretry/redis/rate_limiter.hpp>
#include <llmretry/redis/testing_server.hpp>
#include <llmretry/store/idempotency_store.hpp>
#include <llmretry/store/job_queue.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace store = llmretry::store;

/// Runs `operation(i)` for i in [0, count) `runs` times; prints the median, lowest and highest rate.
void measure(const char* name, int count, const std::function<void(int run, int i)>& operation) {
  constexpr int runs = 5;
  std::vector<double> rates;
  for (int run = 0; run < runs; ++run) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < count; ++i) operation(run, i);
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    rates.push_back(count / took.count());
  }
  std::sort(rates.begin(), rates.end());
  std::printf("%-56s %10.0f /s  (lowest %.0f, highest %.0f; %d runs of %d)\n", name, rates[runs / 2], rates.front(),
              rates.back(), runs, count);
}

void claim_complete(store::IdempotencyStore& keys, int run, int i) {
  const std::string key = "bench-" + std::to_string(run) + "-" + std::to_string(i);
  if (keys.claim(key, "sha256:fp", "token").status != store::ClaimStatus::claimed ||
      !keys.complete(key, "token", store::StoredResponse{200, "{\"text\":\"hello\"}"}))
    throw std::runtime_error("claim/complete failed");
}

void enqueue_take_ack(store::JobQueue& queue, int run, int i) {
  const std::string id = "job-" + std::to_string(run) + "-" + std::to_string(i);
  if (!queue.enqueue({id, "{\"prompt\":\"hi\"}", 0, std::chrono::milliseconds(0)})) throw std::runtime_error("enqueue");
  const auto job = queue.take();
  if (!job || !queue.ack(job->id, job->token)) throw std::runtime_error("take/ack failed");
}

/// Reserves a call of 100 + 50 tokens and settles it with 100 + 20 (a refund). Throws when the reservation
/// is not granted at once.
template <class Limiter>
void reserve_settle(Limiter& limiter) {
  const auto now = std::chrono::steady_clock::now();
  auto reservation = limiter.reserve(llmretry::Cost{1, 100, 50}, now);
  if (!reservation.granted() || reservation.wait_after(now).count() != 0) throw std::runtime_error("reserve");
  limiter.settle(reservation, llmretry::Cost{1, 100, 20}, now);
}

/// The common fixed-window limiter: INCR the key of the current minute (EXPIRE it on its first call); admits
/// while the count is within `limit`. Throws when it does not admit.
void fixed_window(llmretry::redis::Connection& connection, long long limit) {
  const auto minute =
      std::chrono::duration_cast<std::chrono::minutes>(std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string key = connection.options().prefix + "window:" + std::to_string(minute);
  const long long count = connection.command("fixed window incr", {"INCR", key}).integer();
  if (count == 1) (void)connection.command("fixed window expire", {"EXPIRE", key, "60"});
  if (count > limit) throw std::runtime_error("fixed window");
}

/// Returns how many scripts (EVALSHA) the server has run.
long long scripts_run(llmretry::redis::Connection& connection) {
  const std::string info = connection.command("info", {"INFO", "commandstats"}).text();
  const std::string field = "cmdstat_evalsha:calls=";
  const auto at = info.find(field);
  return at == std::string::npos ? 0 : std::stoll(info.substr(at + field.size()));
}

/// A deployment of `limits` whose pacing is shared through `connection` under `name`.
std::unique_ptr<llmretry::Deployment> shared_deployment(llmretry::redis::Connection& connection,
                                                        const std::string& name, const llmretry::Limits& limits) {
  llmretry::DeploymentOptions options;
  options.name = name;
  options.limits = limits;
  options.shared = std::make_shared<llmretry::redis::RateLimiter>(connection, name, limits);
  return std::make_unique<llmretry::Deployment>(std::move(options));
}

/// One attempt through `deployment`: a reservation, then a success whose usage differs from the estimate and
/// whose headers report the levels, as a provider's answer does.
void shared_attempt(llmretry::Deployment& deployment) {
  llmretry::RateLimits reported;
  reported.requests = llmretry::RateLimitWindow{1'000'000'000, 999'999'000, std::nullopt};
  reported.tokens = llmretry::RateLimitWindow{1'000'000'000'000, 999'999'000'000, std::nullopt};
  const auto now = deployment.now();
  auto reservation = deployment.reserve(llmretry::Cost{1, 100, 50}, now);
  if (!reservation.granted() || !reservation.shared()) throw std::runtime_error("shared reserve");
  deployment.succeeded(reservation, llmretry::Cost{1, 100, 20}, &reported, now);
  if (deployment.shared_failures() != 0) throw std::runtime_error("shared finish");
}

}  // namespace

int main() {
  store::MemoryIdempotencyStore memory_keys;
  store::MemoryJobQueue memory_queue;
  measure("memory: claim + complete", 200000, [&](int run, int i) { claim_complete(memory_keys, run, i); });
  measure("memory: enqueue + take + ack", 200000, [&](int run, int i) { enqueue_take_ack(memory_queue, run, i); });
  // Limits no run reaches: what is measured is the bookkeeping, never a wait.
  const llmretry::Limits limits = llmretry::Limits::per_minute(1'000'000'000'000, 1'000'000'000'000);
  llmretry::RateLimiter memory_limiter(limits);
  measure("memory: rate limiter reserve + settle (refund)", 200000, [&](int, int) { reserve_settle(memory_limiter); });

  llmretry::testing::RedisServer server;
  llmretry::redis::Connection connection(server.connection_options());
  llmretry::redis::IdempotencyStore redis_keys(connection);
  llmretry::redis::JobQueue redis_queue(connection, "bench");
  measure("redis (loopback): claim + complete", 20000, [&](int run, int i) { claim_complete(redis_keys, run, i); });
  measure("redis (loopback): enqueue + take + ack", 20000,
          [&](int run, int i) { enqueue_take_ack(redis_queue, run, i); });
  llmretry::redis::RateLimiter redis_limiter(connection, "bench", limits);
  measure("redis (loopback): rate limiter reserve", 20000, [&](int, int) {
    if (!redis_limiter.reserve(llmretry::Cost{}, std::chrono::steady_clock::now()).granted())
      throw std::runtime_error("reserve");
  });
  measure("redis (loopback): rate limiter reserve + settle (refund)", 20000,
          [&](int, int) { reserve_settle(redis_limiter); });
  measure("redis (loopback): fixed window INCR + EXPIRE", 20000,
          [&](int, int) { fixed_window(connection, 1LL << 40); });

  auto deployment = shared_deployment(connection, "bench-deployment", limits);
  const long long scripts_before = scripts_run(connection);
  constexpr int counted = 1000;
  for (int i = 0; i < counted; ++i) shared_attempt(*deployment);
  std::printf("%-56s %10.2f\n", "redis (loopback): round trips per shared-paced attempt",
              static_cast<double>(scripts_run(connection) - scripts_before) / counted);
  measure("redis (loopback): shared-paced attempt (reserve + finish)", 20000,
          [&](int, int) { shared_attempt(*deployment); });

  // Several processes' worth of threads on one server, each on its own connection and deployment.
  for (const int threads : {2, 4, 8}) {
    std::vector<std::unique_ptr<llmretry::redis::Connection>> connections;
    std::vector<std::unique_ptr<llmretry::Deployment>> deployments;
    for (int t = 0; t < threads; ++t) {
      connections.push_back(std::make_unique<llmretry::redis::Connection>(server.connection_options()));
      deployments.push_back(shared_deployment(*connections.back(), "bench-fleet", limits));
    }
    const std::string name = "redis (loopback): shared-paced attempts, " + std::to_string(threads) + " threads";
    constexpr int each = 5000;
    measure(name.c_str(), threads * each, [&](int, int i) {
      if (i != 0) return;  // the whole batch, on every thread at once, counted as threads x each
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
          for (int k = 0; k < each; ++k) shared_attempt(*deployments[static_cast<std::size_t>(t)]);
        });
      for (auto& thread : pool) thread.join();
    });
  }
  return 0;
}
