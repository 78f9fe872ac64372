#include <llmretry/backoff.hpp>

#include <climits>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "llmretry_catch.hpp"

using llmretry::backoff;
using llmretry::Jitter;
using llmretry::jittered;
using llmretry::RetryPolicy;
using std::chrono::milliseconds;
using namespace std::chrono_literals;

TEST_CASE("backoff doubles from base up to the cap", "[backoff]") {
  SECTION("base 0.5 s: 0.5, 1, 2, 4, 8, then 8") {
    const RetryPolicy policy;
    std::vector<milliseconds> waits;
    for (int attempt = 1; attempt <= 5; ++attempt) waits.push_back(backoff(attempt, policy));
    CHECK(waits == std::vector<milliseconds>{500ms, 1s, 2s, 4s, 8s});
    CHECK(backoff(6, policy) == 8s);
  }
  SECTION("base 1 s: 1, 2, 4") {
    RetryPolicy policy;
    policy.base = 1s;
    CHECK(backoff(1, policy) == 1s);
    CHECK(backoff(2, policy) == 2s);
    CHECK(backoff(3, policy) == 4s);
  }
  SECTION("base 4 s: 4, 8, 8") {
    RetryPolicy policy;
    policy.base = 4s;
    CHECK(backoff(1, policy) == 4s);
    CHECK(backoff(2, policy) == 8s);
    CHECK(backoff(3, policy) == 8s);
  }
}

TEST_CASE("backoff saturates instead of overflowing", "[backoff]") {
  RetryPolicy policy;
  CHECK(backoff(INT_MAX, policy) == policy.cap);
  CHECK(backoff(64, policy) == policy.cap);
  CHECK(backoff(65, policy) == policy.cap);
  policy.base = 1ms;
  policy.cap = milliseconds::max();
  CHECK(backoff(INT_MAX, policy) == milliseconds::max());
  CHECK(backoff(63, policy) == milliseconds{std::int64_t{1} << 62});
  CHECK(backoff(64, policy) == milliseconds::max());
  policy.base = 0ms;
  CHECK(backoff(INT_MAX, policy) == 0ms);
}

TEST_CASE("backoff treats an attempt below 1 as the first", "[backoff]") {
  const RetryPolicy policy;
  CHECK(backoff(0, policy) == 500ms);
  CHECK(backoff(INT_MIN, policy) == 500ms);
}

TEST_CASE("backoff is usable in constant expressions", "[backoff]") {
  constexpr RetryPolicy policy{4, milliseconds{500}, milliseconds{8000}, milliseconds{20000}, Jitter::none, {}};
  static_assert(backoff(3, policy) == milliseconds{2000});
  SUCCEED();
}

TEST_CASE("jitter none draws nothing and returns the backoff", "[backoff][jitter]") {
  RetryPolicy policy;
  policy.jitter = Jitter::none;
  std::mt19937_64 rng(1);
  const auto before = rng;
  CHECK(jittered(2s, 500ms, policy, rng) == 2s);
  CHECK(rng == before);
}

namespace {
// Draws n waits and checks each lies in [low, high]; returns them.
template <class Draw>
std::vector<std::int64_t> draws_within(Draw draw, std::int64_t low, std::int64_t high, int n = 20000) {
  std::vector<std::int64_t> values;
  values.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const auto value = draw().count();
    REQUIRE(value >= low);
    REQUIRE(value <= high);
    values.push_back(value);
  }
  return values;
}

double mean(const std::vector<std::int64_t>& values) {
  double sum = 0;
  for (auto v : values) sum += static_cast<double>(v);
  return sum / static_cast<double>(values.size());
}
}  // namespace

TEST_CASE("jitter draws stay inside their bounds and are unbiased", "[backoff][jitter]") {
  std::mt19937_64 rng(20260623);
  RetryPolicy policy;
  SECTION("full: uniform in [0, backoff], mean backoff / 2") {
    policy.jitter = Jitter::full;
    const auto values = draws_within([&] { return jittered(1000ms, 500ms, policy, rng); }, 0, 1000);
    CHECK(mean(values) == Approx(500).epsilon(0.02));
    // Both ends are reachable: the range is closed.
    std::map<std::int64_t, int> small;
    policy.jitter = Jitter::full;
    for (int i = 0; i < 3000; ++i) ++small[jittered(2ms, 500ms, policy, rng).count()];
    CHECK(small.size() == 3);
    for (const auto& [value, count] : small) CHECK(count == Approx(1000).epsilon(0.15));
  }
  SECTION("equal: backoff / 2 + uniform in [0, backoff / 2]") {
    policy.jitter = Jitter::equal;
    const auto values = draws_within([&] { return jittered(1000ms, 500ms, policy, rng); }, 500, 1000);
    CHECK(mean(values) == Approx(750).epsilon(0.02));
  }
  SECTION("decorrelated: min(cap, uniform in [base, 3 * previous])") {
    policy.jitter = Jitter::decorrelated;
    const auto values = draws_within([&] { return jittered(1000ms, 1000ms, policy, rng); }, 500, 3000);
    CHECK(mean(values) == Approx(1750).epsilon(0.02));
    // The cap bounds it.
    draws_within([&] { return jittered(8s, 7s, policy, rng); }, 500, 8000, 2000);
    // A previous wait below base still draws from [base, base].
    draws_within([&] { return jittered(1s, 0ms, policy, rng); }, 500, 500, 100);
  }
}

TEST_CASE("jitter works with any UniformRandomBitGenerator", "[backoff][jitter]") {
  RetryPolicy policy;
  SECTION("32-bit engine") {
    std::mt19937 rng(3);
    draws_within([&] { return jittered(700ms, 500ms, policy, rng); }, 0, 700, 1000);
  }
  SECTION("an engine whose range is not a power of two") {
    std::minstd_rand rng(3);
    const auto values = draws_within([&] { return jittered(1000ms, 500ms, policy, rng); }, 0, 1000, 20000);
    CHECK(mean(values) == Approx(500).epsilon(0.03));
  }
  SECTION("huge backoff with a 64-bit range") {
    std::mt19937_64 rng(3);
    policy.cap = milliseconds::max();
    draws_within([&] { return jittered(milliseconds::max(), 500ms, policy, rng); }, 0, milliseconds::max().count(),
                 100);
  }
}
