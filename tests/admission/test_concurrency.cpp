#include <llmretry/admission/concurrency.hpp>

#include <atomic>
#include <thread>
#include <vector>

#include "llmretry_catch.hpp"

using llmretry::ConcurrencyLimit;
using namespace std::chrono_literals;

namespace {
struct Recorder final : ConcurrencyLimit::Waiter {
  explicit Recorder(std::vector<int>& order, int id) : order_(order), id_(id) {}
  void granted() override { order_.push_back(id_); }
  std::vector<int>& order_;
  int id_;
};
}  // namespace

TEST_CASE("Slots are taken until none is free, and given back", "[concurrency]") {
  ConcurrencyLimit limit{2};
  CHECK(limit.try_acquire());
  CHECK(limit.try_acquire());
  CHECK_FALSE(limit.try_acquire());
  CHECK(limit.in_use() == 2);
  limit.release();
  CHECK(limit.in_use() == 1);
  CHECK(limit.try_acquire());
  CHECK_THROWS_AS(ConcurrencyLimit{0}, std::invalid_argument);
}

TEST_CASE("Waiters are served first come, first served", "[concurrency]") {
  ConcurrencyLimit limit{1};
  std::vector<int> order;
  Recorder first{order, 1}, second{order, 2}, third{order, 3};
  REQUIRE(limit.try_acquire());
  CHECK_FALSE(limit.enqueue(first));
  CHECK_FALSE(limit.enqueue(second));
  CHECK_FALSE(limit.enqueue(third));
  CHECK(limit.waiting() == 3);
  CHECK_FALSE(limit.try_acquire());  // nobody jumps the line
  CHECK(limit.withdraw(second));     // gave up waiting
  limit.release();
  limit.release();
  CHECK(order == std::vector<int>{1, 3});
  CHECK_FALSE(limit.withdraw(first));  // already granted: it holds the slot
  CHECK(limit.in_use() == 1);
  limit.release();
  CHECK(limit.in_use() == 0);
}

TEST_CASE("acquire_until waits in line, and gives up at its deadline", "[concurrency]") {
  ConcurrencyLimit limit{1};
  REQUIRE(limit.try_acquire());
  const auto started = std::chrono::steady_clock::now();
  CHECK_FALSE(limit.acquire_until(started + 50ms));
  CHECK(std::chrono::steady_clock::now() - started >= 50ms);
  CHECK(limit.waiting() == 0);

  std::thread releaser([&] {
    std::this_thread::sleep_for(20ms);
    limit.release();
  });
  CHECK(limit.acquire_until(std::chrono::steady_clock::now() + 5s));
  releaser.join();
  CHECK(limit.in_use() == 1);
}

TEST_CASE("Never more in flight than the slots, from many threads", "[concurrency][threads]") {
  ConcurrencyLimit limit{3};
  std::atomic<int> in_flight{0}, most{0}, done{0}, timed_out{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < 8; ++t)
    pool.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        if (!limit.acquire_until(std::chrono::steady_clock::now() + 10s)) {
          ++timed_out;
          continue;
        }
        const int now = ++in_flight;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {}
        --in_flight;
        limit.release();
        ++done;
      }
    });
  for (auto& thread : pool) thread.join();
  CHECK(timed_out == 0);
  CHECK(done == 1600);
  CHECK(most <= 3);
  CHECK(limit.in_use() == 0);
}
