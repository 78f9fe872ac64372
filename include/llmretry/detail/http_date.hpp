#ifndef LLMRETRY_DETAIL_HTTP_DATE_HPP
#define LLMRETRY_DETAIL_HTTP_DATE_HPP

#include <cstdint>
#include <optional>
#include <string_view>

#include "../version.hpp"
#include "date.hpp"
#include "text.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace detail {

/// Returns the first three bytes of text as one number with ASCII letters folded to lower case (c | 0x20
/// maps a byte to a lower-case letter only when it is that letter in either case), or 0 when text is shorter.
[[nodiscard]] constexpr std::uint32_t folded_prefix3(std::string_view text) noexcept {
  if (text.size() < 3) return 0;
  const auto fold = [](char c) { return static_cast<std::uint32_t>(static_cast<unsigned char>(c) | 0x20U); };
  return fold(text[0]) << 16 | fold(text[1]) << 8 | fold(text[2]);
}

/// Removes a day name from the front of text: "Mon".."Sun", or "Monday".."Sunday" when `full`.
[[nodiscard]] constexpr bool take_day_name(std::string_view& text, bool full) noexcept {
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
[[nodiscard]] constexpr std::optional<unsigned> take_month(std::string_view& text) noexcept {
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

/// Returns the epoch seconds of an HTTP date in any of the three RFC 9110 formats, or nullopt.
/// `current_year` resolves the two-digit year of RFC 850 to the year with those digits within
/// (current_year - 50, current_year + 50].
[[nodiscard]] constexpr std::optional<std::int64_t> parse_http_date_seconds(std::string_view text,
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

}  // namespace detail
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_DETAIL_HTTP_DATE_HPP
