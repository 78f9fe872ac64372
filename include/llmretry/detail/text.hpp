#ifndef LLMRETRY_DETAIL_TEXT_HPP
#define LLMRETRY_DETAIL_TEXT_HPP

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

namespace llmretry::detail {

/// Returns the ASCII lower-case of c; other bytes unchanged.
constexpr char ascii_lower(char c) noexcept { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

/// Returns true when a and b are equal ignoring ASCII case (header names, month names).
constexpr bool iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
  return true;
}

constexpr bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }

/// Returns text without leading and trailing spaces and tabs (HTTP optional white space).
constexpr std::string_view trim_ows(std::string_view text) noexcept {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

/// Parses `1*DIGIT [ "." *DIGIT ]` (after trimming white space) as an amount of `unit_ms` milliseconds
/// each, and returns it in whole milliseconds rounded up: a provider's wait never comes back early.
/// Returns nullopt for anything else (signs, exponents, empty text). Saturates at milliseconds::max().
/// Requires 1 <= unit_ms <= 10^8 (milliseconds up to days).
constexpr std::optional<std::chrono::milliseconds> parse_decimal_ms(std::string_view text,
                                                                    std::int64_t unit_ms) noexcept {
  using std::chrono::milliseconds;
  constexpr auto max = std::numeric_limits<std::int64_t>::max();
  text = trim_ows(text);
  std::size_t i = 0;
  std::int64_t whole = 0;
  bool saturated = false;
  for (; i < text.size() && is_digit(text[i]); ++i) {
    const int digit = text[i] - '0';
    if (whole > (max - digit) / 10) saturated = true;
    else whole = whole * 10 + digit;
  }
  if (i == 0) return std::nullopt;
  std::int64_t numerator = 0, denominator = 1;  // the fraction digits kept exact: denominator * unit_ms fits
  bool more = false;                            // a non-zero digit beyond those
  if (i < text.size() && text[i] == '.') {
    for (++i; i < text.size() && is_digit(text[i]); ++i) {
      if (denominator <= max / 10 / unit_ms) {
        numerator = numerator * 10 + (text[i] - '0');
        denominator *= 10;
      } else if (text[i] != '0') {
        more = true;
      }
    }
  }
  if (i != text.size()) return std::nullopt;
  if (saturated || whole > max / unit_ms) return milliseconds::max();
  const std::int64_t scaled = numerator * unit_ms;  // numerator < denominator <= max / unit_ms: fits
  std::int64_t fraction_ms = scaled / denominator;
  if (scaled % denominator != 0 || more) ++fraction_ms;
  const std::int64_t whole_ms = whole * unit_ms;
  if (whole_ms > max - fraction_ms) return milliseconds::max();
  return milliseconds{whole_ms + fraction_ms};
}

}  // namespace llmretry::detail

#endif  // LLMRETRY_DETAIL_TEXT_HPP
