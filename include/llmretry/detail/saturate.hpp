#ifndef LLMRETRY_DETAIL_SATURATE_HPP
#define LLMRETRY_DETAIL_SATURATE_HPP

#include <chrono>
#include <cstdint>
#include <limits>

#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace detail {

/// The longest wait a time in nanoseconds can hold: a bound at or beyond it bounds nothing.
inline constexpr std::chrono::milliseconds longest_wait =
    std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::nanoseconds::max());

using std::chrono::milliseconds;

/// Returns a + b, saturated to the range of std::int64_t.
[[nodiscard]] constexpr std::int64_t saturated_sum(std::int64_t a, std::int64_t b) noexcept {
  constexpr auto max = std::numeric_limits<std::int64_t>::max();
  constexpr auto min = std::numeric_limits<std::int64_t>::min();
  if (b > 0 && a > max - b) return max;
  if (b < 0 && a < min - b) return min;
  return a + b;
}

/// Returns a + b for non-negative durations, or milliseconds::max() where the sum would overflow.
[[nodiscard]] constexpr milliseconds saturating_add(milliseconds a, milliseconds b) noexcept {
  return b.count() > milliseconds::max().count() - a.count() ? milliseconds::max() : a + b;
}

/// Returns d * 2^exponent for a non-negative d, or `limit` where the result would be at least `limit`.
/// Never shifts past the width of the type: exponent may be any non-negative int.
[[nodiscard]] constexpr milliseconds doubled_up_to(milliseconds d, int exponent, milliseconds limit) noexcept {
  auto value = d.count();
  if (value == 0) return d;
  for (int i = 0; i < exponent && value < limit.count(); ++i) {
    value = value > std::numeric_limits<milliseconds::rep>::max() / 2 ? std::numeric_limits<milliseconds::rep>::max()
                                                                      : value * 2;
  }
  return value < limit.count() ? milliseconds{value} : limit;
}

/// Returns `a * b / c` rounded up, for non-negative a, b and positive c, saturated at int64 max, in
/// standard C++: the 128-bit product from 32-bit halves when it does not fit 64 bits, then long division.
/// What mul_div_up computes where the compiler has no 128-bit integer.
[[nodiscard]] constexpr std::int64_t mul_div_up_portable(std::int64_t a, std::int64_t b, std::int64_t c) noexcept {
  using u64 = std::uint64_t;
  constexpr u64 max = static_cast<u64>(std::numeric_limits<std::int64_t>::max());
  const auto x = static_cast<u64>(a);
  const auto y = static_cast<u64>(b);
  const auto d = static_cast<u64>(c);
  const auto saturated = [](u64 quotient) { return static_cast<std::int64_t>(quotient > max ? max : quotient); };
  if (y == 0 || x <= std::numeric_limits<u64>::max() / y) {
    const u64 product = x * y;
    return saturated(product / d + (product % d != 0 ? 1 : 0));
  }
  // The 128-bit product high:low, from the four products of the 32-bit halves.
  const u64 x_low = x & 0xffff'ffffU, x_high = x >> 32, y_low = y & 0xffff'ffffU, y_high = y >> 32;
  const u64 low_low = x_low * y_low, high_low = x_high * y_low, low_high = x_low * y_high;
  const u64 middle = (low_low >> 32) + (high_low & 0xffff'ffffU) + (low_high & 0xffff'ffffU);
  const u64 high = x_high * y_high + (high_low >> 32) + (low_high >> 32) + (middle >> 32);
  const u64 low = (middle << 32) | (low_low & 0xffff'ffffU);
  if (high >= d) return saturated(max + 1);  // the quotient needs more than 64 bits
  // Long division of high:low by d, one bit at a time; the remainder stays below d <= 2^63, so shifting it
  // left never overflows.
  u64 remainder = high;
  u64 quotient = 0;
  for (int bit = 63; bit >= 0; --bit) {
    remainder = (remainder << 1) | ((low >> bit) & 1U);
    quotient <<= 1;
    if (remainder >= d) {
      remainder -= d;
      quotient |= 1U;
    }
  }
  if (quotient >= max) return saturated(quotient);
  return saturated(quotient + (remainder != 0 ? 1 : 0));
}

/// Returns `a * b / c` rounded up, for non-negative a, b and positive c, saturated at int64 max: the time
/// `a` units of a limit of `c` per period `b` take to refill. With the compiler's 128-bit integer where it
/// has one (GCC, Clang), else mul_div_up_portable; the same result either way.
[[nodiscard]] constexpr std::int64_t mul_div_up(std::int64_t a, std::int64_t b, std::int64_t c) noexcept {
#ifdef __SIZEOF_INT128__
  __extension__ using wide = unsigned __int128;
  const auto quotient = (static_cast<wide>(a) * static_cast<wide>(b) + static_cast<wide>(c) - 1) / static_cast<wide>(c);
  constexpr auto max = static_cast<wide>(std::numeric_limits<std::int64_t>::max());
  return static_cast<std::int64_t>(quotient > max ? max : quotient);
#else
  return mul_div_up_portable(a, b, c);
#endif
}

}  // namespace detail
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_DETAIL_SATURATE_HPP
