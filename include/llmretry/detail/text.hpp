#ifndef LLMRETRY_DETAIL_TEXT_HPP
#define LLMRETRY_DETAIL_TEXT_HPP

#include <string_view>

#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace detail {

/// Returns the ASCII lower-case of c; other bytes unchanged.
[[nodiscard]] constexpr char ascii_lower(char c) noexcept {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

/// Returns true when a and b are equal ignoring ASCII case (header names, month names).
[[nodiscard]] constexpr bool iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
  return true;
}

/// Returns the position of the first `needle` in `text` at or after `from`, ignoring ASCII case, or
/// std::string_view::npos. An empty needle is found at `from` (when `from` <= text.size()).
[[nodiscard]] constexpr std::size_t ifind(std::string_view text, std::string_view needle,
                                          std::size_t from = 0) noexcept {
  if (from > text.size() || needle.size() > text.size() - from) return std::string_view::npos;
  for (std::size_t at = from; at + needle.size() <= text.size(); ++at)
    if (iequals(text.substr(at, needle.size()), needle)) return at;
  return std::string_view::npos;
}

/// Returns true for an ASCII digit.
[[nodiscard]] constexpr bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }

/// Returns text without leading and trailing spaces and tabs (HTTP optional white space).
[[nodiscard]] constexpr std::string_view trim_ows(std::string_view text) noexcept {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

}  // namespace detail
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_DETAIL_TEXT_HPP
