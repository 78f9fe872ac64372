#include <llmretry/testing/fake_sleep.hpp>

#include <thread>
#include <vector>

#include "llmretry_catch.hpp"

using llmretry::testing::FakeSleep;
using llmretry::testing::ManualClock;
using std::chrono::milliseconds;
using namespace std::chrono_literals;

TEST_CASE("FakeSleep records each wait in whole milliseconds, rounded up", "[fake_sleep]") {
  FakeSleep sleep;
  sleep(500ms);
  sleep(2s);
  sleep(std::chrono::microseconds{1500});
  CHECK(sleep.waits() == std::vector<milliseconds>{500ms, 2s, 2ms});
  CHECK(sleep.total() == 2502ms);
}

TEST_CASE("FakeSleep moves a manual clock by each wait", "[fake_sleep]") {
  ManualClock clock;
  FakeSleep sleep{clock};
  const auto start = clock.now();
  sleep(1500ms);
  sleep(std::chrono::microseconds{10});
  CHECK(clock.now() - start == std::chrono::microseconds{1'500'010});
}

TEST_CASE("FakeSleep's total stops at milliseconds::max(), and so does its clock", "[fake_sleep]") {
  ManualClock clock;
  FakeSleep sleep(clock);
  sleep(std::chrono::milliseconds::max());
  sleep(1ms);
  CHECK(sleep.total() == std::chrono::milliseconds::max());
  CHECK(clock.now() == ManualClock::time_point::max());
}

TEST_CASE("FakeSleep records a negative wait as 0, and leaves its clock", "[fake_sleep]") {
  ManualClock clock;
  FakeSleep sleep(clock);
  sleep(-5ms);
  sleep(std::chrono::milliseconds::min());
  CHECK(sleep.waits() == std::vector<std::chrono::milliseconds>{0ms, 0ms});
  CHECK(sleep.total() == 0ms);
  CHECK(clock.now().time_since_epoch() == 0ms);
}

TEST_CASE("FakeSleep can be shared by threads", "[fake_sleep][threads]") {
  ManualClock clock;
  FakeSleep sleep{clock};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 250; ++i) sleep(1ms);
    });
  for (auto& thread : threads) thread.join();
  CHECK(sleep.waits().size() == 1000);
  CHECK(sleep.total() == 1s);
  CHECK(clock.now().time_since_epoch() == 1s);
}
