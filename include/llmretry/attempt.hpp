#ifndef LLMRETRY_ATTEMPT_HPP
#define LLMRETRY_ATTEMPT_HPP

#include <chrono>
#include <optional>

#include "version.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// Decides, for a hedged call, which of the two requests of an attempt passes its streamed answer to the
/// caller (see Attempt::claim). Implemented by the drivers that hedge.
class AnswerClaim {
 public:
  AnswerClaim() = default;
  AnswerClaim(const AnswerClaim&) = delete;
  AnswerClaim& operator=(const AnswerClaim&) = delete;
  AnswerClaim(AnswerClaim&&) = delete;
  AnswerClaim& operator=(AnswerClaim&&) = delete;
  virtual ~AnswerClaim() = default;

  /// Returns true when the request (the hedge when `hedge`) may pass its answer to the caller: the first to
  /// ask wins, and the other request is then cancelled.
  virtual bool claim(bool hedge) = 0;
};

/// What call_with_retry tells a call that takes one argument about the attempt it is making.
struct Attempt {
  int number = 1;  ///< 1 for the first attempt, 2 for the first retry...
  /// The time left until the call's deadline when the attempt starts, always positive: bound the
  /// attempt's own timeout by it. nullopt when the call has no deadline.
  std::optional<std::chrono::milliseconds> time_left;
  /// True for a hedge: a second request of attempt `number`, sent while the first is still in flight
  /// (see Hedging). Guards admit it without waiting, or not at all.
  bool hedge = false;
  /// Set by a driver that hedges the call, null otherwise: see claim(). Valid while the request is in flight.
  AnswerClaim* claims = nullptr;

  /// Call before a request passes the first piece of a streamed answer to the caller. Returns false when
  /// the other request of a hedged attempt did first: drop the piece and end the request, which is being
  /// cancelled. Always true for a call that is not hedged. Call it on the driver's executor.
  [[nodiscard]] bool claim() const { return claims == nullptr || claims->claim(hedge); }
};

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_ATTEMPT_HPP
