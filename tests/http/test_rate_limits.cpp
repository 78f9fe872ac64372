#include <llmretry/http/rate_limits.hpp>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <llmretry_catch.hpp>

using namespace std::chrono_literals;
using llmretry::parse_rate_limits;
using llmretry::detail::parse_duration_ms;

namespace {
// 2023-11-14T22:13:20Z
const auto now = std::chrono::system_clock::time_point{} + 1'700'000'000s;
}  // namespace

TEST_CASE("provider durations") {
  CHECK(parse_duration_ms("6m0s") == std::chrono::milliseconds{360'000});
  CHECK(parse_duration_ms("1s") == std::chrono::milliseconds{1000});
  CHECK(parse_duration_ms("20ms") == std::chrono::milliseconds{20});
  CHECK(parse_duration_ms("1h2m3.5s") == std::chrono::milliseconds{3'723'500});
  CHECK(parse_duration_ms("1.5s") == std::chrono::milliseconds{1500});
  CHECK(parse_duration_ms("0.000340s") == std::chrono::milliseconds{1});  // rounded up, never early
  CHECK(parse_duration_ms("1500us") == std::chrono::milliseconds{2});
  CHECK(parse_duration_ms("500\xC2\xB5s") == std::chrono::milliseconds{1});
  CHECK(parse_duration_ms("0s") == std::chrono::milliseconds{0});
  CHECK(parse_duration_ms("99999999999999999999h") == std::chrono::milliseconds::max());
  // Many fraction digits of a large unit: kept exact as far as they fit, the rest only rounds up.
  CHECK(parse_duration_ms("1.333333333333333333333h") == std::chrono::milliseconds{4'800'000});
  CHECK(parse_duration_ms("0.000000000000000000001h") == std::chrono::milliseconds{1});
  for (const char* bad : {"", "s", "30", "-1s", "1x", "1.2.3s", "1s ago", "ms"}) {
    INFO(bad);
    CHECK_FALSE(parse_duration_ms(bad));
  }
}

TEST_CASE("OpenAI and Azure x-ratelimit headers") {
  SECTION("a real Azure 429: a negative remaining count is kept") {
    const std::map<std::string, std::string> headers{{"x-ratelimit-limit-tokens", "100000"},
                                                     {"x-ratelimit-remaining-tokens", "-853"},
                                                     {"x-ratelimit-limit-requests", "100"},
                                                     {"x-ratelimit-remaining-requests", "65"}};
    const auto limits = parse_rate_limits(headers, now);
    CHECK(limits.tokens.limit == 100000);
    CHECK(limits.tokens.remaining == -853);
    CHECK(limits.requests.limit == 100);
    CHECK(limits.requests.remaining == 65);
    CHECK_FALSE(limits.tokens.reset_after);
    CHECK(limits.input_tokens.empty());
  }
  SECTION("reset durations, names in any case") {
    const std::vector<std::pair<std::string, std::string>> headers{{"X-RateLimit-Reset-Requests", "6m0s"},
                                                                   {"x-ratelimit-reset-tokens", "20ms"}};
    const auto limits = parse_rate_limits(headers, now);
    CHECK(limits.requests.reset_after == std::chrono::milliseconds{360'000});
    CHECK(limits.tokens.reset_after == std::chrono::milliseconds{20});
  }
  SECTION("malformed values are ignored") {
    const std::map<std::string, std::string> headers{{"x-ratelimit-limit-tokens", "lots"},
                                                     {"x-ratelimit-remaining-tokens", "12.5"},
                                                     {"x-ratelimit-reset-tokens", "soon"},
                                                     {"x-ratelimit-limit-requests", "99999999999999999999999"}};
    const auto limits = parse_rate_limits(headers, now);
    CHECK(limits.tokens.empty());
    CHECK(limits.requests.limit == std::numeric_limits<std::int64_t>::max());  // saturated
  }
  SECTION("nothing sent: empty") { CHECK(parse_rate_limits(std::map<std::string, std::string>{}, now).empty()); }
}

TEST_CASE("Anthropic anthropic-ratelimit headers") {
  const std::map<std::string, std::string> headers{
      {"anthropic-ratelimit-requests-limit", "50"},
      {"anthropic-ratelimit-requests-remaining", "49"},
      {"anthropic-ratelimit-requests-reset", "2023-11-14T22:13:21Z"},
      {"anthropic-ratelimit-tokens-reset", "2023-11-14T22:14:20.25Z"},
      {"anthropic-ratelimit-input-tokens-limit", "40000"},
      {"anthropic-ratelimit-input-tokens-remaining", "39000"},
      {"anthropic-ratelimit-input-tokens-reset", "2023-11-14T23:13:30+01:00"},
      {"anthropic-ratelimit-output-tokens-limit", "8000"},
      {"anthropic-ratelimit-output-tokens-reset", "2020-01-01T00:00:00Z"}};
  const auto limits = parse_rate_limits(headers, now);
  CHECK(limits.requests.limit == 50);
  CHECK(limits.requests.remaining == 49);
  CHECK(limits.requests.reset_after == std::chrono::milliseconds{1000});
  CHECK(limits.tokens.reset_after == std::chrono::milliseconds{60'250});
  CHECK(limits.input_tokens.limit == 40000);
  CHECK(limits.input_tokens.reset_after == std::chrono::milliseconds{10'000});
  CHECK(limits.output_tokens.limit == 8000);
  CHECK(limits.output_tokens.reset_after == std::chrono::milliseconds{0});  // in the past

  SECTION("malformed times are ignored") {
    for (const char* bad : {"tomorrow", "2023-11-14", "2023-13-14T22:13:21Z", "2023-02-30T00:00:00Z",
                            "2023-11-14T22:13:21", "2023-11-14T22:13:21+0100", "2023-11-14T22:13:21.Z"}) {
      INFO(bad);
      const std::map<std::string, std::string> one{{"anthropic-ratelimit-requests-reset", bad}};
      CHECK_FALSE(parse_rate_limits(one, now).requests.reset_after);
    }
  }
}
