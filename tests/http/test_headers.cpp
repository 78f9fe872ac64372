#include <llmretry/http/headers.hpp>

#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "llmretry_catch.hpp"

using llmretry::parse_http_date;
using llmretry::requested_wait;
using llmretry::should_retry;
using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::system_clock;
using namespace std::chrono_literals;
using Pairs = std::vector<std::pair<std::string, std::string>>;

namespace {
system_clock::time_point at_epoch_seconds(long long s) { return system_clock::time_point{seconds{s}}; }
// 2026-10-09 02:21:39 UTC: a fixed "now" for exact date arithmetic.
const auto fixed_now = at_epoch_seconds(1791512499);
// Returns the epoch seconds of a parsed date, or nullopt when it did not parse: a failed CHECK, not a crash.
std::optional<long long> epoch_of(std::optional<system_clock::time_point> t) {
  if (!t) return std::nullopt;
  return std::chrono::duration_cast<seconds>(t->time_since_epoch()).count();
}
}  // namespace

TEST_CASE("requested_wait reads the most precise header first", "[headers]") {
  const auto now = fixed_now;
  SECTION("a real Azure 429: retry-after-ms wins over retry-after") {
    CHECK(requested_wait(Pairs{{"retry-after", "30"}, {"retry-after-ms", "511"}}, now) == 511ms);
  }
  SECTION("retry-after alone") { CHECK(requested_wait(Pairs{{"retry-after", "30"}}, now) == 30s); }
  SECTION("x-ms-retry-after-ms comes before retry-after") {
    CHECK(requested_wait(Pairs{{"retry-after", "30"}, {"x-ms-retry-after-ms", "1500"}}, now) == 1500ms);
    CHECK(requested_wait(Pairs{{"x-ms-retry-after-ms", "1500"}, {"retry-after-ms", "20"}}, now) == 20ms);
  }
  SECTION("a malformed precise header falls through to the next") {
    CHECK(requested_wait(Pairs{{"retry-after-ms", "soon"}, {"retry-after", "2"}}, now) == 2s);
    CHECK(requested_wait(Pairs{{"retry-after-ms", "-5"}, {"x-ms-retry-after-ms", "7"}}, now) == 7ms);
  }
  SECTION("nothing usable: no wait") {
    CHECK_FALSE(requested_wait(Pairs{}, now));
    CHECK_FALSE(requested_wait(Pairs{{"retry-after", "later"}}, now));
    CHECK_FALSE(requested_wait(Pairs{{"content-type", "application/json"}}, now));
  }
}

TEST_CASE("Header names compare case-insensitively", "[headers]") {
  CHECK(requested_wait(Pairs{{"Retry-After", "3"}}, fixed_now) == 3s);
  CHECK(requested_wait(Pairs{{"RETRY-AFTER-MS", "3"}}, fixed_now) == 3ms);
  CHECK(requested_wait(std::map<std::string, std::string>{{"Retry-After-Ms", "4"}}, fixed_now) == 4ms);
}

TEST_CASE("requested_wait takes any container of pairs or a look-up callable", "[headers]") {
  const auto now = fixed_now;
  CHECK(requested_wait(std::map<std::string, std::string>{{"retry-after", "1"}}, now) == 1s);
  CHECK(requested_wait(std::unordered_map<std::string, std::string>{{"retry-after", "1"}}, now) == 1s);
  CHECK(requested_wait(std::multimap<std::string, std::string>{{"retry-after", "1"}}, now) == 1s);
  CHECK(requested_wait(std::vector<std::pair<std::string_view, std::string_view>>{{"retry-after", "1"}}, now) == 1s);
  SECTION("a callable returning std::optional<std::string>") {
    const auto lookup = [](std::string_view name) -> std::optional<std::string> {
      if (name == "retry-after-ms") return "250";
      return std::nullopt;
    };
    CHECK(requested_wait(lookup, now) == 250ms);
  }
  SECTION("a callable returning a pointer, null when absent") {
    const auto lookup = [](std::string_view name) -> const char* { return name == "retry-after" ? "9" : nullptr; };
    CHECK(requested_wait(lookup, now) == 9s);
  }
  SECTION("a callable returning a string, empty when absent") {
    const auto lookup = [](std::string_view name) { return name == "retry-after" ? std::string("4") : std::string(); };
    CHECK(requested_wait(lookup, now) == 4s);
  }
}

