// The code the tools share: the periodic thread and the lease renewer driven by a manual clock, the exit
// statuses of run_main(), and the durations of the command lines.

#include <llmretry/store/idempotency_store.hpp>
#include <llmretry/testing/manual_clock.hpp>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/duration.hpp"
#include "common/lease_renewer.hpp"
#include "common/periodic_thread.hpp"
#include "common/program.hpp"
#include "llmretry_catch.hpp"
#include "test_time.hpp"

using namespace std::chrono_literals;
using llmretry::testing::ManualClock;
using llmretry::testing::ManualSystemClock;
using llmretry_tools::LeaseRenewer;
using llmretry_tools::PeriodicThread;
using llmretry_tools::PeriodicWait;
using std::chrono::milliseconds;

namespace {

/// A wait that moves `clock` (and `also`, when given) to the deadline at once: virtual time runs only
/// while the thread waits, so every tick happens at an exact instant.
PeriodicWait jump(ManualClock& clock, ManualSystemClock* also = nullptr) {
  return [&clock, also](std::condition_variable&, std::unique_lock<std::mutex>&,
                        std::chrono::steady_clock::time_point deadline) {
    const auto step = deadline - clock.now();
    clock.advance(step);
    if (also != nullptr) also->advance(step);
  };
}

/// A wait that only the thread's stop ends: its clock never moves.
void wait_for_stop(std::condition_variable& wake, std::unique_lock<std::mutex>& lock,
                   std::chrono::steady_clock::time_point) {
  wake.wait(lock);
}

/// An IdempotencyStore whose renew() follows a script ("ok", "lost", "down": throws), records when it was
/// called, and says when the script is over.
class ScriptedStore final : public llmretry::store::IdempotencyStore {
 public:
  ScriptedStore(const ManualClock& clock, std::vector<std::string> script)
      : clock_(clock), script_(std::move(script)) {}

  [[nodiscard]] llmretry::store::ClaimResult claim(std::string_view, std::string_view, std::string_view) override {
    return {};
  }
  [[nodiscard]] bool complete(std::string_view, std::string_view, const llmretry::store::StoredResponse&) override {
    return true;
  }
  [[nodiscard]] bool release(std::string_view, std::string_view) override { return true; }
  [[nodiscard]] bool renew(std::string_view key, std::string_view token) override {
    CHECK(key == "key");
    CHECK(token == "token");
    const std::lock_guard<std::mutex> lock(mutex_);
    times_.push_back(std::chrono::duration_cast<milliseconds>(clock_.now().time_since_epoch()));
    const std::string step = times_.size() <= script_.size() ? script_[times_.size() - 1] : "lost";
    if (times_.size() == script_.size()) over_.set_value();
    if (step == "down") throw std::runtime_error("the store is down");
    return step == "ok";
  }

  /// Returns when the last step of the script was played (false after `bound` of real time).
  bool wait_until_over(milliseconds bound) { return over_future_.wait_for(bound) == std::future_status::ready; }
  std::vector<milliseconds> times() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return times_;
  }

 private:
  const ManualClock& clock_;
  const std::vector<std::string> script_;
  mutable std::mutex mutex_;
  std::vector<milliseconds> times_;
  std::promise<void> over_;
  std::future<void> over_future_ = over_.get_future();
};

}  // namespace

TEST_CASE("PeriodicThread ticks every period after the last tick until the tick says stop", "[periodic_thread]") {
  ManualClock clock;
  std::vector<milliseconds> ticks;
  std::promise<void> done;
  {
    const PeriodicThread thread(
        250ms,
        [&] {
          ticks.push_back(std::chrono::duration_cast<milliseconds>(clock.now().time_since_epoch()));
          if (ticks.size() == 4) done.set_value();
          return ticks.size() < 4;
        },
        std::ref(clock), jump(clock));
    REQUIRE(done.get_future().wait_for(llmretry_test::scaled(10s)) == std::future_status::ready);
  }
  CHECK(ticks == std::vector<milliseconds>{250ms, 500ms, 750ms, 1000ms});
}

TEST_CASE("PeriodicThread: destroying it stops the wait before any tick", "[periodic_thread]") {
  ManualClock clock;
  int ticks = 0;
  {
    const PeriodicThread thread(
        1h,
        [&] {
          ++ticks;
          return true;
        },
        std::ref(clock), wait_for_stop);
  }
  CHECK(ticks == 0);
}

TEST_CASE("LeaseRenewer renews every period, again after a failed renewal, and stops once the lease is lost",
          "[lease_renewer]") {
  ManualClock clock;
  ScriptedStore store(clock, {"ok", "down", "ok", "lost"});
  {
    const LeaseRenewer renewer(store, "key", "token", 1s, std::ref(clock), jump(clock));
    REQUIRE(store.wait_until_over(llmretry_test::scaled(10s)));
  }
  CHECK(store.times() == std::vector<milliseconds>{1s, 2s, 3s, 4s});  // nothing after the lease was lost
}

