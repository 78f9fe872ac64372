#ifndef LLMRETRY_LOOPBACK_RATE_LIMIT_HPP
#define LLMRETRY_LOOPBACK_RATE_LIMIT_HPP

/// The rate limits a LoopbackProvider enforces in its rate-limited mode, as OpenAI does: requests and
/// tokens per minute, enforced per second, the tokens charged at admission (the prompt and max_tokens),
/// and the state reported on every answer in `x-ratelimit-*` headers.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../admission/limits.hpp"
#include "../admission/tokens.hpp"
#include "../detail/config.hpp"
#include "../detail/number.hpp"
#include "../detail/text.hpp"
#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace testing {

/// The limits of a LoopbackProvider in its rate-limited mode. Each is a bucket refilled continuously at
/// its per-minute rate and holding at most its burst: the default burst of a minute's limit / 60 is a
/// provider that enforces 600 requests per minute as 10 per second.
struct LoopbackLimits {
  std::int64_t requests_per_minute = 0;  ///< at least 1
  std::int64_t tokens_per_minute = 0;    ///< at least 1
  /// The most requests at once, in [1, requests_per_minute]; empty: requests_per_minute / 60, at least 1.
  std::optional<std::int64_t> requests_burst;
  /// The most tokens at once, in [1, tokens_per_minute]; empty: tokens_per_minute / 60, at least 1.
  std::optional<std::int64_t> tokens_burst;
  /// The completion tokens charged to, and produced by, a request that sets no `max_tokens`; at least 0.
  std::int64_t default_max_tokens = 16;
  /// How long each admitted request takes before it is answered; not negative.
  std::chrono::milliseconds latency{0};
  /// The wait before each content event of a streamed answer (one per completion token; see
  /// LoopbackProvider::enforce): an answer of N completion tokens streams for N * token_interval after its
  /// first event. Not negative; 0: every event at once.
  std::chrono::milliseconds token_interval{0};
};

/// What one request costs in the rate-limited mode: its prompt tokens (estimate_tokens of the whole
/// request body) and its completion tokens (its `max_tokens` or `max_completion_tokens`, else the default).
struct LoopbackUsage {
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;

  /// Returns the tokens charged at admission: prompt plus completion.
  [[nodiscard]] constexpr std::int64_t tokens() const noexcept { return prompt_tokens + completion_tokens; }
};

namespace detail {

/// Returns the JSON text `body` from the value of its first `"key"` member (a `"key"` followed by a colon)
/// to its end, found by scanning (no JSON parser: the loopback depends on cpp-httplib alone), at any depth;
/// nullopt when there is none.
inline std::optional<std::string_view> json_member(std::string_view body, std::string_view key) {
  const std::string quoted = std::string("\"").append(key).append("\"");
  for (auto at = body.find(quoted); at != std::string_view::npos; at = body.find(quoted, at + 1)) {
    const std::string_view rest = llmretry::detail::trim_ows(body.substr(at + quoted.size()));
    if (!rest.empty() && rest.front() == ':') return llmretry::detail::trim_ows(rest.substr(1));
  }
  return std::nullopt;
}

/// Returns the non-negative integer value of the first `"key"` member of the JSON text `body` (see
/// json_member); nullopt when absent or not an unsigned integer.
inline std::optional<std::int64_t> json_count(std::string_view body, std::string_view key) {
  const auto value = json_member(body, key);
  if (!value) return std::nullopt;
  return llmretry::detail::parse_digits(value->substr(0, llmretry::detail::digit_run(*value)));
}

/// Returns true when the first `"key"` member of the JSON text `body` (see json_member) is `true`.
inline bool json_true(std::string_view body, std::string_view key) {
  const auto value = json_member(body, key);
  if (!value || value->substr(0, 4) != "true") return false;
  const std::string_view after = value->substr(4);
  return after.empty() || after.front() == ',' || after.front() == '}' || after.front() == ']' ||
         after.front() == ' ' || after.front() == '\t' || after.front() == '\r' || after.front() == '\n';
}

}  // namespace detail

/// Returns the usage of the request `body` under `limits` (see LoopbackUsage); a `max_tokens` above 10^12 (the
/// most any count of the library means) counts as 10^12, so that sums and the times to refill them fit.
[[nodiscard]] inline LoopbackUsage loopback_usage(std::string_view body, const LoopbackLimits& limits) {
  std::optional<std::int64_t> max_tokens = detail::json_count(body, "max_tokens");
  if (!max_tokens) max_tokens = detail::json_count(body, "max_completion_tokens");
  return {estimate_tokens(body),
          std::min(max_tokens.value_or(limits.default_max_tokens), llmretry::detail::most_units)};
}

/// The buckets of the rate-limited mode: admits or refuses each request at the time it is given, and
/// says what to report. Not thread-safe (the LoopbackProvider holds its lock around it).
class LoopbackRateLimit {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  using Headers = std::vector<std::pair<std::string, std::string>>;

