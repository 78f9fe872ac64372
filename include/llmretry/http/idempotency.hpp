#ifndef LLMRETRY_HTTP_IDEMPOTENCY_HPP
#define LLMRETRY_HTTP_IDEMPOTENCY_HPP

#include <string>

#include "../detail/uuid.hpp"
#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// Returns a random UUID version 4 (RFC 9562) in its 36-character lower-case form, such as
/// "3f2b8c1e-9a4d-4e7f-b1c2-0d9e8f7a6b5c", with 122 bits drawn from `rng`, any
/// UniformRandomBitGenerator. Throws only what `rng` throws (and std::bad_alloc).
template <class Rng>
[[nodiscard]] std::string uuid_v4(Rng& rng) {
  return detail::uuid_v4(rng);
}

/// Returns a new idempotency key for one logical call: a UUID v4 from this thread's ThreadRng, which is
/// seeded from std::random_device, the time, the thread and an address, so that no two processes share
/// a sequence. Send the same key on every attempt of that call, and a new key for the next call.
[[nodiscard]] inline std::string new_idempotency_key() { return detail::random_uuid(); }

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_HTTP_IDEMPOTENCY_HPP