TEST_CASE("LeaseRenewer: destroyed before its first turn, it renews nothing", "[lease_renewer]") {
  ManualClock clock;
  ScriptedStore store(clock, {});
  { const LeaseRenewer renewer(store, "key", "token", 1s, std::ref(clock), wait_for_stop); }
  CHECK(store.times().empty());
}

TEST_CASE("LeaseRenewer keeps a claim of the memory store past many leases; it ends one lease after",
          "[lease_renewer]") {
  ManualClock clock;
  ManualSystemClock wall;
  llmretry::store::IdempotencyOptions options;
  options.lease = 3s;
  llmretry::store::MemoryIdempotencyStore store(options, std::ref(wall));
  REQUIRE(store.claim("key", "fingerprint", "token").status == llmretry::store::ClaimStatus::claimed);
  {
    // Renewals every second until the wall clock has run 30 s, ten leases.
    const LeaseRenewer renewer(store, "key", "token", 1s, std::ref(clock), jump(clock, &wall));
    const auto deadline = std::chrono::steady_clock::now() + llmretry_test::scaled(10s);
    while (wall.now().time_since_epoch() < 30s && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
  }
  const auto held = store.claim("key", "fingerprint", "other");
  CHECK(held.status == llmretry::store::ClaimStatus::in_flight);
  wall.advance(3s);
  CHECK(store.claim("key", "fingerprint", "other").status == llmretry::store::ClaimStatus::claimed);
}

TEST_CASE("run_main: the body's status, 2 for a UsageError, what `other` says for any other exception", "[program]") {
  using llmretry_tools::Exit;
  using llmretry_tools::MainOptions;
  using llmretry_tools::run_main;
  using llmretry_tools::UsageError;
  CHECK(run_main("tool", [] { return 7; }) == 7);
  CHECK(run_main("tool", []() -> int { throw UsageError("--x: bad"); }) == 2);
  CHECK(run_main("tool", []() -> int { throw std::runtime_error("broken"); }) == 1);
  MainOptions options;
  options.usage_suffix = " (see --help)";
  options.other = [](const std::exception& error) { return Exit{3, std::string("stopped: ") + error.what()}; };
  CHECK(run_main(
            "tool", []() -> int { throw UsageError("--x: bad"); }, options) == 2);
  CHECK(run_main(
            "tool", []() -> int { throw std::runtime_error("broken"); }, options) == 3);
}

TEST_CASE("parse_duration: every number carries its unit, 0 alone may go without; the option and the range named",
          "[duration]") {
  using llmretry_tools::parse_duration;
  const auto parse = [](std::string_view text) { return parse_duration("--wait", text, 0ms, 1h); };
  CHECK(parse("30s") == 30s);
  CHECK(parse("500ms") == 500ms);
  CHECK(parse("1m30s") == 90s);
  CHECK(parse("0.5s") == 500ms);
  CHECK(parse("1h") == 1h);
  CHECK(parse("500us") == 1ms);  // rounded up to a whole millisecond
  CHECK(parse("0") == 0ms);
  CHECK(parse("0s") == 0ms);
  CHECK_THROWS_WITH(parse("500"), "--wait: \"500\" has no unit: write it as 500ms, 500s or 500m");
  CHECK_THROWS_WITH(parse("0.5"), "--wait: \"0.5\" has no unit: write it as 0.5ms, 0.5s or 0.5m");
  for (const std::string_view text : {"", "soon", "-5s", "5 s", "5sec", "s", "1m30"}) {
    INFO(text);
    CHECK_THROWS_WITH(parse(text),
                      "--wait: \"" + std::string(text) + "\" is not a duration such as 30s, 500ms or 1m30s");
  }
  CHECK_THROWS_WITH(parse_duration("--timeout", "5ms", 10ms, 10min), "--timeout: 5ms is outside 10ms to 10m");
  CHECK_THROWS_WITH(parse("61m"), "--wait: 61m is outside 0 to 1h");
  CHECK_THROWS_WITH(parse("99999999999999999h"), "--wait: 99999999999999999h is outside 0 to 1h");  // saturated
  CHECK_THROWS_AS(parse("500"), llmretry_tools::UsageError);
}

TEST_CASE("duration_text: the largest of h, m and s that divides it, else ms", "[duration]") {
  using llmretry_tools::duration_text;
  CHECK(duration_text(0ms) == "0");
  CHECK(duration_text(1h) == "1h");
  CHECK(duration_text(90min) == "90m");
  CHECK(duration_text(90s) == "90s");
  CHECK(duration_text(1min) == "1m");
  CHECK(duration_text(250ms) == "250ms");
  CHECK(duration_text(1500ms) == "1500ms");
}
