#ifndef LLMRETRY_HEADERS_HPP
#define LLMRETRY_HEADERS_HPP

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

#include "detail/text.hpp"

namespace llmretry {

namespace detail {

template <class T, class = void>
struct is_header_lookup : std::false_type {};
template <class T>
struct is_header_lookup<T, std::void_t<decltype(std::declval<const T&>()(std::string_view{}))>> : std::true_type {};

/// Calls visit(value) with the value of header `name` when present. `headers` is a callable that looks a
/// name up (returning std::optional of a string type, a pointer that is null when absent, or a string
/// that is empty when absent), or a container of name/value pairs searched with case-insensitive names.
template <class Headers, class Visit>
void with_header(const Headers& headers, std::string_view name, Visit&& visit) {
  if constexpr (is_header_lookup<Headers>::value) {
    auto&& found = headers(name);
    using Found = std::decay_t<decltype(found)>;
    if constexpr (std::is_pointer_v<Found>) {
      if (found != nullptr) visit(std::string_view{found});
    } else if constexpr (std::is_convertible_v<const Found&, std::string_view>) {
      const std::string_view value{found};
      if (!value.empty()) visit(value);
    } else {
      if (found) visit(std::string_view{*found});
    }
  } else {
    for (const auto& [key, value] : headers) {
      if (detail::iequals(std::string_view{key}, name)) {
        visit(std::string_view{value});
        return;
      }
    }
  }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
constexpr std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) noexcept {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

constexpr bool is_leap(std::int64_t y) noexcept { return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0); }

constexpr unsigned days_in_month(std::int64_t y, unsigned m) noexcept {
  constexpr unsigned days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && is_leap(y) ? 29 : days[m - 1];
}

/// Reads a fixed-width run of digits from the front of text. Returns nullopt unless all are digits.
constexpr std::optional<int> take_digits(std::string_view& text, std::size_t count) noexcept {
  if (text.size() < count) return std::nullopt;
  int value = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (!is_digit(text[i])) return std::nullopt;
    value = value * 10 + (text[i] - '0');
  }
  text.remove_prefix(count);
  return value;
}

/// Removes `literal` from the front of text (ASCII case-insensitive). Returns false when absent.
constexpr bool take(std::string_view& text, std::string_view literal) noexcept {
  if (text.size() < literal.size() || !iequals(text.substr(0, literal.size()), literal)) return false;
  text.remove_prefix(literal.size());
  return true;
}

/// Returns the first three bytes of text as one number with ASCII letters folded to lower case (c | 0x20
/// maps a byte to a lower-case letter only when it is that letter in either case), or 0 when text is shorter.
constexpr std::uint32_t folded_prefix3(std::string_view text) noexcept {
  if (text.size() < 3) return 0;
  const auto fold = [](char c) { return static_cast<std::uint32_t>(static_cast<unsigned char>(c) | 0x20U); };
  return fold(text[0]) << 16 | fold(text[1]) << 8 | fold(text[2]);
}

/// Removes a day name from the front of text: "Mon".."Sun", or "Monday".."Sunday" when `full`.
constexpr bool take_day_name(std::string_view& text, bool full) noexcept {
  constexpr std::string_view names[] = {"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"};
  constexpr std::uint32_t prefixes[] = {folded_prefix3("mon"), folded_prefix3("tue"), folded_prefix3("wed"),
                                        folded_prefix3("thu"), folded_prefix3("fri"), folded_prefix3("sat"),
                                        folded_prefix3("sun")};
  const auto prefix = folded_prefix3(text);
  for (int d = 0; d < 7; ++d) {  // the first three letters tell the days apart
    if (prefix != prefixes[d]) continue;
    if (full) return take(text, names[d]);
    text.remove_prefix(3);
    return true;
  }
  return false;
}

/// Removes a month name ("Jan".."Dec") from the front of text and returns its number 1..12.
constexpr std::optional<unsigned> take_month(std::string_view& text) noexcept {
  constexpr std::uint32_t prefixes[] = {folded_prefix3("jan"), folded_prefix3("feb"), folded_prefix3("mar"),
                                        folded_prefix3("apr"), folded_prefix3("may"), folded_prefix3("jun"),
                                        folded_prefix3("jul"), folded_prefix3("aug"), folded_prefix3("sep"),
                                        folded_prefix3("oct"), folded_prefix3("nov"), folded_prefix3("dec")};
  const auto prefix = folded_prefix3(text);
  for (unsigned m = 0; m < 12; ++m) {
    if (prefix == prefixes[m]) {
      text.remove_prefix(3);
      return m + 1;
    }
  }
  return std::nullopt;
}

/// Reads "HH:MM:SS" (second 60 allowed for a leap second) and returns the seconds since midnight.
constexpr std::optional<std::int64_t> take_time_of_day(std::string_view& text) noexcept {
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
constexpr std::optional<std::int64_t> to_epoch_seconds(std::int64_t year, unsigned month, int day,
                                                       std::int64_t seconds_of_day) noexcept {
  if (day < 1 || static_cast<unsigned>(day) > days_in_month(year, month)) return std::nullopt;
  return days_from_civil(year, month, static_cast<unsigned>(day)) * 86400 + seconds_of_day;
}

/// Returns the epoch seconds of an HTTP date in any of the three RFC 9110 formats, or nullopt.
/// `current_year` resolves the two-digit year of RFC 850 to the year with those digits within
/// (current_year - 50, current_year + 50].
constexpr std::optional<std::int64_t> parse_http_date_seconds(std::string_view text,
                                                              std::int64_t current_year) noexcept {
  text = trim_ows(text);
  auto rest = text;
  if (take_day_name(rest, false) && take(rest, ", ")) {  // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
    const auto day = take_digits(rest, 2);
    if (!day || !take(rest, " ")) return std::nullopt;
    const auto month = take_month(rest);
    if (!month || !take(rest, " ")) return std::nullopt;
    const auto year = take_digits(rest, 4);
    if (!year || !take(rest, " ")) return std::nullopt;
    const auto time = take_time_of_day(rest);
    if (!time || !take(rest, " GMT") || !rest.empty()) return std::nullopt;
    return to_epoch_seconds(*year, *month, *day, *time);
  }
  rest = text;
  if (take_day_name(rest, true) && take(rest, ", ")) {  // RFC 850: Sunday, 06-Nov-94 08:49:37 GMT
    const auto day = take_digits(rest, 2);
    if (!day || !take(rest, "-")) return std::nullopt;
    const auto month = take_month(rest);
    if (!month || !take(rest, "-")) return std::nullopt;
    const auto yy = take_digits(rest, 2);
    if (!yy || !take(rest, " ")) return std::nullopt;
    const auto time = take_time_of_day(rest);
    if (!time || !take(rest, " GMT") || !rest.empty()) return std::nullopt;
    std::int64_t year = current_year - current_year % 100 + *yy;
    if (year > current_year + 50) year -= 100;
    else if (year <= current_year - 50) year += 100;
    return to_epoch_seconds(year, *month, *day, *time);
  }
  rest = text;
  if (take_day_name(rest, false) && take(rest, " ")) {  // asctime: Sun Nov  6 08:49:37 1994
    const auto month = take_month(rest);
    if (!month || !take(rest, " ")) return std::nullopt;
    std::optional<int> day;
    if (take(rest, " ")) day = take_digits(rest, 1);
    else day = take_digits(rest, 2);
    if (!day || !take(rest, " ")) return std::nullopt;
    const auto time = take_time_of_day(rest);
    if (!time || !take(rest, " ")) return std::nullopt;
    const auto year = take_digits(rest, 4);
    if (!year || !rest.empty()) return std::nullopt;
    return to_epoch_seconds(*year, *month, *day, *time);
  }
  return std::nullopt;
}

/// Returns the proleptic Gregorian year of a time point.
inline std::int64_t year_of(std::chrono::system_clock::time_point when) noexcept {
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
inline std::chrono::system_clock::time_point clamped_time_point(std::int64_t epoch_seconds) noexcept {
  using namespace std::chrono;
  using tp = system_clock::time_point;
  const auto most = duration_cast<seconds>(tp::max().time_since_epoch()).count();
  const auto least = duration_cast<seconds>(tp::min().time_since_epoch()).count();
  if (epoch_seconds >= most) return tp::max();
  if (epoch_seconds <= least) return tp::min();
  return tp{duration_cast<system_clock::duration>(seconds{epoch_seconds})};
}

}  // namespace detail

/// Parses an HTTP date in any of the formats of RFC 9110 section 5.6.7: IMF-fixdate
/// ("Sun, 06 Nov 1994 08:49:37 GMT"), RFC 850 ("Sunday, 06-Nov-94 08:49:37 GMT") and asctime
/// ("Sun Nov  6 08:49:37 1994"), GMT only, names in any case. A two-digit year is the year with those
/// digits less than 50 years before `now` and at most 50 after (never more than 50 years in the future).
/// Returns nullopt when the text is not such a date; never throws. A date beyond what system_clock can
/// hold is clamped to its range.
inline std::optional<std::chrono::system_clock::time_point> parse_http_date(
    std::string_view text, std::chrono::system_clock::time_point now) noexcept {
  const auto seconds = detail::parse_http_date_seconds(text, detail::year_of(now));
  if (!seconds) return std::nullopt;
  return detail::clamped_time_point(*seconds);
}

/// Returns parse_http_date(text, system_clock::now()).
inline std::optional<std::chrono::system_clock::time_point> parse_http_date(std::string_view text) noexcept {
  return parse_http_date(text, std::chrono::system_clock::now());
}

/// Returns the value of one Retry-After style header as a wait from `now`: delay-seconds (fractions
/// accepted) or an HTTP date, rounded up to whole milliseconds; a date in the past gives 0.
/// Returns nullopt when the value is malformed; never throws.
inline std::optional<std::chrono::milliseconds> parse_retry_after(std::string_view value,
                                                                  std::chrono::system_clock::time_point now) noexcept {
  using namespace std::chrono;
  if (auto delay = detail::parse_decimal_ms(value, 1000)) return delay;
  const auto when = parse_http_date(value, now);
  if (!when) return std::nullopt;
  if (*when <= now) return milliseconds::zero();
  const auto ahead = *when - now;  // both in range, the difference may still be large
  return ceil<milliseconds>(ahead);
}

/// Returns the wait a response asks for, reading its headers in order of precision:
/// `retry-after-ms` (milliseconds, fractions rounded up), `x-ms-retry-after-ms`, then `retry-after`
/// (delay-seconds or an HTTP date, relative to `now`). A malformed value is skipped, a date in the past
/// gives 0, a huge value saturates at milliseconds::max(). Names compare case-insensitively.
/// `headers`: a container of name/value pairs (std::map, std::unordered_map, std::vector of pairs...) or a
/// callable `lookup(std::string_view name)` returning std::optional<string-like>, a pointer (null when
/// absent) or a string (empty when absent). Returns nullopt when no usable header is present. Never throws.
template <class Headers>
std::optional<std::chrono::milliseconds> requested_wait(const Headers& headers,
                                                     std::chrono::system_clock::time_point now) {
  std::optional<std::chrono::milliseconds> wait;
  for (std::string_view name : {"retry-after-ms", "x-ms-retry-after-ms"}) {
    detail::with_header(headers, name, [&](std::string_view value) { wait = detail::parse_decimal_ms(value, 1); });
    if (wait) return wait;
  }
  detail::with_header(headers, "retry-after", [&](std::string_view value) { wait = parse_retry_after(value, now); });
  return wait;
}

/// Returns the provider's explicit `x-should-retry` ("true" or "false", any case), or nullopt when
/// absent or anything else.
template <class Headers>
std::optional<bool> should_retry(const Headers& headers) {
  std::optional<bool> answer;
  detail::with_header(headers, "x-should-retry", [&](std::string_view value) {
    value = detail::trim_ows(value);
    if (detail::iequals(value, "true")) answer = true;
    else if (detail::iequals(value, "false")) answer = false;
  });
  return answer;
}

}  // namespace llmretry

#endif  // LLMRETRY_HEADERS_HPP
