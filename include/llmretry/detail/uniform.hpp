#ifndef LLMRETRY_DETAIL_UNIFORM_HPP
#define LLMRETRY_DETAIL_UNIFORM_HPP

#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>

#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace detail {

/// Returns 64 uniformly random bits from any UniformRandomBitGenerator whose range is a power of two
/// (mt19937, mt19937_64, pcg, splitmix...), combining draws as needed.
template <class Rng>
[[nodiscard]] std::uint64_t random_bits64(Rng& rng) {
  using result = typename std::remove_reference_t<Rng>::result_type;
  constexpr auto lo = static_cast<std::uint64_t>((std::remove_reference_t<Rng>::min)());
  constexpr auto span = static_cast<std::uint64_t>((std::remove_reference_t<Rng>::max)()) - lo;
  static_assert(std::is_unsigned_v<result>, "a UniformRandomBitGenerator returns an unsigned type");
  if constexpr (span == std::numeric_limits<std::uint64_t>::max()) {
    return static_cast<std::uint64_t>(rng()) - lo;
  } else {
    static_assert((span & (span + 1)) == 0, "random_bits64 needs a generator whose range is a power of two");
    constexpr int bits = [] {
      int n = 0;
      for (auto s = span; s != 0; s >>= 1) ++n;
      return n;
    }();
    std::uint64_t value = 0;
    for (int filled = 0; filled < 64; filled += bits)
      value = (value << bits) | (static_cast<std::uint64_t>(rng()) - lo);
    return value;
  }
}

/// Returns a uniformly distributed integer in [lo, hi] (requires lo <= hi), without modulo bias.
/// The draw sequence is the same with every standard library, so simulations repeat across platforms
/// for generators whose range is a power of two; other generators go through std::uniform_int_distribution.
template <class Rng>
[[nodiscard]] std::int64_t uniform_between(Rng& rng, std::int64_t lo, std::int64_t hi) {
  if (lo == hi) return lo;
  using R = std::remove_reference_t<Rng>;
  constexpr auto span = static_cast<std::uint64_t>((R::max)()) - static_cast<std::uint64_t>((R::min)());
  if constexpr ((span & (span + 1)) == 0) {
    const std::uint64_t range = static_cast<std::uint64_t>(hi) - static_cast<std::uint64_t>(lo);  // hi - lo
    if (range == std::numeric_limits<std::uint64_t>::max()) return static_cast<std::int64_t>(random_bits64(rng));
    const std::uint64_t buckets = range + 1;
    // Reject the top partial bucket so every value has the same number of preimages.
    const std::uint64_t limit =
        std::numeric_limits<std::uint64_t>::max() - std::numeric_limits<std::uint64_t>::max() % buckets;
    std::uint64_t x = random_bits64(rng);
    while (x >= limit) x = random_bits64(rng);
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(lo) + x % buckets);
  } else {
    return std::uniform_int_distribution<std::int64_t>{lo, hi}(rng);
  }
}

}  // namespace detail
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_DETAIL_UNIFORM_HPP
