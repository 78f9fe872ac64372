// Differential test: on many random valid dates written in the three formats of RFC 9110 section 5.6.7,
// parse_http_date gives the same instant as the C library (strptime + timegm).
#include <time.h>

#include <cctype>
#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <string>

#include <llmretry/http/headers.hpp>
#include <llmretry_catch.hpp>

namespace {

using std::chrono::system_clock;

struct Format {
  const char* name;
  const char* strftime;  ///< how the date is written
  const char* strptime;  ///< how the C library reads it back
};

// IMF-fixdate, RFC 850 (two-digit year) and asctime (day padded with a space).
constexpr Format formats[] = {
    {"IMF-fixdate", "%a, %d %b %Y %H:%M:%S GMT", "%a, %d %b %Y %H:%M:%S GMT"},
    {"RFC 850", "%A, %d-%b-%y %H:%M:%S GMT", "%A, %d-%b-%y %H:%M:%S GMT"},
    {"asctime", "%a %b %e %H:%M:%S %Y", "%a %b %e %H:%M:%S %Y"},
};

std::int64_t epoch_of(int year, int month, int day) {
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  return static_cast<std::int64_t>(timegm(&tm));
}

std::string format(std::int64_t epoch_seconds, const char* pattern) {
  const auto seconds = static_cast<time_t>(epoch_seconds);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char text[64];
  const auto length = std::strftime(text, sizeof text, pattern, &tm);
  return std::string(text, length);
}

// Returns the epoch seconds the C library reads from `text`, or nullopt when it does not read all of it.
std::optional<std::int64_t> c_library_parse(const std::string& text, const char* pattern) {
  std::tm tm{};
  const char* end = strptime(text.c_str(), pattern, &tm);
  if (end == nullptr || *end != '\0') return std::nullopt;
  return static_cast<std::int64_t>(timegm(&tm));
}

std::optional<std::int64_t> llmretry_parse(const std::string& text, system_clock::time_point now) {
  const auto when = llmretry::parse_http_date(text, now);
  if (!when) return std::nullopt;
  return std::chrono::duration_cast<std::chrono::seconds>(when->time_since_epoch()).count();
}

// Changes the case of random letters of the day and month names (strptime, like RFC 9110, wants "GMT" as is).
std::string with_random_case(std::string text, std::mt19937_64& rng) {
  const bool gmt = text.size() >= 4 && text.compare(text.size() - 4, 4, " GMT") == 0;
  for (std::size_t i = 0; i < (gmt ? text.size() - 4 : text.size()); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (std::isalpha(c) && (rng() & 1) != 0)
      text[i] = static_cast<char>(std::isupper(c) ? std::tolower(c) : std::toupper(c));
  }
  return text;
}

}  // namespace

TEST_CASE("parse_http_date agrees with strptime + timegm on random dates in the three formats") {
  // "now" in 2026: both read a two-digit year 00-68 as 20yy and 77-99 as 19yy (strptime always reads
  // 69-99 as 19yy, llmretry takes at most 50 years ahead), so RFC 850 dates are drawn from 1977-2068.
  const auto now = system_clock::time_point{std::chrono::seconds{epoch_of(2026, 6, 1)}};
  const std::int64_t rfc850_first = epoch_of(1977, 1, 1);
  const std::int64_t rfc850_last = epoch_of(2068, 12, 31) + 86399;
  // Every other format: 1700-2200, inside what system_clock holds with every standard library.
  const std::int64_t first = epoch_of(1700, 1, 1);
  const std::int64_t last = epoch_of(2200, 12, 31) + 86399;
  std::mt19937_64 rng{20261129};
  constexpr int samples = 20000;

  for (const auto& f : formats) {
    const bool rfc850 = std::string(f.name) == "RFC 850";
    std::uniform_int_distribution<std::int64_t> draw{rfc850 ? rfc850_first : first, rfc850 ? rfc850_last : last};
    int checked = 0;
    for (int i = 0; i < samples; ++i) {
      const auto seconds = draw(rng);
      auto text = format(seconds, f.strftime);
      if (i % 2 == 1) text = with_random_case(text, rng);
      const auto expected = c_library_parse(text, f.strptime);
      INFO(f.name << ": \"" << text << "\"");
      REQUIRE(expected == seconds);
      REQUIRE(llmretry_parse(text, now) == expected);
      ++checked;
    }
    CHECK(checked == samples);
  }
}

TEST_CASE("parse_http_date agrees with timegm on leap seconds and month ends") {
  const auto now = system_clock::time_point{std::chrono::seconds{epoch_of(2026, 6, 1)}};
  for (const char* text :
       {"Wed, 31 Dec 2025 23:59:60 GMT", "Thu, 29 Feb 2024 12:00:00 GMT", "Tue, 29 Feb 2000 00:00:00 GMT",
        "Fri, 31 Dec 1999 23:59:59 GMT", "Saturday, 01-Jan-77 00:00:00 GMT", "Sun Nov  6 08:49:37 1994",
        "Sun Nov 16 08:49:37 1994"}) {
    INFO(text);
    const std::string date{text};
    const char* pattern = date.find(',') == std::string::npos   ? formats[2].strptime
                          : date.find('-') == std::string::npos ? formats[0].strptime
                                                                : formats[1].strptime;
    const auto expected = c_library_parse(date, pattern);
    REQUIRE(expected.has_value());
    CHECK(llmretry_parse(date, now) == expected);
  }
}
