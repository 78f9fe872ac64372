#ifndef LLMRETRY_STORE_FINGERPRINT_HPP
#define LLMRETRY_STORE_FINGERPRINT_HPP

#include <string>
#include <string_view>

#include "../detail/sha256.hpp"
#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace store {

/// Returns the fingerprint of a request, "sha256:" and the 64 hexadecimal digits of the SHA-256 of
/// `canonical_request`: the bytes that make two requests the same operation. For a JSON body, pass
/// llmretry::json::canonical(body), so that key order and whitespace do not matter. Never throws (except
/// std::bad_alloc).
[[nodiscard]] inline std::string fingerprint(std::string_view canonical_request) {
  return "sha256:" + llmretry::detail::sha256_hex(canonical_request);
}

}  // namespace store
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_STORE_FINGERPRINT_HPP
