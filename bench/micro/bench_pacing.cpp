// The pacing's cost per call: RateLimiter::reserve + settle, alone and with 2 and 8 threads on one limiter,
// and reserve alone (never settled), beside the simple design (a token bucket behind one mutex, refilled on
// each acquire): its acquire alone, and its acquire + settle (two lock acquisitions, the same steps as
// reserve + settle); and the success path of call_with_retry with a Deployment::pace guard, beside the bare
// call. Counts allocations too.
#include <benchmark/benchmark.h>

#include <llmretry/admission/deployment.hpp>
#include <llmretry/retry.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>

#include "support.hpp"

using llmretry_bench::as_in_a_threaded_process;
using llmretry_bench::measure;
using llmretry_bench::opaque_policy;
using llmretry_bench::provider_call;

namespace {

using time_point = std::chrono::steady_clock::time_point;

// The simple design: capacity, refill rate, tokens and the time of the last refill, behind one mutex.
class MutexBucket {
 public:
  MutexBucket(double capacity, double per_second) : capacity_(capacity), per_second_(per_second), tokens_(capacity) {}

  bool try_acquire(double amount, time_point now) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const double elapsed = std::chrono::duration<double>(now - updated_at_).count();
    tokens_ = std::min(capacity_, tokens_ + std::max(0.0, elapsed) * per_second_);
    updated_at_ = now;
    if (tokens_ < amount) return false;
    tokens_ -= amount;
    return true;
  }

  // Charges `actual` instead of the `reserved` amount an acquire took: the difference comes back.
  void settle(double reserved, double actual) {
    const std::lock_guard<std::mutex> lock(mutex_);
    tokens_ = std::min(capacity_, tokens_ + reserved - actual);
  }

 private:
  std::mutex mutex_;
  double capacity_;
  double per_second_;
  double tokens_;
  time_point updated_at_{};
};

