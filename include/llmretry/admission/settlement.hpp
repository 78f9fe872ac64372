#ifndef LLMRETRY_ADMISSION_SETTLEMENT_HPP
#define LLMRETRY_ADMISSION_SETTLEMENT_HPP

/// What a pacing guard (Deployment::pace, redis::RateLimiter::pace) does with a reservation around one
/// attempt: why it refuses one that was not granted, what an answer reports it used, and what a failed
/// attempt keeps charged. Shared so that every limiter paces a call the same way.

#include <chrono>
#include <functional>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

#include "../decision.hpp"
#include "../failure.hpp"
#include "../guard.hpp"
#include "../http/rate_limits.hpp"
#include "limits.hpp"
#include "rate_limiter.hpp"

namespace llmretry {

/// Reads the actual usage from a successful answer's body (such as llmretry::json::usage_of); nullopt
/// when the body does not say.
using UsageReader = std::function<std::optional<Cost>(std::string_view body)>;

namespace detail {
template <class T, class = void>
struct has_body : std::false_type {};
template <class T>
struct has_body<T, std::void_t<decltype(std::string_view(std::declval<const T&>().body))>> : std::true_type {};
template <class T, class = void>
struct has_headers : std::false_type {};
template <class T>
struct has_headers<T, std::void_t<decltype(parse_rate_limits(std::declval<const T&>().headers,
                                                             std::chrono::system_clock::time_point{}))>>
    : std::true_type {};
}  // namespace detail

/// Returns the usage `read_usage` finds in the `body` member of `answer` (such as curl::Response's);
/// nullopt when the answer has no body, `read_usage` is empty, or it finds none. Throws what
/// `read_usage` throws.
template <class Answer>
[[nodiscard]] std::optional<Cost> reported_usage(const Answer& answer, const UsageReader& read_usage) {
  if constexpr (detail::has_body<Answer>::value) {
    if (read_usage) return read_usage(std::string_view(answer.body));
  }
  return std::nullopt;
}

/// Returns what a reservation of `estimate` keeps charged after an attempt that failed with `failure`:
/// nullopt for one never sent (give everything back: cancel), the request alone for one refused without
/// work (a 429, a 408: no tokens were used), the estimate for one that may have been processed (it may
/// have been billed).
[[nodiscard]] constexpr std::optional<Cost> charge_after(const Failure& failure, const Cost& estimate) noexcept {
  switch (failure.sent) {
    case Sent::not_sent: return std::nullopt;
    case Sent::refused: return Cost{estimate.requests, 0, 0};
    case Sent::maybe_processed: break;
  }
  return estimate;
}

/// Returns the refusal of an attempt whose reservation, made at `now`, was not granted: no_capacity for a
/// cost above a limit (a too_large failure) or a wait beyond `max_wait`, deadline for a wait beyond
/// `time_left` (the attempt's); the failure is then rate_limited, with the wait it would have had as its
/// provider_wait. Requires !reservation.granted().
[[nodiscard]] inline Refusal refusal_of(const Reservation& reservation, std::chrono::steady_clock::time_point now,
                                        std::optional<std::chrono::milliseconds> time_left,
                                        std::optional<std::chrono::milliseconds> max_wait) noexcept {
  if (reservation.status() == ReservationStatus::too_large)
    return Refusal{StopReason::no_capacity, Failure::of(FailureKind::too_large, Sent::not_sent)};
  Failure failure = Failure::of(FailureKind::rate_limited, Sent::not_sent);
  failure.provider_wait = reservation.wait_after(now);
  const bool deadline = time_left && (!max_wait || *time_left <= *max_wait);
  return Refusal{deadline ? StopReason::deadline : StopReason::no_capacity, failure};
}

}  // namespace llmretry

#endif  // LLMRETRY_ADMISSION_SETTLEMENT_HPP
