#ifndef LLMRETRY_DETAIL_UUID_HPP
#define LLMRETRY_DETAIL_UUID_HPP

#include <cstdint>
#include <limits>
#include <random>
#include <string>

#include "../random.hpp"
#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace detail {

/// Returns a random UUID version 4 (RFC 9562) in its 36-character lower-case form, with 122 bits drawn
/// from `rng`, any UniformRandomBitGenerator. Throws only what `rng` throws (and std::bad_alloc).
template <class Rng>
[[nodiscard]] std::string uuid_v4(Rng& rng) {
  std::uniform_int_distribution<std::uint64_t> draw(0, std::numeric_limits<std::uint64_t>::max());
  std::uint64_t high = draw(rng), low = draw(rng);
  high = (high & ~std::uint64_t{0xF000}) | 0x4000;                         // version 4
  low = (low & ~(std::uint64_t{0xC} << 60)) | (std::uint64_t{0x8} << 60);  // variant 10xx
  constexpr char digits[] = "0123456789abcdef";
  std::string text;
  text.reserve(36);
  for (int i = 0; i < 32; ++i) {
    if (i == 8 || i == 12 || i == 16 || i == 20) text += '-';
    const std::uint64_t word = i < 16 ? high : low;
    text += digits[(word >> (60 - 4 * (i % 16))) & 0xF];
  }
  return text;
}

/// Returns a new UUID v4 from this thread's ThreadRng: unique across processes and threads (an idempotency
/// key, a job's lease token).
[[nodiscard]] inline std::string random_uuid() {
  ThreadRng rng;
  return uuid_v4(rng);
}

}  // namespace detail
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_DETAIL_UUID_HPP
