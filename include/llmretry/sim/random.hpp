#ifndef LLMRETRY_SIM_RANDOM_HPP
#define LLMRETRY_SIM_RANDOM_HPP

#include <cstdint>
#include <limits>

#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace sim {

/// A small, fast UniformRandomBitGenerator (SplitMix64) with 64 bits of state. Its sequence is fixed by
/// its seed on every platform, which makes simulations repeat exactly. Not for cryptography.
class SplitMix64 {
 public:
  using result_type = std::uint64_t;
  /// Starts the sequence at `seed`.
  explicit constexpr SplitMix64(std::uint64_t seed) noexcept : state_(seed) {}

  /// Returns the smallest value operator() returns: 0.
  [[nodiscard]] static constexpr result_type min() noexcept { return 0; }
  /// Returns the largest value operator() returns: 2^64 - 1.
  [[nodiscard]] static constexpr result_type max() noexcept { return std::numeric_limits<result_type>::max(); }

  /// Returns the next 64 random bits.
  constexpr result_type operator()() noexcept {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }

 private:
  std::uint64_t state_;
};

/// Returns the generator of stream `stream` (a client's index, say) derived from one simulation `seed`:
/// different streams of one seed, and the same stream of different seeds, do not overlap in practice.
[[nodiscard]] constexpr SplitMix64 stream(std::uint64_t seed, std::uint64_t stream) noexcept {
  SplitMix64 mixer{seed ^ (0xD1B54A32D192ED03ULL * (stream + 1))};
  return SplitMix64{mixer()};
}

}  // namespace sim
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_SIM_RANDOM_HPP
