#ifndef LLMRETRY_HTTP_IDEMPOTENCY_HPP
#define LLMRETRY_HTTP_IDEMPOTENCY_HPP

#include <cstdint>
#include <limits>
#include <random>
#include <string>

#include "../random.hpp"

namespace llmretry {

/// Returns a random UUID version 4 (RFC 9562) in its 36-character lower-case form, such as
/// "3f2b8c1e-9a4d-4e7f-b1c2-0d9e8f7a6b5c", with 122 bits drawn from `rng`, any
/// UniformRandomBitGenerator. Throws only what `rng` throws (and std::bad_alloc).
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

/// Returns a new idempotency key for one logical call: a UUID v4 from this thread's ThreadRng, which is
/// seeded from std::random_device, the time, the thread and an address, so that no two processes share
/// a sequence. Send the same key on every attempt of that call, and a new key for the next call.
[[nodiscard]] inline std::string new_idempotency_key() {
  ThreadRng rng;
  return uuid_v4(rng);
}

}  // namespace llmretry

#endif  // LLMRETRY_HTTP_IDEMPOTENCY_HPP
