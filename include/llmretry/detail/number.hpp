#ifndef LLMRETRY_DETAIL_NUMBER_HPP
#define LLMRETRY_DETAIL_NUMBER_HPP

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

#include "../version.hpp"
#include "text.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace detail {

/// Parses `1*DIGIT` exactly (no sign, no white space) as a non-negative integer, saturating at the
/// largest int64. Returns nullopt for empty text or any byte that is not a digit.
[[nodiscard]] constexpr std::optional<std::int64_t> parse_digits(std::string_view text) noexcept {
  if (text.empty()) return std::nullopt;
  constexpr auto max = std::numeric_limits<std::int64_t>::max();
  std::int64_t value = 0;
  for (const char c : text) {
    if (!is_digit(c)) return std::nullopt;
    const int digit = c - '0';
    value = value > (max - digit) / 10 ? max : value * 10 + digit;
  }
  return value;
}

/// Parses an optionally signed decimal integer (white space trimmed), saturating at the limits of
/// int64 (a negative value at -max). Returns nullopt for anything else.
[[nodiscard]] constexpr std::optional<std::int64_t> parse_integer(std::string_view text) noexcept {
  text = trim_ows(text);
  const bool negative = !text.empty() && text.front() == '-';
  if (!text.empty() && (text.front() == '-' || text.front() == '+')) text.remove_prefix(1);
  const auto value = parse_digits(text);
  if (!value) return std::nullopt;
  return negative ? -*value : *value;
}

/// Returns the length of the run of digits at the front of text.
[[nodiscard]] constexpr std::size_t digit_run(std::string_view text) noexcept {
  std::size_t end = 0;
  while (end < text.size() && is_digit(text[end])) ++end;
  return end;
}

/// Returns 0.DIGITS (`digits`: `*DIGIT`, may be empty) of `unit_ms` milliseconds in whole milliseconds,
/// rounded up. Requires 1 <= unit_ms <= 10^8 and digits made of digits only.
[[nodiscard]] constexpr std::int64_t fraction_ms(std::string_view digits, std::int64_t unit_ms) noexcept {
  constexpr auto max = std::numeric_limits<std::int64_t>::max();
  std::int64_t numerator = 0, denominator = 1;  // the digits kept exact: denominator * unit_ms fits
  bool more = false;                            // a non-zero digit beyond those
  for (const char c : digits) {
    if (denominator <= max / 10 / unit_ms) {
      numerator = numerator * 10 + (c - '0');
      denominator *= 10;
    } else if (c != '0') {
      more = true;
    }
  }
  const std::int64_t scaled = numerator * unit_ms;  // numerator < denominator <= max / unit_ms: fits
  return scaled / denominator + (scaled % denominator != 0 || more ? 1 : 0);
}

/// Parses `1*DIGIT [ "." *DIGIT ]` (after trimming white space) as an amount of `unit_ms` milliseconds
/// each, and returns it in whole milliseconds rounded up: a provider's wait never comes back early.
/// Returns nullopt for anything else (signs, exponents, empty text). Saturates at milliseconds::max().
/// Requires 1 <= unit_ms <= 10^8 (milliseconds up to days).
[[nodiscard]] constexpr std::optional<std::chrono::milliseconds> parse_decimal_ms(std::string_view text,
                                                                                  std::int64_t unit_ms) noexcept {
  using std::chrono::milliseconds;
  constexpr auto max = std::numeric_limits<std::int64_t>::max();
  text = trim_ows(text);
  const std::size_t whole_digits = digit_run(text);
  const auto whole = parse_digits(text.substr(0, whole_digits));
  if (!whole) return std::nullopt;
  text.remove_prefix(whole_digits);
  std::string_view fraction;
  if (!text.empty() && text.front() == '.') {
    fraction = text.substr(1, digit_run(text.substr(1)));
    text.remove_prefix(1 + fraction.size());
  }
  if (!text.empty()) return std::nullopt;
  if (*whole > max / unit_ms) return milliseconds::max();
  const std::int64_t whole_ms = *whole * unit_ms;
  const std::int64_t part_ms = fraction_ms(fraction, unit_ms);
  if (whole_ms > max - part_ms) return milliseconds::max();
  return milliseconds{whole_ms + part_ms};
}

}  // namespace detail
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_DETAIL_NUMBER_HPP
