#ifndef LLMRETRY_RATE_LIMITS_HPP
#define LLMRETRY_RATE_LIMITS_HPP

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "detail/duration.hpp"
#include "detail/text.hpp"
#include "headers.hpp"

namespace llmretry {

/// One rate-limit window as the provider reported it on a response. Each field is empty when the
/// provider did not send it or sent something malformed.
struct RateLimitWindow {
  std::optional<std::int64_t> limit;                     ///< the most allowed in the window
  std::optional<std::int64_t> remaining;                 ///< what is left now; may be negative (a request overshot it)
  std::optional<std::chrono::milliseconds> reset_after;  ///< how long until the window is full again

  /// Returns true when the provider reported nothing usable for this window.
  bool empty() const noexcept { return !limit && !remaining && !reset_after; }
};

/// The rate-limit state a provider sends on every response, successful or not, for pacing later calls.
struct RateLimits {
  RateLimitWindow requests;       ///< requests per window (OpenAI, Azure, Anthropic)
  RateLimitWindow tokens;         ///< tokens per window (OpenAI, Azure, Anthropic)
  RateLimitWindow input_tokens;   ///< input tokens per window (Anthropic)
  RateLimitWindow output_tokens;  ///< output tokens per window (Anthropic)

  /// Returns true when no window has anything usable.
  bool empty() const noexcept {
    return requests.empty() && tokens.empty() && input_tokens.empty() && output_tokens.empty();
  }
};

namespace detail {

/// Parses an optionally signed decimal integer (white space trimmed), saturating at the limits of
/// int64. Returns nullopt for anything else.
constexpr std::optional<std::int64_t> parse_integer(std::string_view text) noexcept {
  text = trim_ows(text);
  const bool negative = !text.empty() && text.front() == '-';
  if (!text.empty() && (text.front() == '-' || text.front() == '+')) text.remove_prefix(1);
  if (text.empty()) return std::nullopt;
  constexpr auto max = std::numeric_limits<std::int64_t>::max();
  std::int64_t value = 0;
  for (char c : text) {
    if (!is_digit(c)) return std::nullopt;
    const int digit = c - '0';
    value = value > (max - digit) / 10 ? max : value * 10 + digit;
  }
  return negative ? -value : value;
}

/// Returns the milliseconds since the epoch of an RFC 3339 date-time ("2024-06-01T12:00:30Z",
/// "2024-06-01T12:00:30.25+02:00"), fractions rounded up; nullopt when the text is not one.
constexpr std::optional<std::int64_t> parse_rfc3339_ms(std::string_view text) noexcept {
  text = trim_ows(text);
  const auto year = take_digits(text, 4);
  if (!year || !take(text, "-")) return std::nullopt;
  const auto month = take_digits(text, 2);
  if (!month || *month < 1 || *month > 12 || !take(text, "-")) return std::nullopt;
  const auto day = take_digits(text, 2);
  if (!day || !(take(text, "T") || take(text, " "))) return std::nullopt;
  const auto time = take_time_of_day(text);
  if (!time) return std::nullopt;
  std::int64_t fraction_ms = 0;
  if (take(text, ".")) {
    std::size_t digits = 0;
    bool beyond = false;  // a non-zero digit past the milliseconds
    for (; digits < text.size() && is_digit(text[digits]); ++digits) {
      if (digits < 3) fraction_ms = fraction_ms * 10 + (text[digits] - '0');
      else if (text[digits] != '0') beyond = true;
    }
    if (digits == 0) return std::nullopt;
    for (std::size_t i = digits; i < 3; ++i) fraction_ms *= 10;
    if (beyond) ++fraction_ms;
    text.remove_prefix(digits);
  }
  std::int64_t offset_seconds = 0;
  if (!take(text, "Z")) {
    const bool ahead = take(text, "+");
    if (!ahead && !take(text, "-")) return std::nullopt;
    const auto hours = take_digits(text, 2);
    if (!hours || *hours > 23 || !take(text, ":")) return std::nullopt;
    const auto minutes = take_digits(text, 2);
    if (!minutes || *minutes > 59) return std::nullopt;
    offset_seconds = (ahead ? 1 : -1) * (std::int64_t{*hours} * 3600 + std::int64_t{*minutes} * 60);
  }
  if (!text.empty()) return std::nullopt;
  const auto seconds = to_epoch_seconds(*year, static_cast<unsigned>(*month), *day, *time);
  if (!seconds) return std::nullopt;
  return (*seconds - offset_seconds) * 1000 + fraction_ms;
}

/// Returns how long from `now` until an RFC 3339 time, rounded up; 0 for a time in the past.
inline std::optional<std::chrono::milliseconds> until_rfc3339(std::string_view text,
                                                              std::chrono::system_clock::time_point now) noexcept {
  using namespace std::chrono;
  const auto when_ms = parse_rfc3339_ms(text);
  if (!when_ms) return std::nullopt;
  const auto now_ms = ceil<milliseconds>(now.time_since_epoch()).count();
  return milliseconds{*when_ms > now_ms ? *when_ms - now_ms : 0};
}

template <class Headers>
void read_count(const Headers& headers, const std::string& name, std::optional<std::int64_t>& field) {
  with_header(headers, name, [&](std::string_view value) { field = parse_integer(value); });
}

}  // namespace detail

/// Returns the rate-limit state in a response's headers, from either family (names case-insensitive):
/// - OpenAI and Azure OpenAI: `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, the reset as a
///   duration such as "6m0s", "1s" or "20ms"; a token count of exactly -1 (Azure's "not known") is left empty;
/// - Anthropic: `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}`,
///   the reset as an RFC 3339 time, turned into a wait from `now` (0 when past).
/// `headers`: any container of name/value pairs or look-up callable, as for requested_wait. A malformed
/// value leaves its field empty; never throws on the values (allocation only for the header names).
template <class Headers>
RateLimits parse_rate_limits(const Headers& headers, std::chrono::system_clock::time_point now) {
  RateLimits limits;
  const auto read_openai = [&](const char* window, RateLimitWindow& into) {
    detail::read_count(headers, std::string("x-ratelimit-limit-") + window, into.limit);
    detail::read_count(headers, std::string("x-ratelimit-remaining-") + window, into.remaining);
    detail::with_header(headers, std::string("x-ratelimit-reset-") + window,
                        [&](std::string_view value) { into.reset_after = detail::parse_duration_ms(value); });
  };
  const auto read_anthropic = [&](const char* window, RateLimitWindow& into) {
    const std::string prefix = std::string("anthropic-ratelimit-") + window;
    if (!into.limit) detail::read_count(headers, prefix + "-limit", into.limit);
    if (!into.remaining) detail::read_count(headers, prefix + "-remaining", into.remaining);
    if (!into.reset_after)
      detail::with_header(headers, prefix + "-reset",
                          [&](std::string_view value) { into.reset_after = detail::until_rfc3339(value, now); });
  };
  read_openai("requests", limits.requests);
  read_openai("tokens", limits.tokens);
  for (auto* count : {&limits.tokens.limit, &limits.tokens.remaining})
    if (*count == -1) count->reset();
  read_anthropic("requests", limits.requests);
  read_anthropic("tokens", limits.tokens);
  read_anthropic("input-tokens", limits.input_tokens);
  read_anthropic("output-tokens", limits.output_tokens);
  return limits;
}

}  // namespace llmretry

#endif  // LLMRETRY_RATE_LIMITS_HPP
