// What llmretry-relay checks before it trusts a request: the client key, and header values it forwards.
#ifndef LLMRETRY_RELAY_SECURITY_HPP
#define LLMRETRY_RELAY_SECURITY_HPP

#include <llmretry/detail/text.hpp>

#include <cstddef>
#include <string>
#include <string_view>

namespace relay {

/// Returns true when `given` equals `expected`, in a time that depends on the length of `expected` only
/// (never on where they differ), so that a client cannot guess the key byte by byte.
inline bool equal_in_constant_time(std::string_view given, std::string_view expected) noexcept {
  unsigned char difference = given.size() == expected.size() ? 0 : 1;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const char mine = i < given.size() ? given[i] : '\0';
    difference = static_cast<unsigned char>(
        difference | (static_cast<unsigned char>(mine) ^ static_cast<unsigned char>(expected[i])));
  }
  return difference == 0;
}

/// Returns the credentials of the header value `authorization` when it is "Bearer KEY" (the scheme in any
/// case); empty otherwise.
inline std::string_view bearer_of(std::string_view authorization) noexcept {
  constexpr std::string_view scheme = "Bearer ";
  if (!llmretry::detail::iequals(authorization.substr(0, scheme.size()), scheme)) return {};
  return authorization.substr(scheme.size());
}

/// Returns true when `host` (of --listen) is a loopback address: an IPv4 literal in 127.0.0.0/8, ::1 or
/// "localhost" (a name such as "127.example.org" is not).
inline bool is_loopback(std::string_view host) noexcept {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  return host.substr(0, 4) == "127." && host.find_first_not_of("0123456789.") == std::string_view::npos;
}

/// Returns true when `value` can go into a header sent upstream as is: 1 to 255 visible ASCII characters
/// (no space, no CR, LF or other control character), as an Idempotency-Key must be.
inline bool is_header_token(std::string_view value) noexcept {
  if (value.empty() || value.size() > 255) return false;
  for (const char c : value)
    if (c < 0x21 || c > 0x7E) return false;
  return true;
}

/// The deepest nesting of arrays and objects accepted in a request body (see json::nested_deeper_than): far
/// beyond what an API request needs, and shallow enough that no recursive walk of the parsed body
/// (serialising it, for one) can exhaust a thread's stack.
inline constexpr int max_json_depth = 64;

}  // namespace relay

#endif  // LLMRETRY_RELAY_SECURITY_HPP
