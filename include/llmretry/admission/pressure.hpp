#ifndef LLMRETRY_ADMISSION_PRESSURE_HPP
#define LLMRETRY_ADMISSION_PRESSURE_HPP

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "../detail/config.hpp"
#include "../version.hpp"
#include "circuit_breaker.hpp"
#include "deployment.hpp"
#include "limits.hpp"
#include "priority.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// How hard a deployment is pressed, for the application to degrade its service gracefully. The
/// library reports it; what to do is the application's choice (PressureRules writes it down), for
/// instance: light: shorter max_tokens and retrieved context; moderate: simple tasks to a smaller model;
/// high: defer work that is not urgent; extreme: a cached or prepared answer.
enum class Pressure {
  normal,    ///< capacity to spare
  light,     ///< little burst left: calls start at once, but not for long
  moderate,  ///< new calls wait for capacity
  high,      ///< new calls wait long, or the deployment is being probed after an outage
  extreme,   ///< new calls would wait very long, or the deployment is down (breaker open)
};

/// Returns the name of a level ("normal", "light", "moderate", "high", "extreme").
[[nodiscard]] constexpr const char* to_string(Pressure pressure) noexcept {
  switch (pressure) {
    case Pressure::normal: return "normal";
    case Pressure::light: return "light";
    case Pressure::moderate: return "moderate";
    case Pressure::high: return "high";
    case Pressure::extreme: return "extreme";
  }
  return "unknown";
}

/// Where each level starts.
struct PressureThresholds {
  double light_headroom = 0.25;                                      ///< less free burst than this share: light
  std::chrono::milliseconds moderate_wait{1000};                     ///< a new call waits at least this: moderate
  std::chrono::milliseconds high_wait{std::chrono::seconds{10}};     ///< ... at least this: high
  std::chrono::milliseconds extreme_wait{std::chrono::seconds{60}};  ///< ... at least this: extreme

  /// Throws std::invalid_argument naming the field when light_headroom is outside [0, 1] or the waits
  /// are not positive and increasing.
  void validate() const {
    if (!(light_headroom >= 0.0 && light_headroom <= 1.0))
      detail::throw_invalid_argument("PressureThresholds::light_headroom must be in [0, 1]");
    if (moderate_wait <= std::chrono::milliseconds::zero())
      detail::throw_invalid_argument("PressureThresholds::moderate_wait must be positive");
    if (high_wait <= moderate_wait)
      detail::throw_invalid_argument("PressureThresholds::high_wait must exceed moderate_wait");
    if (extreme_wait <= high_wait)
      detail::throw_invalid_argument("PressureThresholds::extreme_wait must exceed high_wait");
  }
};

/// Returns the level for a new call that would wait `queue_wait` for capacity, on a deployment with
/// `headroom` (the share of burst free on its tightest dimension, in [0, 1]).
[[nodiscard]] constexpr Pressure pressure_of(std::chrono::milliseconds queue_wait, double headroom,
                                             const PressureThresholds& thresholds = {}) noexcept {
  if (queue_wait >= thresholds.extreme_wait) return Pressure::extreme;
  if (queue_wait >= thresholds.high_wait) return Pressure::high;
  if (queue_wait >= thresholds.moderate_wait) return Pressure::moderate;
  if (headroom < thresholds.light_headroom) return Pressure::light;
  return Pressure::normal;
}

/// Returns the pressure on `deployment` now (on its clock): from its rate limiter's queue wait and
/// headroom, and with a shared pacing state from what its last reservation there said (carried to now:
/// Deployment::shared_snapshot), the greater pressure of the two; at least moderate while calls wait in line for a
/// concurrency slot; extreme while `breaker` (when given) is open and at least high while it is half-open. Throws
/// std::invalid_argument naming the field when `thresholds` make no sense.
[[nodiscard]] inline Pressure pressure(Deployment& deployment, CircuitBreaker* breaker = nullptr,
                                       const PressureThresholds& thresholds = {}) {
  thresholds.validate();
  const auto now = deployment.now();
  if (breaker != nullptr) {
    const CircuitState state = breaker->state(breaker->now());
    if (state == CircuitState::open) return Pressure::extreme;
    if (state == CircuitState::half_open) return std::max(Pressure::high, pressure(deployment, nullptr, thresholds));
  }
  double headroom = 1.0;
  for (std::size_t d = 0; d < dimension_count; ++d)
    headroom = std::min(headroom, deployment.limiter().headroom(static_cast<Dimension>(d), now));
  std::chrono::milliseconds queue_wait = deployment.limiter().queue_wait(now);
  if (const std::optional<SharedSnapshot> shared = deployment.shared_snapshot()) {  // the fleet's load
    const SharedSnapshot seen = shared->at(now);
    headroom = std::min(headroom, seen.headroom);
    queue_wait = std::max(queue_wait, seen.queue_wait);
  }
  const Pressure level = pressure_of(queue_wait, headroom, thresholds);
  const ConcurrencyLimit* slots = deployment.concurrency();
  if (slots != nullptr && slots->waiting() > 0) return std::max(level, Pressure::moderate);
  return level;
}

/// What to do with a request at one level of pressure; each part is optional, and they combine.
struct PressureRule {
  std::optional<std::int64_t> max_tokens;  ///< ask at most this many output tokens: a larger ask is cut to it
  std::string model;                       ///< send the request to this (smaller) model instead; empty: keep it
  std::optional<Priority> hold;  ///< requests of this class and below are held back: the caller comes back later
  bool fallback = false;         ///< answer from the fallbacks at once: the request skips the pressed primary
};

/// What each level of pressure does to requests: a rule per level above normal. A level without a rule
/// takes the rule of the highest level below it that has one, so {light: cut max_tokens, high: hold batch}
/// cuts at light and moderate, and holds at high and extreme.
struct PressureRules {
  std::array<std::optional<PressureRule>, 4> levels;  ///< light, moderate, high, extreme

  /// Returns the rule in force at `level`; null at normal, or when no level at or below it has one.
  [[nodiscard]] const PressureRule* in_force(Pressure level) const noexcept {
    for (auto index = static_cast<std::size_t>(level); index > 0; --index)
      if (levels[index - 1]) return &*levels[index - 1];
    return nullptr;
  }

  /// Returns true when no level has a rule.
  [[nodiscard]] bool empty() const noexcept {
    return std::none_of(levels.begin(), levels.end(), [](const auto& rule) { return rule.has_value(); });
  }
};

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_ADMISSION_PRESSURE_HPP
