#include <llmretry/admission/rate_limiter.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <thread>
#include <vector>

#include "helpers.hpp"
#include "llmretry_catch.hpp"

using namespace llmretry;
using namespace std::chrono_literals;
using std::chrono::milliseconds;
using time_point = RateLimiter::time_point;
using llmretry_test::tokens;

namespace {
const time_point t0 = time_point{} + 1000s;

Limits rpm(std::int64_t limit, std::optional<std::int64_t> burst = {}) {
  Limits limits;
  limits[Dimension::requests_per_minute] = Limit::per_minute(limit, burst);
  return limits;
}

}  // namespace

TEST_CASE("Requests start as fast as the burst allows, then evenly spaced", "[rate_limiter]") {
  RateLimiter limiter{rpm(600, 10)};  // 600 a minute, 10 at once: one every 100 ms after the burst
  for (int i = 0; i < 10; ++i) {
    const auto r = limiter.reserve(Cost{}, t0);
    REQUIRE(r.granted());
    CHECK(r.wait_after(t0) == 0ms);
  }
  for (int i = 1; i <= 5; ++i) CHECK(limiter.reserve(Cost{}, t0).wait_after(t0) == milliseconds{100 * i});
  // Half a second later, those five have started and the bucket is empty again: the next waits 100 ms.
  CHECK(limiter.reserve(Cost{}, t0 + 500ms).wait_after(t0 + 500ms) == 100ms);
}

TEST_CASE("A reservation takes every dimension at once and waits for the slowest", "[rate_limiter]") {
  Limits limits = Limits::per_minute(600, 6000);  // 100 tokens a second
  RateLimiter limiter{limits};
  const auto first = limiter.reserve(tokens(6000), t0);  // the whole token bucket
  REQUIRE(first.granted());
  CHECK(first.wait_after(t0) == 0ms);
  const auto second = limiter.reserve(tokens(100), t0);
  CHECK(second.wait_after(t0) == 1s);  // 100 tokens refill in 1 s; requests had room
  CHECK(second.limited_by() == Dimension::tokens_per_minute);
}

TEST_CASE("A cost above a limit is refused at once and holds nothing", "[rate_limiter]") {
  RateLimiter limiter{Limits::per_minute(600, 6000)};
  const auto huge = limiter.reserve(tokens(5000, 2000), t0);
  CHECK(huge.status() == ReservationStatus::too_large);
  CHECK(huge.limited_by() == Dimension::tokens_per_minute);
  CHECK_FALSE(huge.open());
  CHECK(limiter.reserve(tokens(6000), t0).wait_after(t0) == 0ms);  // nothing was taken
  CHECK(limiter.stats().refused == 1);
}

