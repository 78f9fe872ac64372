#ifndef LLMRETRY_HTTP_HEADERS_HPP
#define LLMRETRY_HTTP_HEADERS_HPP

#include <chrono>
#include <optional>
#include <string_view>

#include "../clock.hpp"
#include "../detail/header_lookup.hpp"
#include "../detail/http_date.hpp"
#include "../detail/number.hpp"
#include "../detail/text.hpp"
#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// Parses an HTTP date in any of the formats of RFC 9110 section 5.6.7: IMF-fixdate
/// ("Sun, 06 Nov 1994 08:49:37 GMT"), RFC 850 ("Sunday, 06-Nov-94 08:49:37 GMT") and asctime
/// ("Sun Nov  6 08:49:37 1994"), GMT only, names in any case. A two-digit year is the year with those
/// digits less than 50 years before `now` and at most 50 after (never more than 50 years in the future).
/// Returns nullopt when the text is not such a date; never throws. A date beyond what system_clock can
/// hold is clamped to its range.
[[nodiscard]] inline std::optional<std::chrono::system_clock::time_point> parse_http_date(
    std::string_view text, std::chrono::system_clock::time_point now) noexcept {
  const auto seconds = detail::parse_http_date_seconds(text, detail::year_of(now));
  if (!seconds) return std::nullopt;
  return detail::clamped_time_point(*seconds);
}

/// Returns parse_http_date(text, real_wall_now()).
[[nodiscard]] inline std::optional<std::chrono::system_clock::time_point> parse_http_date(
    std::string_view text) noexcept {
  return parse_http_date(text, real_wall_now());
}

/// Returns the value of one Retry-After style header as a wait from `now`: delay-seconds (fractions
/// accepted) or an HTTP date, rounded up to whole milliseconds; a date in the past gives 0.
/// Returns nullopt when the value is malformed; never throws.
[[nodiscard]] inline std::optional<std::chrono::milliseconds> parse_retry_after(
    std::string_view value, std::chrono::system_clock::time_point now) noexcept {
  using namespace std::chrono;
  if (auto delay = detail::parse_decimal_ms(value, 1000)) return delay;
  const auto when = parse_http_date(value, now);
  if (!when) return std::nullopt;
  if (*when <= now) return milliseconds::zero();
  const auto ahead = *when - now;  // both in range, the difference may still be large
  return ceil<milliseconds>(ahead);
}

/// Returns the wait a response asks for, reading its headers in order of precision:
/// `retry-after-ms` (milliseconds, fractions rounded up), `x-ms-retry-after-ms`, then `retry-after`
/// (delay-seconds or an HTTP date, relative to `now`). A malformed value is skipped, a date in the past
/// gives 0, a huge value saturates at milliseconds::max(). Names compare case-insensitively.
/// `headers`: a container of name/value pairs (std::map, std::unordered_map, std::vector of pairs...) or a
/// callable `lookup(std::string_view name)` returning std::optional<string-like>, a pointer (null when
/// absent) or a string (empty when absent). Returns nullopt when no usable header is present. Never throws.
template <class Headers>
[[nodiscard]] std::optional<std::chrono::milliseconds> requested_wait(const Headers& headers,
                                                                      std::chrono::system_clock::time_point now) {
  std::optional<std::chrono::milliseconds> wait;
  for (std::string_view name : {"retry-after-ms", "x-ms-retry-after-ms"}) {
    detail::with_header(headers, name, [&](std::string_view value) { wait = detail::parse_decimal_ms(value, 1); });
    if (wait) return wait;
  }
  detail::with_header(headers, "retry-after", [&](std::string_view value) { wait = parse_retry_after(value, now); });
  return wait;
}

/// Returns the provider's explicit `x-should-retry` ("true" or "false", any case), or nullopt when
/// absent or anything else.
template <class Headers>
[[nodiscard]] std::optional<bool> should_retry(const Headers& headers) {
  std::optional<bool> answer;
  detail::with_header(headers, "x-should-retry", [&](std::string_view value) {
    value = detail::trim_ows(value);
    if (detail::iequals(value, "true")) answer = true;
    else if (detail::iequals(value, "false")) answer = false;
  });
  return answer;
}

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_HTTP_HEADERS_HPP
