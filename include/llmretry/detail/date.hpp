#ifndef LLMRETRY_DETAIL_DATE_HPP
#define LLMRETRY_DETAIL_DATE_HPP

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

#include "../version.hpp"
#include "number.hpp"
#include "text.hpp"

/// Calendar arithmetic and the pieces of date parsing that the HTTP date and RFC 3339 parsers share.

LLMRETRY_BEGIN_NAMESPACE
namespace detail {

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
[[nodiscard]] constexpr std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) noexcept {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

/// Returns true when y is a leap year of the proleptic Gregorian calendar.
[[nodiscard]] constexpr bool is_leap(std::int64_t y) noexcept { return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0); }

/// Returns the number of days of month m (1..12) of year y.
[[nodiscard]] constexpr unsigned days_in_month(std::int64_t y, unsigned m) noexcept {
  constexpr unsigned days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && is_leap(y) ? 29 : days[m - 1];
}

/// Reads a fixed-width run of digits from the front of text. Returns nullopt unless all are digits.
[[nodiscard]] constexpr std::optional<int> take_digits(std::string_view& text, std::size_t count) noexcept {
  if (text.size() < count) return std::nullopt;
  const auto value = parse_digits(text.substr(0, count));
  if (!value) return std::nullopt;
  text.remove_prefix(count);
  return static_cast<int>(*value);  // at most 4 digits
}

/// Removes `literal` from the front of text (ASCII case-insensitive). Returns false when absent.
[[nodiscard]] constexpr bool take(std::string_view& text, std::string_view literal) noexcept {
  if (text.size() < literal.size() || !iequals(text.substr(0, literal.size()), literal)) return false;
  text.remove_prefix(literal.size());
  return true;
}

/// Reads "HH:MM:SS" (second 60 allowed for a leap second) and returns the seconds since midnight.
[[nodiscard]] constexpr std::optional<std::int64_t> take_time_of_day(std::string_view& text) noexcept {
  const auto h = take_digits(text, 2);
  if (!h || !take(text, ":")) return std::nullopt;
  const auto m = take_digits(text, 2);
  if (!m || !take(text, ":")) return std::nullopt;
  const auto s = take_digits(text, 2);
  if (!s || *h > 23 || *m > 59 || *s > 60) return std::nullopt;
  return *h * 3600 + *m * 60 + *s;
}

/// Returns the seconds since the epoch of a valid date and time of day, or nullopt for a day that the
/// month does not have.
[[nodiscard]] constexpr std::optional<std::int64_t> to_epoch_seconds(std::int64_t year, unsigned month, int day,
                                                                     std::int64_t seconds_of_day) noexcept {
  if (day < 1 || static_cast<unsigned>(day) > days_in_month(year, month)) return std::nullopt;
  return days_from_civil(year, month, static_cast<unsigned>(day)) * 86400 + seconds_of_day;
}

/// Returns the proleptic Gregorian year of a time point.
[[nodiscard]] inline std::int64_t year_of(std::chrono::system_clock::time_point when) noexcept {
  const auto hours = std::chrono::floor<std::chrono::hours>(when.time_since_epoch()).count();
  const std::int64_t days = hours >= 0 ? hours / 24 : (hours - 23) / 24;  // rounded down
  // civil_from_days, year only
  const std::int64_t z = days + 719468;
  const std::int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const auto doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  return static_cast<std::int64_t>(yoe) + era * 400 + (mp >= 10 ? 1 : 0);
}

/// Returns epoch seconds as a time point, clamped to the range system_clock can hold.
[[nodiscard]] inline std::chrono::system_clock::time_point clamped_time_point(std::int64_t epoch_seconds) noexcept {
  using namespace std::chrono;
  using tp = system_clock::time_point;
  const auto most = duration_cast<seconds>(tp::max().time_since_epoch()).count();
  const auto least = duration_cast<seconds>(tp::min().time_since_epoch()).count();
  if (epoch_seconds >= most) return tp::max();
  if (epoch_seconds <= least) return tp::min();
  return tp{duration_cast<system_clock::duration>(seconds{epoch_seconds})};
}

/// Returns the milliseconds since the epoch of an RFC 3339 date-time ("2024-06-01T12:00:30Z",
/// "2024-06-01T12:00:30.25+02:00"), fractions rounded up; nullopt when the text is not one.
[[nodiscard]] constexpr std::optional<std::int64_t> parse_rfc3339_ms(std::string_view text) noexcept {
  text = trim_ows(text);
  const auto year = take_digits(text, 4);
  if (!year || !take(text, "-")) return std::nullopt;
  const auto month = take_digits(text, 2);
  if (!month || *month < 1 || *month > 12 || !take(text, "-")) return std::nullopt;
  const auto day = take_digits(text, 2);
  if (!day || !(take(text, "T") || take(text, " "))) return std::nullopt;
  const auto time = take_time_of_day(text);
  if (!time) return std::nullopt;
  std::int64_t part_ms = 0;
  if (take(text, ".")) {
    const auto digits = text.substr(0, digit_run(text));
    if (digits.empty()) return std::nullopt;
    part_ms = fraction_ms(digits, 1000);
    text.remove_prefix(digits.size());
  }
  std::int64_t offset_seconds = 0;
  if (!take(text, "Z")) {
    const bool ahead = take(text, "+");
    if (!ahead && !take(text, "-")) return std::nullopt;
    const auto hours = take_digits(text, 2);
    if (!hours || *hours > 23 || !take(text, ":")) return std::nullopt;
    const auto minutes = take_digits(text, 2);
    if (!minutes || *minutes > 59) return std::nullopt;
    offset_seconds = (ahead ? 1 : -1) * (std::int64_t{*hours} * 3600 + std::int64_t{*minutes} * 60);
  }
  if (!text.empty()) return std::nullopt;
  const auto seconds = to_epoch_seconds(*year, static_cast<unsigned>(*month), *day, *time);
  if (!seconds) return std::nullopt;
  return (*seconds - offset_seconds) * 1000 + part_ms;
}

/// Returns how long from `now` until an RFC 3339 time, rounded up; 0 for a time in the past; nullopt when
/// the text is not one.
[[nodiscard]] inline std::optional<std::chrono::milliseconds> until_rfc3339(
    std::string_view text, std::chrono::system_clock::time_point now) noexcept {
  using namespace std::chrono;
  const auto when_ms = parse_rfc3339_ms(text);
  if (!when_ms) return std::nullopt;
  const auto now_ms = ceil<milliseconds>(now.time_since_epoch()).count();
  return milliseconds{*when_ms > now_ms ? *when_ms - now_ms : 0};
}

}  // namespace detail
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_DETAIL_DATE_HPP
