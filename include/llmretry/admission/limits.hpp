#ifndef LLMRETRY_ADMISSION_LIMITS_HPP
#define LLMRETRY_ADMISSION_LIMITS_HPP

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "../detail/config.hpp"
#include "../version.hpp"
#include "../vocabulary.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// One rate limit: `limit` units per `period`, refilled continuously, of which at most `burst` may be
/// used at once (a provider that enforces 600 per minute as 10 per second: limit 600, burst 10).
struct Limit {
  std::int64_t limit = 0;                   ///< units per period; at least 1
  std::chrono::milliseconds period{60000};  ///< the period; at least 1 ms, at most 1 day
  /// The most units usable at once, in [1, limit]; empty: the whole limit. A cost above the burst (but
  /// within the limit) waits until the bucket is full and then takes what it needs.
  std::optional<std::int64_t> burst;

  /// Returns `count` units per minute, `burst` of them at once (empty: all).
  [[nodiscard]] static constexpr Limit per_minute(std::int64_t count, std::optional<std::int64_t> burst = {}) noexcept {
    return {count, std::chrono::minutes{1}, burst};
  }
  /// Returns `count` units per minute enforced per second: at most a sixtieth of them (at least 1) at
  /// once, so that a minute's worth never leaves in one burst.
  [[nodiscard]] static constexpr Limit per_minute_paced(std::int64_t count) noexcept {
    return per_minute(count, count / 60 > 1 ? count / 60 : 1);
  }
  /// Returns `count` units per day.
  [[nodiscard]] static constexpr Limit per_day(std::int64_t count) noexcept {
    return {count, std::chrono::hours{24}, std::nullopt};
  }
  /// Returns the burst in force: `burst`, or the whole limit.
  [[nodiscard]] constexpr std::int64_t burst_or_limit() const noexcept { return burst.value_or(limit); }
};

/// The dimensions a deployment's limits can apply to, each charged with part of a Cost.
enum class Dimension : std::size_t {
  requests_per_minute,       ///< Cost::requests
  tokens_per_minute,         ///< Cost::tokens()
  input_tokens_per_minute,   ///< Cost::input_tokens (Anthropic ITPM)
  output_tokens_per_minute,  ///< Cost::output_tokens (Anthropic OTPM)
  requests_per_day,          ///< Cost::requests
  tokens_per_day,            ///< Cost::tokens()
};
inline constexpr std::size_t dimension_count = 6;

/// Returns the snake_case name of a dimension, such as "tokens_per_minute".
[[nodiscard]] constexpr const char* to_string(Dimension dimension) noexcept {
  switch (dimension) {
    case Dimension::requests_per_minute: return "requests_per_minute";
    case Dimension::tokens_per_minute: return "tokens_per_minute";
    case Dimension::input_tokens_per_minute: return "input_tokens_per_minute";
    case Dimension::output_tokens_per_minute: return "output_tokens_per_minute";
    case Dimension::requests_per_day: return "requests_per_day";
    case Dimension::tokens_per_day: return "tokens_per_day";
  }
  return "unknown";
}

namespace detail {
/// The most units a limit, or one part of a cost or of a level reported, counts for: 10^12, so that sums, and
/// products with a period, fit 64 bits.
inline constexpr std::int64_t most_units = 1'000'000'000'000;
}  // namespace detail

/// Returns the part of `cost` that `dimension` is charged, each part of the cost bounded to [0, 10^12].
[[nodiscard]] constexpr std::int64_t charge_of(const Cost& cost, Dimension dimension) noexcept {
  // A cost is untrusted (a usage the provider reported): each part counts in [0, 10^12], so that sums fit.
  const auto bounded = [](std::int64_t units) {
    return units < 0 ? 0 : units > detail::most_units ? detail::most_units : units;
  };
  switch (dimension) {
    case Dimension::requests_per_minute:
    case Dimension::requests_per_day: return bounded(cost.requests);
    case Dimension::tokens_per_minute:
    case Dimension::tokens_per_day: return bounded(cost.input_tokens) + bounded(cost.output_tokens);
    case Dimension::input_tokens_per_minute: return bounded(cost.input_tokens);
    case Dimension::output_tokens_per_minute: return bounded(cost.output_tokens);
  }
  return 0;
}

/// Returns `wait` bounded to [0, a day]: a wait the provider reported is untrusted and may be huge or
/// negative, and times computed from it must not overflow.
[[nodiscard]] constexpr std::chrono::milliseconds at_most_a_day(std::chrono::milliseconds wait) noexcept {
  return std::clamp(wait, std::chrono::milliseconds::zero(), std::chrono::milliseconds{std::chrono::hours{24}});
}

/// What a cost charges every dimension at once: charge_of(cost, d) at index d.
using Charges = std::array<std::int64_t, dimension_count>;

/// Returns charge_of(cost, d) for every dimension d, indexed by the dimension.
[[nodiscard]] constexpr Charges charges_of(const Cost& cost) noexcept {
  const std::int64_t requests = charge_of(cost, Dimension::requests_per_minute);
  const std::int64_t input = charge_of(cost, Dimension::input_tokens_per_minute);
  const std::int64_t output = charge_of(cost, Dimension::output_tokens_per_minute);
  return {requests, input + output, input, output, requests, input + output};
}

/// The limits of one deployment (provider, model, key), each optional: an unset dimension is not paced.
struct Limits {
  std::array<std::optional<Limit>, dimension_count> by_dimension{};

  /// Returns the limit of `dimension`, if set.
  [[nodiscard]] constexpr const std::optional<Limit>& operator[](Dimension dimension) const noexcept {
    return by_dimension[static_cast<std::size_t>(dimension)];
  }
  /// Returns the limit of `dimension`, to set or clear.
  [[nodiscard]] constexpr std::optional<Limit>& operator[](Dimension dimension) noexcept {
    return by_dimension[static_cast<std::size_t>(dimension)];
  }

  /// Returns `rpm` requests and `tpm` tokens per minute, the whole limit usable at once.
  [[nodiscard]] static Limits per_minute(std::int64_t rpm, std::int64_t tpm) {
    Limits limits;
    limits[Dimension::requests_per_minute] = Limit::per_minute(rpm);
    limits[Dimension::tokens_per_minute] = Limit::per_minute(tpm);
    return limits;
  }

  /// Throws std::invalid_argument naming the dimension and field when a limit makes no sense: a limit
  /// below 1 or above 10^12, a period outside [1 ms, 1 day], a burst outside [1, limit].
  void validate() const {
    for (std::size_t i = 0; i < dimension_count; ++i) {
      if (!by_dimension[i]) continue;
      validate_limit(*by_dimension[i], static_cast<Dimension>(i));
    }
  }

 private:
  static void validate_limit(const Limit& limit, Dimension dimension) {
    const auto fail = [&](const char* what) {
      detail::throw_invalid_argument((std::string("Limits: ") + to_string(dimension) + what).c_str());
    };
    if (limit.limit < 1 || limit.limit > detail::most_units) fail(".limit must be in [1, 10^12]");
    if (limit.period < std::chrono::milliseconds{1} || limit.period > std::chrono::hours{24})
      fail(".period must be in [1 ms, 1 day]");
    if (limit.burst && (*limit.burst < 1 || *limit.burst > limit.limit)) fail(".burst must be in [1, limit]");
  }
};

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_ADMISSION_LIMITS_HPP
