#ifndef LLMRETRY_DETAIL_SATURATE_HPP
#define LLMRETRY_DETAIL_SATURATE_HPP

#include <chrono>
#include <limits>

namespace llmretry::detail {

using std::chrono::milliseconds;

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

}  // namespace llmretry::detail

#endif  // LLMRETRY_DETAIL_SATURATE_HPP
