#ifndef LLMRETRY_ADMISSION_SETTLEMENT_HPP
#define LLMRETRY_ADMISSION_SETTLEMENT_HPP

/// What a pacing guard (Deployment::pace, redis::RateLimiter::pace) does with a reservation around one
/// attempt: why it refuses one that was not granted, what an answer reports it used, and what a failed
/// attempt keeps charged. Shared so that every limiter paces a call the same way.

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

#include "../decision.hpp"
#include "../detail/config.hpp"
#include "../failure.hpp"
#include "../guard.hpp"
#include "../version.hpp"
#include "limits.hpp"
#include "rate_limiter.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// Reads the actual usage from a successful answer's body (such as llmretry::json::usage_of); nullopt
/// when the body does not say.
using UsageReader = std::function<std::optional<Cost>(std::string_view body)>;

namespace detail {
template <class T, class = void>
struct has_body : std::false_type {};
template <class T>
struct has_body<T, std::void_t<decltype(std::string_view(std::declval<const T&>().body))>> : std::true_type {};
}  // namespace detail

/// Returns the usage `read_usage` finds in the `body` member of `answer` (such as curl::Response's);
/// nullopt when the answer has no body, `read_usage` is empty, finds none, or throws: an answer that came
/// is settled (with the estimate) and reported as it came, whatever its reader does, so the exception is
/// dropped.
template <class Answer>
[[nodiscard]] std::optional<Cost> reported_usage(const Answer& answer, const UsageReader& read_usage) noexcept {
  if constexpr (detail::has_body<Answer>::value) {
    if (!read_usage) return std::nullopt;
#if LLMRETRY_HAS_EXCEPTIONS
    try {
      return read_usage(std::string_view(answer.body));
    } catch (...) {
      return std::nullopt;
    }
#else
    return read_usage(std::string_view(answer.body));
#endif
  } else {
    (void)answer;
    (void)read_usage;
    return std::nullopt;
  }
}

/// Returns the shorter of two bounds on a wait, nullopt meaning no bound.
[[nodiscard]] constexpr std::optional<std::chrono::milliseconds> shorter_wait(
    std::optional<std::chrono::milliseconds> a, std::optional<std::chrono::milliseconds> b) noexcept {
  if (!a) return b;
  if (!b) return a;
  return std::min(*a, *b);
}

/// Returns why an attempt stops when it cannot wait long enough for capacity: deadline when `time_left`
/// (the attempt's) bounds the wait at least as much as `max_wait` (the guard's), else no_capacity.
[[nodiscard]] constexpr StopReason reason_for_wait(std::optional<std::chrono::milliseconds> time_left,
                                                   std::optional<std::chrono::milliseconds> max_wait) noexcept {
  return time_left && (!max_wait || *time_left <= *max_wait) ? StopReason::deadline : StopReason::no_capacity;
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

/// Returns the type of limit `dimension` is: requests for the request counts, tokens for the others.
[[nodiscard]] constexpr LimitType limit_type_of(Dimension dimension) noexcept {
  switch (dimension) {
    case Dimension::requests_per_minute:
    case Dimension::requests_per_day: return LimitType::requests;
    case Dimension::tokens_per_minute:
    case Dimension::tokens_per_day:
    case Dimension::input_tokens_per_minute:
    case Dimension::output_tokens_per_minute: return LimitType::tokens;
  }
  return LimitType::unknown;
}

/// Returns the refusal of an attempt whose reservation, made at `now`, was not granted: no_capacity for a
/// cost above a limit (a too_large failure); pacing_unavailable (a connection failure) when the shared
/// pacing state was out of reach; no_capacity for a wait beyond `max_wait`, deadline for a wait beyond
/// `time_left` (the attempt's), the failure then rate_limited with the wait it would have had as its
/// provider_wait. Its limit is the type of the reservation's limited_by() (unknown when it names none, as
/// for a wait after a 429). Requires !reservation.granted().
[[nodiscard]] inline Refusal refusal_of(const Reservation& reservation, std::chrono::steady_clock::time_point now,
                                        std::optional<std::chrono::milliseconds> time_left,
                                        std::optional<std::chrono::milliseconds> max_wait) noexcept {
  const std::optional<Dimension> limited_by = reservation.limited_by();
  const LimitType limit = limited_by ? limit_type_of(*limited_by) : LimitType::unknown;
  if (reservation.status() == ReservationStatus::too_large)
    return Refusal{StopReason::no_capacity, Failure::of(FailureKind::too_large, Sent::not_sent), limit};
  if (reservation.status() == ReservationStatus::unavailable)
    return Refusal{StopReason::pacing_unavailable, Failure::connection_failed(Sent::not_sent), limit};
  Failure failure = Failure::of(FailureKind::rate_limited, Sent::not_sent);
  failure.provider_wait = reservation.wait_after(now);
  return Refusal{reason_for_wait(time_left, max_wait), failure, limit};
}

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_ADMISSION_SETTLEMENT_HPP
