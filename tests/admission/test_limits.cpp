#include <llmretry/admission/limits.hpp>
#include <llmretry/admission/tokens.hpp>

#include <cstdint>
#include <limits>
#include <string>

#include "llmretry_catch.hpp"

using namespace llmretry;
using namespace std::chrono_literals;

TEST_CASE("Each dimension is charged its part of a cost", "[limits]") {
  const Cost cost{1, 300, 700};
  CHECK(cost.tokens() == 1000);
  CHECK(charge_of(cost, Dimension::requests_per_minute) == 1);
  CHECK(charge_of(cost, Dimension::requests_per_day) == 1);
  CHECK(charge_of(cost, Dimension::tokens_per_minute) == 1000);
  CHECK(charge_of(cost, Dimension::tokens_per_day) == 1000);
  CHECK(charge_of(cost, Dimension::input_tokens_per_minute) == 300);
  CHECK(charge_of(cost, Dimension::output_tokens_per_minute) == 700);
  CHECK(std::string(to_string(Dimension::output_tokens_per_minute)) == "output_tokens_per_minute");
  constexpr std::int64_t max = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t min = std::numeric_limits<std::int64_t>::min();
  STATIC_REQUIRE(Cost{1, 18, max}.tokens() == max);  // saturated: a usage reported is untrusted
  STATIC_REQUIRE(Cost{1, max, max}.tokens() == max);
  STATIC_REQUIRE(Cost{1, -18, min}.tokens() == min);
  STATIC_REQUIRE(Cost{1, max, min}.tokens() == -1);
  STATIC_REQUIRE(charge_of(Cost{1, max, max}, Dimension::tokens_per_minute) == 2'000'000'000'000);
}

TEST_CASE("Limit helpers", "[limits]") {
  constexpr Limit rpm = Limit::per_minute(600, 10);
  STATIC_REQUIRE(rpm.period == 60s);
  STATIC_REQUIRE(rpm.burst_or_limit() == 10);
  STATIC_REQUIRE(Limit::per_minute(600).burst_or_limit() == 600);
  STATIC_REQUIRE(Limit::per_day(1000).period == std::chrono::hours{24});
  STATIC_REQUIRE(Limit::per_minute_paced(600).limit == 600);
  STATIC_REQUIRE(Limit::per_minute_paced(600).burst_or_limit() == 10);
  STATIC_REQUIRE(Limit::per_minute_paced(30).burst_or_limit() == 1);
  // A wait the provider reported, bounded to [0, a day].
  STATIC_REQUIRE(at_most_a_day(-5ms) == 0ms);
  STATIC_REQUIRE(at_most_a_day(std::chrono::milliseconds::min()) == 0ms);
  STATIC_REQUIRE(at_most_a_day(48h) == 24h);
  STATIC_REQUIRE(at_most_a_day(90s) == 90s);
  const Limits limits = Limits::per_minute(600, 300'000);
  CHECK(limits[Dimension::requests_per_minute]->limit == 600);
  CHECK(limits[Dimension::tokens_per_minute]->limit == 300'000);
  CHECK_FALSE(limits[Dimension::tokens_per_day]);
}

TEST_CASE("Limits::validate names the dimension and the field", "[limits]") {
  Limits limits;
  CHECK_NOTHROW(limits.validate());
  limits[Dimension::requests_per_minute] = Limit{10, 0ms, std::nullopt};
  CHECK_THROWS_WITH(limits.validate(), "Limits: requests_per_minute.period must be in [1 ms, 1 day]");
  limits[Dimension::requests_per_minute] = Limit{10, 1s, 0};
  CHECK_THROWS_WITH(limits.validate(), "Limits: requests_per_minute.burst must be in [1, limit]");
}

TEST_CASE("Token estimates: characters / 4, and the upper bound of a call", "[tokens]") {
  STATIC_REQUIRE(estimate_tokens("") == 0);
  STATIC_REQUIRE(estimate_tokens("abcd") == 1);
  STATIC_REQUIRE(estimate_tokens("abcde") == 2);
  CHECK(estimate_tokens("\xC3\xA9t\xC3\xA9s") == 1);  // "étés": 4 characters, 6 bytes
  constexpr Cost cost = estimate_cost(std::string_view("Summarise this ticket please"), 256, 2);
  STATIC_REQUIRE(cost.requests == 1);
  STATIC_REQUIRE(cost.input_tokens == 7);
  STATIC_REQUIRE(cost.output_tokens == 512);
  STATIC_REQUIRE(estimate_cost(1200, 300).tokens() == 1500);
}