TEST_CASE("Numbers round up and saturate", "[headers]") {
  const auto now = fixed_now;
  SECTION("fractional milliseconds round up: never earlier than asked") {
    CHECK(requested_wait(Pairs{{"retry-after-ms", "511.2"}}, now) == 512ms);
    CHECK(requested_wait(Pairs{{"retry-after-ms", "0.001"}}, now) == 1ms);
    CHECK(requested_wait(Pairs{{"retry-after-ms", "511.000"}}, now) == 511ms);
    CHECK(requested_wait(Pairs{{"retry-after-ms", "511."}}, now) == 511ms);
    CHECK(requested_wait(Pairs{{"retry-after-ms", "0.0000000000000000001"}}, now) == 1ms);
  }
  SECTION("fractional seconds are accepted from lenient servers") {
    CHECK(requested_wait(Pairs{{"retry-after", "1.5"}}, now) == 1500ms);
    CHECK(requested_wait(Pairs{{"retry-after", "0.0001"}}, now) == 1ms);
  }
  SECTION("white space around the value is allowed") {
    CHECK(requested_wait(Pairs{{"retry-after", " \t30 "}}, now) == 30s);
  }
  SECTION("zero is zero") { CHECK(requested_wait(Pairs{{"retry-after", "0"}}, now) == 0ms); }
  SECTION("huge numbers saturate") {
    CHECK(requested_wait(Pairs{{"retry-after", "99999999999999999999999999"}}, now) == milliseconds::max());
    CHECK(requested_wait(Pairs{{"retry-after", "9223372036854775"}}, now) == milliseconds{9223372036854775000});
    CHECK(requested_wait(Pairs{{"retry-after", "9223372036854776"}}, now) == milliseconds::max());
    CHECK(requested_wait(Pairs{{"retry-after-ms", "9223372036854775807.5"}}, now) == milliseconds::max());
  }
  SECTION("anything else is malformed and ignored") {
    for (const char* bad : {"", " ", "-1", "+1", "1e3", "0x10", "30s", "1,5", ".5", "1.2.3", "３０", "NaN", "inf"})
      CHECK_FALSE(requested_wait(Pairs{{"retry-after", bad}}, now));
  }
}

TEST_CASE("Retry-After as an HTTP date", "[headers]") {
  const auto now = at_epoch_seconds(784111777);  // Sun, 06 Nov 1994 08:49:37 GMT
  SECTION("in the future: the time until then") {
    CHECK(requested_wait(Pairs{{"retry-after", "Sun, 06 Nov 1994 08:50:07 GMT"}}, now) == 30s);
    CHECK(requested_wait(Pairs{{"retry-after", "Sunday, 06-Nov-94 08:49:39 GMT"}}, now) == 2s);
    CHECK(requested_wait(Pairs{{"retry-after", "Sun Nov  6 08:49:47 1994"}}, now) == 10s);
  }
  SECTION("rounded up when now falls between seconds") {
    CHECK(requested_wait(Pairs{{"retry-after", "Sun, 06 Nov 1994 08:49:39 GMT"}}, now + 250ms) == 1750ms);
    CHECK(requested_wait(Pairs{{"retry-after", "Sun, 06 Nov 1994 08:49:39 GMT"}}, now + std::chrono::nanoseconds{1}) ==
          2000ms);
  }
  SECTION("now or in the past: no wait") {
    CHECK(requested_wait(Pairs{{"retry-after", "Sun, 06 Nov 1994 08:49:37 GMT"}}, now) == 0ms);
    CHECK(requested_wait(Pairs{{"retry-after", "Thu, 01 Jan 1970 00:00:00 GMT"}}, now) == 0ms);
    CHECK(requested_wait(Pairs{{"retry-after", "Mon, 01 Jan 0001 00:00:00 GMT"}}, now) == 0ms);
  }
  SECTION("far in the future: a huge wait, never an overflow") {
    const auto wait = requested_wait(Pairs{{"retry-after", "Fri, 31 Dec 9999 23:59:59 GMT"}}, now);
    REQUIRE(wait);
    CHECK(*wait > std::chrono::hours{24 * 365 * 200});
  }
}

