#ifndef LLMRETRY_DETAIL_METRIC_FAMILIES_HPP
#define LLMRETRY_DETAIL_METRIC_FAMILIES_HPP

#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "../metrics/prometheus.hpp"
#include "../version.hpp"
#include "config.hpp"

/// The metric families of llmretry's events, as every exporter writes them (metrics::Registry,
/// prometheus_cpp::Families): one table, so that a dashboard reads the same names whichever one serves them.

LLMRETRY_BEGIN_NAMESPACE
namespace detail {

/// A metric family: its name, its # HELP text and the names of its labels, in the order written.
template <std::size_t N>
struct MetricFamily {
  std::string_view name;
  std::string_view help;
  std::array<std::string_view, N> labels;
};

/// The families in the order metrics::Registry writes them: counters, but queue_depth (a gauge) and
/// queue_wait (a histogram).
namespace metric_families {

inline constexpr MetricFamily<3> requests{"llm_requests_total",
                                          "Requests that ended, by status: success, or why they stopped.",
                                          {"provider", "model", "status"}};
inline constexpr MetricFamily<2> tokens_reserved{
    "llm_tokens_reserved_total", "Tokens reserved (estimated) for the attempts sent.", {"provider", "model"}};
inline constexpr MetricFamily<2> tokens_used{
    "llm_tokens_used_total", "Tokens the successful answers reported as used.", {"provider", "model"}};
inline constexpr MetricFamily<3> retries{"llm_retries_total",
                                         "Attempts sent again, by the error of the attempt before.",
                                         {"provider", "model", "error_type"}};
inline constexpr MetricFamily<2> hedges{
    "llm_hedges_total", "Hedges sent: second requests of attempts still in flight.", {"provider", "model"}};
inline constexpr MetricFamily<2> hedge_wins{
    "llm_hedge_wins_total", "Hedges whose answer came first.", {"provider", "model"}};
inline constexpr MetricFamily<2> queue_depth{
    "llm_queue_depth", "Requests waiting in a queue.", {"priority", "task_type"}};
inline constexpr MetricFamily<2> queue_wait{
    "llm_queue_wait_seconds", "Time requests waited in a queue before leaving it.", {"priority", "task_type"}};
inline constexpr MetricFamily<3> rate_limit_hits{"llm_rate_limit_hits_total",
                                                 "Rate limits that requests ran into, by the limit.",
                                                 {"provider", "model", "limit_type"}};
inline constexpr MetricFamily<3> fallbacks{"llm_fallbacks_total",
                                           "Calls moved from one provider to another, by reason.",
                                           {"from_provider", "to_provider", "reason"}};
inline constexpr MetricFamily<1> duplicates{
    "llm_duplicate_suppressed_total",
    "Duplicate requests answered from a stored result or refused instead of being sent again.",
    {"task_type"}};

}  // namespace metric_families

/// Returns the default bounds of the queue-wait buckets, in seconds: 0.01 to 120, for waits from a free
/// slot to minutes of waiting for a per-minute limit.
[[nodiscard]] inline std::vector<double> default_queue_wait_buckets() {
  return {0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
}

/// Returns `bounds` (upper bounds of the queue-wait buckets, seconds, without +Inf). Throws
/// std::invalid_argument, its message starting with `owner`, naming the bound that is not finite, is negative,
/// or is not above the one before.
[[nodiscard]] inline std::vector<double> checked_queue_wait_buckets(std::vector<double> bounds,
                                                                    std::string_view owner) {
  using metrics::format_value;
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    const double bound = bounds[i];
    const std::string at =
        std::string(owner) + ": queue_wait_buckets[" + std::to_string(i) + "] is " + format_value(bound);
    if (!std::isfinite(bound)) throw_invalid_argument((at + ": bounds must be finite (+Inf is always added)").c_str());
    if (bound < 0) throw_invalid_argument((at + ": a wait is never negative").c_str());
    if (i > 0 && bound <= bounds[i - 1])
      throw_invalid_argument(
          (at + ": bounds must increase (the one before is " + format_value(bounds[i - 1]) + ")").c_str());
  }
  return bounds;
}

/// Returns `waited` in seconds as a queue-wait histogram observes it: a negative or NaN wait counts as 0.
[[nodiscard]] inline double observed_wait(std::chrono::duration<double> waited) noexcept {
  return waited.count() > 0 ? waited.count() : 0.0;  // NaN compares false
}

}  // namespace detail
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_DETAIL_METRIC_FAMILIES_HPP
