#ifndef LLMRETRY_HTTP_RATE_LIMITS_HPP
#define LLMRETRY_HTTP_RATE_LIMITS_HPP

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "../detail/date.hpp"
#include "../detail/duration.hpp"
#include "../detail/header_lookup.hpp"
#include "../detail/number.hpp"
#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// One rate-limit window as the provider reported it on a response. Each field is empty when the
/// provider did not send it or sent something malformed.
struct RateLimitWindow {
  std::optional<std::int64_t> limit;                     ///< the most allowed in the window
  std::optional<std::int64_t> remaining;                 ///< what is left now; may be negative (a request overshot it)
  std::optional<std::chrono::milliseconds> reset_after;  ///< how long until the window is full again

  /// Returns true when the provider reported nothing usable for this window.
  [[nodiscard]] bool empty() const noexcept { return !limit && !remaining && !reset_after; }
};

/// The rate-limit state a provider sends on every response, successful or not, for pacing later calls.
struct RateLimits {
  RateLimitWindow requests;       ///< requests per window (OpenAI, Azure, Anthropic)
  RateLimitWindow tokens;         ///< tokens per window (OpenAI, Azure, Anthropic)
  RateLimitWindow input_tokens;   ///< input tokens per window (Anthropic)
  RateLimitWindow output_tokens;  ///< output tokens per window (Anthropic)

  /// Returns true when no window has anything usable.
  [[nodiscard]] bool empty() const noexcept {
    return requests.empty() && tokens.empty() && input_tokens.empty() && output_tokens.empty();
  }
};

namespace detail {

/// Stores the integer value of header `name` in `field` when present (empty when malformed).
template <class Headers>
void read_count(const Headers& headers, std::string_view name, std::optional<std::int64_t>& field) {
  with_header(headers, name, [&](std::string_view value) { field = parse_integer(value); });
}

}  // namespace detail

/// Returns the rate-limit state in a response's headers, from either family (names case-insensitive):
/// - OpenAI and Azure OpenAI: `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, the reset as a
///   duration such as "6m0s", "1s" or "20ms"; a token count of exactly -1 (Azure's "not known") is left empty;
/// - Anthropic: `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}`,
///   the reset as an RFC 3339 time, turned into a wait from `now` (0 when past).
/// `headers`: any container of name/value pairs or look-up callable, as for requested_wait. A malformed
/// value leaves its field empty; never throws on one. Allocates nothing itself.
template <class Headers>
[[nodiscard]] RateLimits parse_rate_limits(const Headers& headers, std::chrono::system_clock::time_point now) {
  RateLimits limits;
  // The names of one window's headers: its limit, what remains, and when it resets.
  struct Names {
    std::string_view limit, remaining, reset;
  };
  const auto read = [&](const Names& names, RateLimitWindow& into, auto parse_reset) {
    if (!into.limit) detail::read_count(headers, names.limit, into.limit);
    if (!into.remaining) detail::read_count(headers, names.remaining, into.remaining);
    if (!into.reset_after)
      detail::with_header(headers, names.reset, [&](std::string_view value) { into.reset_after = parse_reset(value); });
  };
  const auto duration = [](std::string_view value) { return detail::parse_duration_ms(value); };
  const auto rfc3339 = [&](std::string_view value) { return detail::until_rfc3339(value, now); };
  read({"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"}, limits.requests,
       duration);
  read({"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"}, limits.tokens,
       duration);
  for (auto* count : {&limits.tokens.limit, &limits.tokens.remaining})
    if (*count == -1) count->reset();
  read({"anthropic-ratelimit-requests-limit", "anthropic-ratelimit-requests-remaining",
        "anthropic-ratelimit-requests-reset"},
       limits.requests, rfc3339);
  read({"anthropic-ratelimit-tokens-limit", "anthropic-ratelimit-tokens-remaining", "anthropic-ratelimit-tokens-reset"},
       limits.tokens, rfc3339);
  read({"anthropic-ratelimit-input-tokens-limit", "anthropic-ratelimit-input-tokens-remaining",
        "anthropic-ratelimit-input-tokens-reset"},
       limits.input_tokens, rfc3339);
  read({"anthropic-ratelimit-output-tokens-limit", "anthropic-ratelimit-output-tokens-remaining",
        "anthropic-ratelimit-output-tokens-reset"},
       limits.output_tokens, rfc3339);
  return limits;
}

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_HTTP_RATE_LIMITS_HPP