TEST_CASE("parse_http_date reads the three RFC 9110 formats", "[headers][date]") {
  const auto now = fixed_now;
  const long long expected = 784111777;
  CHECK(epoch_of(parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT", now)) == expected);
  CHECK(epoch_of(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT", now)) == expected);
  CHECK(epoch_of(parse_http_date("Sun Nov  6 08:49:37 1994", now)) == expected);
  CHECK(epoch_of(parse_http_date("Fri, 09 Oct 2026 02:21:39 GMT", now)) == 1791512499);
  CHECK(epoch_of(parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT", now)) == 0);
  SECTION("names in any case, white space around") {
    CHECK(epoch_of(parse_http_date(" sun, 06 NOV 1994 08:49:37 gmt ", now)) == expected);
  }
  SECTION("asctime with a two-digit day") {
    CHECK(epoch_of(parse_http_date("Tue Nov 15 08:12:31 1994", now)) == 784887151);
  }
  SECTION("leap years and leap seconds") {
    CHECK(parse_http_date("Thu, 29 Feb 2024 00:00:00 GMT", now));
    CHECK(parse_http_date("Tue, 29 Feb 2000 00:00:00 GMT", now));
    CHECK_FALSE(parse_http_date("Mon, 29 Feb 2100 00:00:00 GMT", now));
    CHECK_FALSE(parse_http_date("Sun, 29 Feb 2026 00:00:00 GMT", now));
    CHECK(epoch_of(parse_http_date("Wed, 31 Dec 2025 23:59:60 GMT", now)) == 1767225600);
  }
  SECTION("the two-digit year of RFC 850 is at most 50 years ahead") {
    const auto in_2026 = fixed_now;
    CHECK(epoch_of(parse_http_date("Sunday, 01-Jan-76 00:00:00 GMT", in_2026)) == 3345062400);   // 2076
    CHECK(epoch_of(parse_http_date("Saturday, 01-Jan-77 00:00:00 GMT", in_2026)) == 220924800);  // 1977
  }
}

TEST_CASE("parse_http_date refuses anything else without throwing", "[headers][date]") {
  const auto now = fixed_now;
  for (const char* bad : {
           "",
           "30",
           "Sun, 06 Nov 1994 08:49:37 UTC",
           "Sun, 06 Nov 1994 08:49:37 +0000",
           "Sun, 06 Nov 1994 08:49:37",
           "Sun, 06 Nov 1994 08:49:37 GMT trailing",
           "Sun, 6 Nov 1994 08:49:37 GMT",
           "Sun, 06 Nov 94 08:49:37 GMT",
           "Sun, 31 Nov 1994 08:49:37 GMT",
           "Sun, 00 Nov 1994 08:49:37 GMT",
           "Sun, 06 Nox 1994 08:49:37 GMT",
           "Sun, 06 Nov 1994 24:00:00 GMT",
           "Sun, 06 Nov 1994 08:60:00 GMT",
           "Sun, 06 Nov 1994 08:49:61 GMT",
           "Sun, 06 Nov 1994 8:49:37 GMT",
           "Sunday, 06-Nov-1994 08:49:37 GMT",
           "Sun, 06-Nov-94 08:49:37 GMT",
           "Sun Nov 6 08:49:37 1994",
           "Sun Nov  6 08:49:37 94",
           "Xyz, 06 Nov 1994 08:49:37 GMT",
           "2026-10-09T02:21:39Z",
       })
    CHECK_FALSE(parse_http_date(bad, now));
}

TEST_CASE("parse_http_date without a clock argument", "[headers][date]") {
  CHECK(epoch_of(parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT")) == 784111777);
}

TEST_CASE("should_retry reads x-should-retry", "[headers]") {
  CHECK(should_retry(Pairs{{"x-should-retry", "true"}}) == true);
  CHECK(should_retry(Pairs{{"X-Should-Retry", " FALSE "}}) == false);
  CHECK_FALSE(should_retry(Pairs{{"x-should-retry", "yes"}}));
  CHECK_FALSE(should_retry(Pairs{}));
}

TEST_CASE("The two-digit year is resolved from any year of now, before 1970 too", "[headers][date]") {
  const auto in_1969 = at_epoch_seconds(-1);                                                   // 1969-12-31 23:59:59
  CHECK(epoch_of(parse_http_date("Thursday, 01-Jan-70 00:00:00 GMT", in_1969)) == 0);          // 1970
  CHECK(epoch_of(parse_http_date("Tuesday, 31-Dec-19 00:00:00 GMT", in_1969)) == 1577750400);  // 2019
  CHECK(epoch_of(parse_http_date("Monday, 01-Jan-20 00:00:00 GMT", in_1969)) == -1577923200);  // 1920
}