TEST_CASE("Each dimension judges its own part of a cost, whatever the other limits", "[rate_limiter]") {
  SECTION("input and output tokens are judged apart from their sum") {
    Limits limits;
    limits[Dimension::requests_per_minute] = Limit::per_minute(10);
    limits[Dimension::output_tokens_per_minute] = Limit::per_minute(100);
    RateLimiter limiter{limits};
    CHECK(limiter.reserve(tokens(500, 50), t0).granted());  // 550 tokens, but only 50 count against 100
    const auto output = limiter.reserve(tokens(0, 101), t0);
    CHECK(output.status() == ReservationStatus::too_large);
    CHECK(output.limited_by() == Dimension::output_tokens_per_minute);
  }
  SECTION("the first dimension exceeded decides") {
    Limits limits;
    limits[Dimension::tokens_per_minute] = Limit::per_minute(1000);
    limits[Dimension::input_tokens_per_minute] = Limit::per_minute(200);
    RateLimiter limiter{limits};
    CHECK(limiter.reserve(tokens(150, 800), t0).granted());
    CHECK(limiter.reserve(tokens(201), t0).limited_by() == Dimension::input_tokens_per_minute);
    CHECK(limiter.reserve(tokens(150, 900), t0).limited_by() == Dimension::tokens_per_minute);
    CHECK(limiter.reserve(tokens(300, 800), t0).limited_by() == Dimension::tokens_per_minute);  // over both
    CHECK(limiter.stats().refused == 3);                                                        // the three too large
  }
  SECTION("parts out of range count as bounded, even when their sum would wrap around") {
    Limits limits = Limits::per_minute(600, 1000);
    RateLimiter limiter{limits};
    constexpr std::int64_t huge = 1'000'000'000'000'000;
    const auto wrapped = limiter.reserve(Cost{1, -huge, huge + 5}, t0);  // 0 + 10^12 tokens
    CHECK(wrapped.status() == ReservationStatus::too_large);
    CHECK(wrapped.limited_by() == Dimension::tokens_per_minute);
    CHECK(limiter.reserve(Cost{-3, 0, 0}, t0).granted());  // no request counted
    const auto requests = limiter.reserve(Cost{2'000, 0, 0}, t0);
    CHECK(requests.status() == ReservationStatus::too_large);
    CHECK(requests.limited_by() == Dimension::requests_per_minute);
  }
  SECTION("per-day limits count requests and tokens as the per-minute ones do") {
    Limits limits;
    limits[Dimension::requests_per_day] = Limit::per_day(100);
    limits[Dimension::tokens_per_day] = Limit::per_day(10'000);
    RateLimiter limiter{limits};
    const auto requests = limiter.reserve(Cost{101, 0, 0}, t0);
    CHECK(requests.status() == ReservationStatus::too_large);
    CHECK(requests.limited_by() == Dimension::requests_per_day);
    const auto day_tokens = limiter.reserve(tokens(5'000, 5'001), t0);
    CHECK(day_tokens.status() == ReservationStatus::too_large);
    CHECK(day_tokens.limited_by() == Dimension::tokens_per_day);
    CHECK(limiter.reserve(Cost{100, 5'000, 5'000}, t0).granted());
  }
  SECTION("a limit lowered or learned refuses what no longer fits") {
    RateLimiter limiter{Limits::per_minute(600, 10'000)};
    CHECK(limiter.reserve(tokens(2000), t0).granted());
    RateLimits reported;
    reported.tokens.limit = 1000;
    limiter.learn(reported, t0);
    const auto lowered = limiter.reserve(tokens(0, 1001), t0);
    CHECK(lowered.status() == ReservationStatus::too_large);
    CHECK(lowered.limited_by() == Dimension::tokens_per_minute);
    reported.input_tokens.limit = 500;
    limiter.learn(reported, t0);
    const auto learned = limiter.reserve(tokens(600), t0);
    CHECK(learned.status() == ReservationStatus::too_large);
    CHECK(learned.limited_by() == Dimension::input_tokens_per_minute);
  }
}

TEST_CASE("A cost above the burst but within the limit waits for a full bucket", "[rate_limiter]") {
  Limits limits;
  limits[Dimension::tokens_per_minute] = Limit::per_minute(6000, 100);  // 100 tokens a second, 100 at once
  RateLimiter limiter{limits};
  CHECK(limiter.reserve(tokens(300), t0).wait_after(t0) == 0ms);  // full: it goes, and owes 2 s more
  CHECK(limiter.reserve(tokens(100), t0).wait_after(t0) == 3s);
}

TEST_CASE("A wait longer than allowed is refused and holds nothing", "[rate_limiter]") {
  RateLimiter limiter{rpm(60, 1)};  // one a second
  REQUIRE(limiter.reserve(Cost{}, t0).granted());
  const auto late = limiter.reserve(Cost{}, t0, 500ms);
  CHECK(late.status() == ReservationStatus::too_long);
  CHECK(late.wait_after(t0) == 1s);
  CHECK_FALSE(late.open());
  CHECK(limiter.reserve(Cost{}, t0, 1s).wait_after(t0) == 1s);  // the refused one left no trace
}

TEST_CASE("Cancel gives the capacity back; settle charges the actual usage", "[rate_limiter]") {
  Limits limits;
  limits[Dimension::tokens_per_minute] = Limit::per_minute(6000, 1000);  // 100 tokens a second
  RateLimiter limiter{limits};

  SECTION("cancel") {
    auto r = limiter.reserve(tokens(1000), t0);
    limiter.cancel(r);
    CHECK_FALSE(r.open());
    CHECK(limiter.reserve(tokens(1000), t0).wait_after(t0) == 0ms);
    CHECK(limiter.stats().tokens_released == 1000);
  }
  SECTION("settle refunds what was not used") {
    auto r = limiter.reserve(tokens(200, 800), t0);  // prompt + max_tokens
    limiter.settle(r, tokens(200, 100), t0);         // the answer used 100 of its 800
    CHECK(limiter.reserve(tokens(700), t0).wait_after(t0) == 0ms);
    CHECK(limiter.reserve(tokens(100), t0).wait_after(t0) == 1s);
    const auto stats = limiter.stats();
    CHECK(stats.tokens_reserved == 1800);
    CHECK(stats.tokens_used == 300);
  }
  SECTION("settle charges an overrun") {
    auto r = limiter.reserve(tokens(500), t0);
    limiter.settle(r, tokens(1500), t0);
    CHECK(limiter.reserve(tokens(100), t0).wait_after(t0) == 6s);  // 500 tokens of debt beyond the burst, then 100
  }
  SECTION("no refund while a reservation waits to start: that capacity is promised") {
    auto first = limiter.reserve(tokens(1000), t0);
    const auto second = limiter.reserve(tokens(500), t0);
    REQUIRE(second.wait_after(t0) == 5s);
    limiter.settle(first, tokens(100), t0 + 1s);  // the second has not started: the 900 stay charged
    CHECK(limiter.reserve(tokens(100), t0 + 1s).wait_after(t0 + 1s) == 5s);
  }
  SECTION("a reservation that started at once holds no refund back, even one made at a later time") {
    auto first = limiter.reserve(tokens(500), t0);
    REQUIRE(limiter.reserve(tokens(100), t0 + 2s).wait_after(t0 + 2s) == 0ms);
    limiter.settle(first, tokens(100), t0 + 1s);  // 400 back: the burst is free again at t0 + 2 s
    CHECK(limiter.reserve(tokens(800), t0 + 2s).wait_after(t0 + 2s) == 0ms);  // 2 s if kept charged
    CHECK(limiter.reserve(tokens(300), t0 + 2s).wait_after(t0 + 2s) == 1s);
  }
  SECTION("a reservation refused as too long holds no refund back") {
    auto first = limiter.reserve(tokens(500), t0);
    // It would wait 5 s.
    REQUIRE(limiter.reserve(tokens(1000), t0, 1s).status() == ReservationStatus::too_long);
    limiter.settle(first, tokens(100), t0);  // nothing waits: 400 back
    CHECK(limiter.reserve(tokens(900), t0).wait_after(t0) == 0ms);
  }
  SECTION("a reservation refused as too long leaves the waits before it holding refunds back") {
    auto first = limiter.reserve(tokens(500), t0);
    REQUIRE(limiter.reserve(tokens(1000), t0).wait_after(t0) == 5s);
    // It would wait 6 s.
    REQUIRE(limiter.reserve(tokens(100), t0, 1s).status() == ReservationStatus::too_long);
    limiter.settle(first, tokens(100), t0 + 1s);  // the second waits until t0 + 5 s: the 400 stay charged
    CHECK(limiter.reserve(tokens(100), t0 + 1s).wait_after(t0 + 1s) == 5s);
  }
  SECTION("a reservation is settled or cancelled once") {
    auto r = limiter.reserve(tokens(1000), t0);
    limiter.settle(r, tokens(1000), t0);
    limiter.cancel(r);
    limiter.settle(r, tokens(0), t0);
    CHECK(limiter.reserve(tokens(100), t0).wait_after(t0) == 1s);
  }
}

TEST_CASE("A reservation refused as too long forgets only the waits it noted", "[rate_limiter]") {
  Limits limits;
  limits[Dimension::requests_per_minute] = Limit::per_minute(60, 1);     // one a second
  limits[Dimension::tokens_per_minute] = Limit::per_minute(6000, 1000);  // 100 tokens a second
  RateLimiter limiter{limits};
  auto first = limiter.reserve(tokens(500), t0);
  // The second waits on tokens only, the third on requests only, too long.
  REQUIRE(limiter.reserve(Cost{0, 1000, 0}, t0).wait_after(t0) == 5s);
  REQUIRE(limiter.reserve(Cost{}, t0, 500ms).status() == ReservationStatus::too_long);
  limiter.settle(first, tokens(100), t0 + 1s);  // the second still waits on tokens: the 400 stay charged
  CHECK(limiter.reserve(Cost{0, 100, 0}, t0 + 1s).wait_after(t0 + 1s) == 5s);
}

TEST_CASE("Settling with what was reserved changes no level, unless a limit changed since", "[rate_limiter]") {
  SECTION("the estimate charged as reserved: the next call waits as before") {
    RateLimiter limiter{rpm(600, 1)};  // one every 100 ms
    auto r = limiter.reserve(Cost{}, t0);
    limiter.settle(r, Cost{}, t0);
    CHECK_FALSE(r.open());
    CHECK(limiter.reserve(Cost{}, t0).wait_after(t0) == 100ms);
  }
  SECTION("a limit learned between reserve and settle: the reservation is charged at the new rate") {
    RateLimiter limiter{rpm(600, 1)};
    auto r = limiter.reserve(Cost{}, t0);  // 100 ms of capacity at 600 a minute
    RateLimits reported;
    reported.requests.limit = 60;  // one a second
    limiter.learn(reported, t0);
    limiter.settle(r, Cost{}, t0);  // charged 1 s now: the next call waits for it
    CHECK(limiter.reserve(Cost{}, t0).wait_after(t0) == 1s);
  }
  SECTION("a slow-down between reserve and settle: likewise") {
    RateLimiter limiter{rpm(600, 1)};
    auto r = limiter.reserve(Cost{}, t0);
    REQUIRE(limiter.slow_down(t0));  // 420 a minute: 142.857... ms each
    limiter.settle(r, Cost{}, t0);
    CHECK(limiter.reserve(Cost{}, t0).wait_after(t0) == 143ms);
  }
  SECTION("other tokens than estimated, with only requests paced: the usage is counted, no level moves") {
    RateLimiter limiter{rpm(600, 1)};
    auto r = limiter.reserve(tokens(100, 900), t0);
    limiter.settle(r, tokens(100, 50), t0);
    CHECK(limiter.reserve(Cost{}, t0).wait_after(t0) == 100ms);
    CHECK(limiter.stats().tokens_reserved == 1000);
    CHECK(limiter.stats().tokens_used == 150);
  }
}

TEST_CASE("A pause holds every reservation until it ends", "[rate_limiter]") {
  RateLimiter limiter{rpm(600)};
  limiter.pause_until(t0 + 2s);
  limiter.pause_until(t0 + 1s);  // an earlier end changes nothing
  CHECK(limiter.paused_until() == t0 + 2s);
  CHECK(limiter.reserve(Cost{}, t0).wait_after(t0) == 2s);
  CHECK(limiter.reserve(Cost{}, t0 + 3s).wait_after(t0 + 3s) == 0ms);
}

TEST_CASE("The provider's headers teach limits and levels", "[rate_limiter]") {
  SECTION("a dimension without a limit takes the reported one") {
    RateLimiter limiter;
    CHECK_FALSE(limiter.limit(Dimension::requests_per_minute));
    RateLimits reported;
    reported.requests = RateLimitWindow{60, 60, std::nullopt};
    limiter.learn(reported, t0);
    REQUIRE(limiter.limit(Dimension::requests_per_minute));
    CHECK(limiter.limit(Dimension::requests_per_minute)->limit == 60);
  }
  SECTION("a configured limit above the reported one comes down") {
    RateLimiter limiter{rpm(600)};
    RateLimits reported;
    reported.requests.limit = 300;
    limiter.learn(reported, t0);
    CHECK(limiter.limit(Dimension::requests_per_minute)->limit == 300);
    reported.requests.limit = 900;  // never raised above what was configured
    limiter.learn(reported, t0);
    CHECK(limiter.limit(Dimension::requests_per_minute)->limit == 300);
  }
  SECTION("the level follows what others used: no more free than remaining") {
    RateLimiter limiter{rpm(60, 60)};
    RateLimits reported;
    reported.requests = RateLimitWindow{60, 2, 30s};
    limiter.learn(reported, t0);
    CHECK(limiter.reserve(Cost{}, t0).wait_after(t0) == 0ms);
    CHECK(limiter.reserve(Cost{}, t0).wait_after(t0) == 0ms);
    CHECK(limiter.reserve(Cost{}, t0).wait_after(t0) == 1s);  // the third waits for one to come back
  }
  SECTION("without remaining: full again after the reset") {
    RateLimiter limiter{rpm(60, 60)};
    RateLimits reported;
    reported.requests.reset_after = 30s;
    limiter.learn(reported, t0);
    CHECK(limiter.reserve(Cost{}, t0).wait_after(t0) == 0ms);  // 30 of 60 are free
  }
  SECTION("a level is never lowered by a report") {
    RateLimiter limiter{rpm(60, 1)};
    REQUIRE(limiter.reserve(Cost{}, t0).granted());
    RateLimits reported;
    reported.requests = RateLimitWindow{60, 60, std::nullopt};
    limiter.learn(reported, t0);
    CHECK(limiter.reserve(Cost{}, t0).wait_after(t0) == 1s);
  }
}

TEST_CASE("slow_down: x 0.7 at most once a second, then 1 % of the limit back per second", "[rate_limiter]") {
  RateLimiter limiter{rpm(1000)};
  CHECK(limiter.slow_down(t0));
  CHECK_FALSE(limiter.slow_down(t0 + 500ms));
  CHECK(limiter.limit(Dimension::requests_per_minute)->limit == 700);
  CHECK(limiter.slow_down(t0 + 1s));
  CHECK(limiter.limit(Dimension::requests_per_minute)->limit == 490);
  (void)limiter.reserve(Cost{}, t0 + 11s);  // 10 s later: +10 x 10
  CHECK(limiter.limit(Dimension::requests_per_minute)->limit == 590);
  (void)limiter.reserve(Cost{}, t0 + 200s);
  CHECK(limiter.limit(Dimension::requests_per_minute)->limit == 1000);  // never above the configured limit
  SECTION("a reservation held back recovers the limit too") {
    REQUIRE(limiter.slow_down(t0 + 300s));
    limiter.pause_until(t0 + 400s);
    Precedence batch;
    batch.ahead = false;
    CHECK(limiter.reserve(Cost{}, t0 + 310s, std::nullopt, batch).status() == ReservationStatus::held_back);
    CHECK(limiter.limit(Dimension::requests_per_minute)->limit == 800);
  }
}

TEST_CASE("Limits that make no sense are refused, naming the dimension", "[rate_limiter]") {
  Limits limits;
  limits[Dimension::tokens_per_day] = Limit{0, std::chrono::hours{24}, std::nullopt};
  try {
    RateLimiter limiter{limits};
    FAIL("accepted");
  } catch (const std::invalid_argument& error) {
    CHECK(std::string(error.what()) == "Limits: tokens_per_day.limit must be in [1, 10^12]");
  }
  limits[Dimension::tokens_per_day] = Limit{10, std::chrono::hours{24}, 11};
  CHECK_THROWS_WITH(RateLimiter{limits}, "Limits: tokens_per_day.burst must be in [1, limit]");
}

TEST_CASE("Reservations from many threads are neither lost nor doubled", "[rate_limiter][threads]") {
  RateLimiter limiter{rpm(6000, 1)};  // one every 10 ms
  constexpr int threads = 4, each = 2000;
  std::vector<std::thread> pool;
  std::vector<std::vector<milliseconds>> waits(threads);
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int i = 0; i < each; ++i) {
        auto r = limiter.reserve(Cost{}, t0);
        waits[static_cast<std::size_t>(t)].push_back(r.wait_after(t0));
      }
    });
  for (auto& thread : pool) thread.join();
  std::vector<milliseconds> all;
  for (const auto& some : waits) all.insert(all.end(), some.begin(), some.end());
  std::sort(all.begin(), all.end());
  for (std::size_t i = 0; i < all.size(); ++i) REQUIRE(all[i] == milliseconds{10 * static_cast<long long>(i)});
  CHECK(limiter.stats().granted == threads * each);
}

TEST_CASE("Settles without the lock race learning and slowing down: nothing lost, nothing charged twice",
          "[rate_limiter][threads]") {
  // Three threads reserve one request and settle it with the estimate (the path without the lock) while a
  // fourth slows the limiter down and learns a lower limit (which re-rates the settles after it, under the
  // lock). Every usage is counted once, and the level ends where the slowest rate alone puts it at most.
  constexpr int threads = 3, each = 20'000;
  RateLimiter limiter{rpm(6'000'000, 6'000'000)};
  std::atomic<bool> done{false};
  std::thread changer([&] {
    for (int k = 0; !done; ++k) {
      (void)limiter.slow_down(t0 + std::chrono::seconds{k});
      RateLimits reported;
      reported.requests.limit = 6'000'000 - k;
      limiter.learn(reported, t0);
    }
  });
  std::atomic<int> left_open{0};  // Catch2 assertions are not thread-safe: counted here, checked below
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (int i = 0; i < each; ++i) {
        auto r = limiter.reserve(tokens(3, 4), t0);
        limiter.settle(r, tokens(3, 4), t0);
        if (r.open()) ++left_open;
      }
    });
  for (auto& thread : pool) thread.join();
  done = true;
  changer.join();
  CHECK(left_open == 0);
  const auto stats = limiter.stats();
  CHECK(stats.granted == threads * each);
  CHECK(stats.tokens_reserved == 7 * threads * each);
  CHECK(stats.tokens_used == 7 * threads * each);
}