// Requests per minute only, as the bucket: 10^9 a minute, so that capacity never runs out.
llmretry::Limits requests_only() {
  llmretry::Limits limits;
  limits[llmretry::Dimension::requests_per_minute] = llmretry::Limit::per_minute(1'000'000'000);
  return limits;
}

// Each thread's own time, 1 µs further at each call (no clock read in the loop), from the furthest time any
// earlier run reached: a limiter or bucket kept from one run to the next never sees time go back (its
// theoretical arrival time ahead of the new run's start would make calls wait).
struct Ticks {
  Ticks() = default;
  Ticks(const Ticks&) = delete;
  Ticks& operator=(const Ticks&) = delete;
  ~Ticks() {
    std::int64_t reached = furthest.load();
    while (reached < now.time_since_epoch().count() &&
           !furthest.compare_exchange_weak(reached, now.time_since_epoch().count())) {}
  }
  time_point next() { return now += std::chrono::microseconds{1}; }

  static inline std::atomic<std::int64_t> furthest{time_point{std::chrono::hours{1}}.time_since_epoch().count()};
  time_point now{time_point::duration{furthest.load()}};
};

// One limiter shared by every thread of a benchmark, as the deployment's is.
llmretry::RateLimiter shared_limiter{requests_only()};
MutexBucket shared_bucket{1e9 / 60, 1e9 / 60};

void limiter_reserve_settle(benchmark::State& state, llmretry::RateLimiter& limiter, const llmretry::Cost& cost) {
  as_in_a_threaded_process();
  Ticks ticks;
  measure(state, [&] {
    llmretry::Reservation reservation = limiter.reserve(cost, ticks.next());
    benchmark::DoNotOptimize(reservation.start());
    limiter.settle(reservation, cost, ticks.now);
  });
}

void rate_limiter(benchmark::State& state) {
  static llmretry::RateLimiter limiter{requests_only()};
  limiter_reserve_settle(state, limiter, llmretry::Cost{});
}

// A reservation never settled: its estimate stays charged, as what the bucket's acquire takes stays taken.
void limiter_reserve(benchmark::State& state, llmretry::RateLimiter& limiter, const llmretry::Cost& cost) {
  as_in_a_threaded_process();
  Ticks ticks;
  measure(state, [&] { benchmark::DoNotOptimize(limiter.reserve(cost, ticks.next()).start()); });
}

void rate_limiter_reserve(benchmark::State& state) {
  static llmretry::RateLimiter limiter{requests_only()};
  limiter_reserve(state, limiter, llmretry::Cost{});
}

void rate_limiter_rpm_tpm(benchmark::State& state) {
  static llmretry::RateLimiter limiter{llmretry::Limits::per_minute(1'000'000'000, 1'000'000'000'000)};
  limiter_reserve_settle(state, limiter, llmretry::Cost{1, 300, 200});
}

void rate_limiter_shared(benchmark::State& state) { limiter_reserve_settle(state, shared_limiter, llmretry::Cost{}); }

void mutex_bucket(benchmark::State& state, MutexBucket& bucket) {
  as_in_a_threaded_process();
  Ticks ticks;
  measure(state, [&] { benchmark::DoNotOptimize(bucket.try_acquire(1, ticks.next())); });
}

void mutex_bucket_alone(benchmark::State& state) {
  static MutexBucket bucket{1e9 / 60, 1e9 / 60};
  mutex_bucket(state, bucket);
}

void mutex_bucket_shared(benchmark::State& state) { mutex_bucket(state, shared_bucket); }

// The bucket used as the limiter is: acquire before the call, settle the actual usage after it.
void mutex_bucket_settle(benchmark::State& state, MutexBucket& bucket) {
  as_in_a_threaded_process();
  Ticks ticks;
  measure(state, [&] {
    benchmark::DoNotOptimize(bucket.try_acquire(1, ticks.next()));
    bucket.settle(1, 1);
  });
}

void mutex_bucket_settle_alone(benchmark::State& state) {
  static MutexBucket bucket{1e9 / 60, 1e9 / 60};
  mutex_bucket_settle(state, bucket);
}

void mutex_bucket_settle_shared(benchmark::State& state) { mutex_bucket_settle(state, shared_bucket); }

void paced_call(benchmark::State& state) {
  llmretry::DeploymentOptions options;
  options.name = "bench/model";
  options.limits = llmretry::Limits::per_minute(1'000'000'000'000, 1'000'000'000'000);
  llmretry::Deployment deployment(options);
  const auto policy = opaque_policy();
  int counter = 0;
  measure(state, [&] {
    auto pacing = deployment.pace(llmretry::Cost{1, 10, 10});
    benchmark::DoNotOptimize(llmretry::call_with_retry([&] { return provider_call(counter); }, policy, pacing));
  });
}

// What the paced call reads twice (before the attempt, and when it settles): the steady clock.
void clock_read(benchmark::State& state) {
  measure(state, [] { benchmark::DoNotOptimize(std::chrono::steady_clock::now()); });
}

}  // namespace

BENCHMARK(clock_read)->Name("steady_clock/now");
BENCHMARK(rate_limiter)->Name("rate_limiter/reserve_settle");
BENCHMARK(rate_limiter_reserve)->Name("rate_limiter/reserve");
BENCHMARK(rate_limiter_rpm_tpm)->Name("rate_limiter/reserve_settle_rpm_tpm");
BENCHMARK(mutex_bucket_alone)->Name("mutex_bucket/acquire");
BENCHMARK(mutex_bucket_settle_alone)->Name("mutex_bucket/acquire_settle");
BENCHMARK(rate_limiter_shared)->Name("rate_limiter/reserve_settle/contended")->Threads(2)->Threads(8);
BENCHMARK(mutex_bucket_shared)->Name("mutex_bucket/acquire/contended")->Threads(2)->Threads(8);
BENCHMARK(mutex_bucket_settle_shared)->Name("mutex_bucket/acquire_settle/contended")->Threads(2)->Threads(8);
BENCHMARK(paced_call)->Name("call_with_retry/deployment_pace");