  /// The verdict on one request.
  struct Verdict {
    bool admitted = false;
    /// The dimension that refused it, "requests" or "tokens" (OpenAI's error `type`); empty when admitted.
    std::string limited_by;
    /// How long until the request would be admitted, rounded up to whole milliseconds; zero when admitted.
    std::chrono::milliseconds wait{0};
    /// `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`: each limit per minute, the whole units
    /// free after the charge (negative in debt), and the time until the bucket is full again ("250ms").
    Headers headers;
  };

  /// Full buckets at `now`. Throws std::invalid_argument naming the field when a limit makes no sense.
  LoopbackRateLimit(const LoopbackLimits& limits, time_point now)
      : limits_(limits),
        requests_(limits.requests_per_minute, limits.requests_burst, now),
        tokens_(limits.tokens_per_minute, limits.tokens_burst, now) {
    const auto check = [](bool ok, const char* message) {
      if (!ok) llmretry::detail::throw_invalid_argument(message);
    };
    check(limits.requests_per_minute >= 1, "LoopbackLimits::requests_per_minute must be at least 1");
    check(limits.tokens_per_minute >= 1, "LoopbackLimits::tokens_per_minute must be at least 1");
    check(
        !limits.requests_burst || (*limits.requests_burst >= 1 && *limits.requests_burst <= limits.requests_per_minute),
        "LoopbackLimits::requests_burst must be in [1, requests_per_minute]");
    check(!limits.tokens_burst || (*limits.tokens_burst >= 1 && *limits.tokens_burst <= limits.tokens_per_minute),
          "LoopbackLimits::tokens_burst must be in [1, tokens_per_minute]");
    check(limits.default_max_tokens >= 0, "LoopbackLimits::default_max_tokens must not be negative");
    check(limits.latency >= std::chrono::milliseconds::zero(), "LoopbackLimits::latency must not be negative");
    check(limits.token_interval >= std::chrono::milliseconds::zero(),
          "LoopbackLimits::token_interval must not be negative");
  }

  /// Returns the limits it enforces.
  [[nodiscard]] const LoopbackLimits& limits() const noexcept { return limits_; }

  /// Admits a request of `tokens` at `now` when both buckets hold enough (a cost above a burst: when the
  /// bucket is full, which it leaves in debt), charging 1 request and `tokens`; otherwise refuses it,
  /// charging nothing.
  [[nodiscard]] Verdict admit(std::int64_t tokens, time_point now) {
    requests_.refill(now);
    tokens_.refill(now);
    const double request_wait = requests_.wait_for(1);
    const double token_wait = tokens_.wait_for(static_cast<double>(tokens));
    Verdict verdict;
    verdict.admitted = request_wait <= 0 && token_wait <= 0;
    if (verdict.admitted) {
      requests_.take(1);
      tokens_.take(static_cast<double>(tokens));
    } else {
      verdict.limited_by = request_wait >= token_wait ? "requests" : "tokens";
      verdict.wait = ceil_ms(std::max(request_wait, token_wait));
    }
    requests_.report("requests", verdict.headers);
    tokens_.report("tokens", verdict.headers);
    return verdict;
  }

 private:
  /// Returns `seconds` in whole milliseconds, rounded up.
  static std::chrono::milliseconds ceil_ms(double seconds) {
    return std::chrono::milliseconds{static_cast<std::int64_t>(std::ceil(seconds * 1000.0))};
  }

  class Bucket {
   public:
    Bucket(std::int64_t per_minute, std::optional<std::int64_t> burst, time_point now) noexcept
        : limit_(per_minute),
          capacity_(static_cast<double>(burst.value_or(std::max<std::int64_t>(1, per_minute / 60)))),
          per_second_(static_cast<double>(per_minute) / 60.0),
          level_(capacity_),
          updated_(now) {}

    void refill(time_point now) {
      if (now <= updated_) return;
      const double elapsed = std::chrono::duration<double>(now - updated_).count();
      level_ = std::min(capacity_, level_ + elapsed * per_second_);
      updated_ = now;
    }
    /// Returns the seconds until `units` may be taken: until the level reaches them, or the capacity.
    [[nodiscard]] double wait_for(double units) const { return (std::min(units, capacity_) - level_) / per_second_; }
    void take(double units) { level_ -= units; }

    /// Appends this bucket's `x-ratelimit-*-<name>` headers (see Verdict::headers).
    void report(const char* name, Headers& headers) const {
      headers.emplace_back(std::string("x-ratelimit-limit-") + name, std::to_string(limit_));
      headers.emplace_back(std::string("x-ratelimit-remaining-") + name,
                           std::to_string(static_cast<std::int64_t>(std::floor(level_))));
      headers.emplace_back(std::string("x-ratelimit-reset-") + name,
                           std::to_string(ceil_ms((capacity_ - level_) / per_second_).count()) + "ms");
    }

   private:
    std::int64_t limit_;
    double capacity_;
    double per_second_;
    double level_;
    time_point updated_;
  };

  LoopbackLimits limits_;
  Bucket requests_;
  Bucket tokens_;
};

}  // namespace testing
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_LOOPBACK_RATE_LIMIT_HPP
