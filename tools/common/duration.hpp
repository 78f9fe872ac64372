// Durations on the command lines of the llmretry tools: one rule for every program.
#ifndef LLMRETRY_TOOLS_COMMON_DURATION_HPP
#define LLMRETRY_TOOLS_COMMON_DURATION_HPP

#include <llmretry/detail/duration.hpp>
#include <llmretry/detail/number.hpp>

#include <chrono>
#include <string>
#include <string_view>
#include <utility>

#include "program.hpp"

namespace llmretry_tools {

/// Returns `duration` written in the largest of h, m and s that divides it, else in ms: "1h", "90s", "250ms",
/// and "0".
inline std::string duration_text(std::chrono::milliseconds duration) {
  const long long ms = duration.count();
  if (ms == 0) return "0";
  for (const auto& [length, unit] : {std::pair{3'600'000LL, "h"}, {60'000LL, "m"}, {1'000LL, "s"}})
    if (ms != 0 && ms % length == 0) return std::to_string(ms / length) + unit;
  return std::to_string(ms) + "ms";
}

/// Returns the duration `text` given to `option`: numbers each followed by its unit (h, m, s, ms, us or ns),
/// one after another ("30s", "500ms", "1m30s", "0.5s"; what falls below a millisecond is rounded up), or a
/// bare 0. Throws UsageError naming the option when a number has no unit (a bare number is read as no unit
/// at all), when `text` is no duration, or when the duration is outside [least, most].
inline std::chrono::milliseconds parse_duration(std::string_view option, std::string_view text,
                                                std::chrono::milliseconds least, std::chrono::milliseconds most) {
  const std::string name(option);
  const std::string given(text);
  const auto duration = llmretry::detail::trim_ows(text) == "0" ? std::chrono::milliseconds::zero()
                                                                : llmretry::detail::parse_duration_ms(text);
  if (!duration) {
    if (llmretry::detail::parse_decimal_ms(text, 1))
      throw UsageError(name + ": \"" + given + "\" has no unit: write it as " + given + "ms, " + given + "s or " +
                       given + "m");
    throw UsageError(name + ": \"" + given + "\" is not a duration such as 30s, 500ms or 1m30s");
  }
  if (*duration < least || *duration > most)
    throw UsageError(name + ": " + given + " is outside " + duration_text(least) + " to " + duration_text(most));
  return *duration;
}

}  // namespace llmretry_tools

#endif  // LLMRETRY_TOOLS_COMMON_DURATION_HPP
