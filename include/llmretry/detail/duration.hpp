#ifndef LLMRETRY_DETAIL_DURATION_HPP
#define LLMRETRY_DETAIL_DURATION_HPP

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

#include "../version.hpp"
#include "number.hpp"
#include "saturate.hpp"
#include "text.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace detail {

/// Parses a duration written as a sequence of decimal numbers each followed by a unit, as providers
/// send them: "6m0s", "1s", "20ms", "1h2m3.5s", "1.5s", "0.000340s", "500us" (units h, m, s, ms, us, µs,
/// ns). Returns it in whole milliseconds rounded up (a provider's wait never comes back early), saturated
/// at milliseconds::max(); nullopt for anything else (empty text, signs, a number without unit).
[[nodiscard]] constexpr std::optional<std::chrono::milliseconds> parse_duration_ms(std::string_view text) noexcept {
  using std::chrono::milliseconds;
  struct Unit {
    std::string_view name;
    std::int64_t ms;     // milliseconds per unit, or 1 for units below a millisecond
    std::int64_t below;  // units below a millisecond: how many make one
  };
  // Longer names first, so that "ms" is not read as "m" followed by "s".
  constexpr Unit units[] = {{"ms", 1, 1},        {"us", 1, 1000},  {"\xC2\xB5s", 1, 1000}, {"ns", 1, 1'000'000},
                            {"h", 3'600'000, 1}, {"m", 60'000, 1}, {"s", 1000, 1}};
  text = trim_ows(text);
  if (text.empty()) return std::nullopt;
  milliseconds total{0};
  while (!text.empty()) {
    std::size_t end = 0;
    while (end < text.size() && (is_digit(text[end]) || text[end] == '.')) ++end;
    if (end == 0) return std::nullopt;
    const std::string_view number = text.substr(0, end);
    text.remove_prefix(end);
    const Unit* unit = nullptr;
    for (const auto& candidate : units) {
      if (text.substr(0, candidate.name.size()) == candidate.name) {
        unit = &candidate;
        break;
      }
    }
    if (unit == nullptr) return std::nullopt;
    text.remove_prefix(unit->name.size());
    auto part = parse_decimal_ms(number, unit->ms);
    if (!part) return std::nullopt;
    // ceil(ceil(x) / n) == ceil(x / n): rounding the count of small units up first loses nothing.
    if (unit->below > 1) part = milliseconds{part->count() / unit->below + (part->count() % unit->below != 0 ? 1 : 0)};
    total = saturating_add(total, *part);
  }
  return total;
}

}  // namespace detail
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_DETAIL_DURATION_HPP