TEST_CASE("Each reservation sees one whole configuration while another thread slows the limiter down",
          "[rate_limiter][threads]") {
  // One dimension switched between two configurations: 6000 a minute (one every 10 ms) and 0.7 of that,
  // slowed down by another thread; each reservation is made at `at`, more than 100 s after every slow-down,
  // so it recovers the full limit first. The burst is never below the limit, so in either configuration a
  // call may start a full period before the level, and each reservation moves the level by 10 ms or more:
  // the k-th start (in order) is no earlier than at + k x 10 ms - 60 s, and after the burst (the starts at
  // `at`) no two are less than 10 ms apart, as the faster configuration alone allows. A reservation that
  // mixed the two (one limit's burst timed at the other's rate) would start off that grid.
  constexpr std::int64_t limit = 6000;
  constexpr auto period = std::chrono::nanoseconds{60s};
  constexpr auto spacing = std::chrono::nanoseconds{10ms};
  constexpr int rounds = 10, slow_downs = 100'000, threads = 3, each = 4000;
  const time_point at = t0 + std::chrono::seconds{slow_downs + 101};
  for (int round = 0; round < rounds; ++round) {
    RateLimiter limiter{rpm(limit)};
    std::atomic<int> finished{0};
    std::atomic<bool> slowed{false};
    std::thread slower([&] {
      for (int k = 0; k < slow_downs && finished < threads; ++k) {
        if (limiter.slow_down(t0 + std::chrono::seconds{k})) slowed = true;
        RateLimits reported;  // the same limit reported: learning reads the cell while others reserve
        reported.requests.limit = limit;
        limiter.learn(reported, t0 + std::chrono::seconds{k});
      }
    });
    std::vector<std::vector<time_point>> starts(threads);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        while (!slowed) std::this_thread::yield();  // reserve while the other thread slows down
        for (int i = 0; i < each; ++i)
          starts[static_cast<std::size_t>(t)].push_back(limiter.reserve(Cost{}, at).start());
        ++finished;
      });
    for (auto& thread : pool) thread.join();
    slower.join();
    std::vector<time_point> all;
    for (const auto& some : starts) all.insert(all.end(), some.begin(), some.end());
    std::sort(all.begin(), all.end());
    for (std::size_t k = 1; k <= all.size(); ++k) {
      INFO("round " << round << ", start " << k << " of " << all.size());
      REQUIRE(all[k - 1] >= std::max(at, at + static_cast<std::int64_t>(k) * spacing - period));
      if (k > 1 && all[k - 2] > at) REQUIRE(all[k - 1] - all[k - 2] >= spacing);
    }
    CHECK(limiter.stats().granted == threads * each);
  }
}

