#ifndef LLMRETRY_ADMISSION_PRIORITY_HPP
#define LLMRETRY_ADMISSION_PRIORITY_HPP

/// Priority classes in admission: which calls yield when a deployment's capacity is short.

#include <chrono>
#include <cstdint>

#include "../detail/config.hpp"
#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// A call's class when capacity is short. An interactive call reserves as soon as capacity allows, in line
/// behind the reservations made before it. A call of a lower class takes only what is free at once beyond
/// a share of each limit's burst kept for the classes above, and never reserves ahead: when that is not
/// free it is held back, holding nothing, and asks again once it could be (ReservationStatus::held_back),
/// so that a call of a higher class arriving meanwhile goes first.
enum class Priority : std::uint8_t {
  interactive,  ///< someone waits for the answer
  standard,     ///< yields to interactive calls
  batch,        ///< yields to interactive and standard calls: uses what they leave
};

/// Returns the name of a class ("interactive", "standard", "batch").
[[nodiscard]] constexpr const char* to_string(Priority priority) noexcept {
  switch (priority) {
    case Priority::interactive: return "interactive";
    case Priority::standard: return "standard";
    case Priority::batch: return "batch";
  }
  return "unknown";
}

/// How one reservation yields to others: the share of every dimension's burst it leaves free, in [0, 1).
/// Zero with `ahead` true: an interactive reservation, which may start later than now (in line).
struct Precedence {
  /// The share of each dimension's burst this reservation leaves free for calls of higher classes.
  double kept_free = 0.0;
  /// True: it may reserve capacity that frees up later (in line); false: only what is free now beyond
  /// `kept_free`, else it is held back.
  bool ahead = true;
};

/// What each class leaves to the ones above it, and how a held-back call is kept from starving.
struct PriorityOptions {
  /// The share of each dimension's burst a standard call leaves free for interactive calls.
  double standard_kept_free = 0.25;
  /// The share of each dimension's burst a batch call leaves free for interactive and standard calls.
  double batch_kept_free = 0.5;
  /// A call of a lower class held back this long in one attempt reserves as an interactive call from then
  /// on (in line behind earlier reservations): capacity taken by higher classes delays it, never forever.
  std::chrono::milliseconds longest_hold{std::chrono::seconds{30}};

  /// Throws std::invalid_argument naming the field when a share is outside [0, 1), batch leaves less than
  /// standard, or longest_hold is negative.
  void validate() const {
    if (!(standard_kept_free >= 0.0 && standard_kept_free < 1.0))
      detail::throw_invalid_argument("PriorityOptions::standard_kept_free must be in [0, 1)");
    if (!(batch_kept_free >= standard_kept_free && batch_kept_free < 1.0))
      detail::throw_invalid_argument("PriorityOptions::batch_kept_free must be in [standard_kept_free, 1)");
    if (longest_hold < std::chrono::milliseconds::zero())
      detail::throw_invalid_argument("PriorityOptions::longest_hold must not be negative");
  }

  /// Returns how a reservation of `priority` yields.
  [[nodiscard]] constexpr Precedence precedence(Priority priority) const noexcept {
    switch (priority) {
      case Priority::interactive: break;
      case Priority::standard: return Precedence{standard_kept_free, false};
      case Priority::batch: return Precedence{batch_kept_free, false};
    }
    return Precedence{};
  }
};

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_ADMISSION_PRIORITY_HPP
