#ifndef LLMRETRY_ATTEMPT_HPP
#define LLMRETRY_ATTEMPT_HPP

#include <chrono>
#include <optional>

#include "version.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// What call_with_retry tells a call that takes one argument about the attempt it is making.
struct Attempt {
  int number = 1;  ///< 1 for the first attempt, 2 for the first retry...
  /// The time left until the call's deadline when the attempt starts, always positive: bound the
  /// attempt's own timeout by it. nullopt when the call has no deadline.
  std::optional<std::chrono::milliseconds> time_left;
};

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_ATTEMPT_HPP
