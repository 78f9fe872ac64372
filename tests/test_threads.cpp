// The helpers documented as safe from several threads, used from several threads at once: run under
// ThreadSanitizer (.ci/quality tsan), a data race fails the test. Catch2 assertions stay on the main thread.
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <llmretry/llmretry.hpp>
#include <llmretry/testing.hpp>
#include <llmretry_catch.hpp>

namespace {

constexpr int thread_count = 4;
constexpr int calls_per_thread = 200;

// Runs body(thread index) on thread_count threads and waits for them.
template <class Body>
void on_threads(Body body) {
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) threads.emplace_back(body, t);
  for (auto& thread : threads) thread.join();
}

}  // namespace

TEST_CASE("call_with_retry shares a SimulatedProvider, a FakeSleep and a ManualClock between threads") {
  using std::chrono::milliseconds;
  llmretry::testing::SimulatedProvider provider{"rate_limit_ms:1*300", "server_error*100", "timeout*100"};
  llmretry::testing::ManualClock clock;
  llmretry::testing::FakeSleep sleep{clock};
  llmretry::RetryPolicy policy;
  policy.base = milliseconds{1};
  policy.cap = milliseconds{4};
  policy.max_attempts = 1000;
  std::atomic<int> answers{0};

  on_threads([&](int) {
    for (int i = 0; i < calls_per_thread; ++i) {
      const int answer = llmretry::call_with_retry([&] { return provider.call([] { return 1; }); }, policy, sleep);
      answers += answer;
      (void)clock.now();
    }
  });

  CHECK(answers == thread_count * calls_per_thread);
  CHECK(provider.calls() == thread_count * calls_per_thread + 500);
  CHECK(sleep.waits().size() == 500);
  CHECK(clock.now().time_since_epoch() == sleep.total());
}

TEST_CASE("ThreadRng draws from one engine per thread") {
  std::vector<std::uint64_t> first(thread_count);
  on_threads([&](int t) {
    llmretry::ThreadRng rng;
    first[static_cast<std::size_t>(t)] = rng();
    for (int i = 0; i < 1000; ++i) (void)rng();
  });
  for (int a = 0; a < thread_count; ++a)
    for (int b = a + 1; b < thread_count; ++b)
      CHECK(first[static_cast<std::size_t>(a)] != first[static_cast<std::size_t>(b)]);
}