TEST_CASE("After a pause, calls start at the limit's rate, not all together", "[rate_limiter]") {
  RateLimiter limiter{rpm(600, 10)};  // 10 at once, then one every 100 ms
  limiter.pause_until(t0 + 20s);
  std::vector<milliseconds> waits;
  for (int i = 0; i < 12; ++i) waits.push_back(limiter.reserve(Cost{}, t0).wait_after(t0));
  CHECK(waits.front() == 20s);
  CHECK(waits[9] == 20s);        // the burst at the end of the pause
  CHECK(waits[10] == 20'100ms);  // then spaced again
  CHECK(waits[11] == 20'200ms);
}

TEST_CASE("Refusals within the provider's wait set the limits back once", "[rate_limiter]") {
  RateLimiter limiter{rpm(60, 1)};
  for (int i = 0; i < 16; ++i) limiter.set_back(500ms, t0);    // sixteen workers refused by one overload
  CHECK(limiter.reserve(Cost{}, t0).wait_after(t0) == 500ms);  // half a second of capacity taken, once
  CHECK(limiter.reserve(Cost{}, t0).wait_after(t0) == 1500ms);
  limiter.set_back(500ms, t0 + 600ms);  // a later overload counts again
  CHECK(limiter.reserve(Cost{}, t0 + 600ms).wait_after(t0 + 600ms) == 2400ms);
}

TEST_CASE("A cost within the configured limit is not refused while slowed down", "[rate_limiter]") {
  Limits limits;
  limits[Dimension::tokens_per_minute] = Limit::per_minute(1000);
  RateLimiter limiter{limits};
  REQUIRE(limiter.slow_down(t0));
  CHECK(limiter.limit(Dimension::tokens_per_minute)->limit == 700);
  CHECK(limiter.reserve(tokens(900), t0).granted());
  CHECK(limiter.reserve(tokens(1001), t0).status() == ReservationStatus::too_large);
}

TEST_CASE("A usage above the limit from the provider is charged as the limit, never overflows", "[rate_limiter]") {
  Limits limits;
  limits[Dimension::tokens_per_minute] = Limit::per_minute(6000, 1000);  // 100 tokens a second
  RateLimiter limiter{limits};
  constexpr std::int64_t huge = std::numeric_limits<std::int64_t>::max();
  for (const Cost& reported : {Cost{1, huge, huge}, Cost{1, 18, huge}, Cost{1, 0, 1'000'000'000}, Cost{1, 0, 6000}}) {
    INFO(reported.input_tokens << " + " << reported.output_tokens);
    RateLimiter fresh{limits};
    auto r = fresh.reserve(tokens(100), t0);
    fresh.settle(r, reported, t0);
    // The window's 6,000 tokens are charged (60 s), not the report (years), nor a wrapped-around credit: a
    // reservation of 100 waits for them, less the burst's 10 s, plus its own 1 s.
    const auto later = fresh.reserve(tokens(100), t0);
    CHECK(later.granted());
    CHECK(later.wait_after(t0) == 51s);
  }
  auto below = limiter.reserve(tokens(100), t0);
  limiter.settle(below, tokens(5999), t0);  // an overrun within the limit is charged whole
  CHECK(limiter.reserve(tokens(100), t0).wait_after(t0) == 50990ms);
  auto negative = limiter.reserve(Cost{1, -5, -5}, t0);  // negative parts count as nothing
  CHECK(negative.status() != ReservationStatus::too_large);
}

TEST_CASE("mul_div_up_portable: exact a * b / c rounded up, saturated, in standard C++") {
  constexpr auto mul_div_up = [](std::int64_t a, std::int64_t b, std::int64_t c) {
    return llmretry::detail::mul_div_up_portable(a, b, c);
  };
  constexpr std::int64_t max = std::numeric_limits<std::int64_t>::max();
  CHECK(mul_div_up(0, 60'000'000'000, 7) == 0);
  CHECK(mul_div_up(1, 60'000'000'000, 600) == 100'000'000);
  CHECK(mul_div_up(1, 10, 3) == 4);                   // rounded up
  CHECK(mul_div_up(max, max, max) == max);            // a product of 126 bits, divided back
  CHECK(mul_div_up(max, max, 1) == max);              // saturated
  CHECK(mul_div_up(max, 2, 3) == (max / 3) * 2 + 1);  // 2^64 - 2 over 3, rounded up
  CHECK(mul_div_up(std::int64_t{1} << 40, std::int64_t{1} << 40, std::int64_t{1} << 18) == std::int64_t{1} << 62);
  static_assert(mul_div_up(3, 5, 2) == 8);  // usable in constant expressions
#ifdef __SIZEOF_INT128__
  // Against the compiler's 128-bit arithmetic, on numbers of every size.
  __extension__ using wide = unsigned __int128;
  std::uint64_t state = 0x9E3779B97F4A7C15ULL;
  const auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return static_cast<std::int64_t>(state >> (1 + state % 63));  // 0 to 62 bits
  };
  for (int i = 0; i < 200'000; ++i) {
    const std::int64_t a = next(), b = next(), c = std::max<std::int64_t>(1, next());
    const wide exact = (static_cast<wide>(a) * static_cast<wide>(b) + static_cast<wide>(c) - 1) / static_cast<wide>(c);
    const std::int64_t expected = exact > static_cast<wide>(max) ? max : static_cast<std::int64_t>(exact);
    INFO(a << " * " << b << " / " << c);
    REQUIRE(mul_div_up(a, b, c) == expected);
    REQUIRE(llmretry::detail::mul_div_up(a, b, c) == expected);
  }
#endif
}
