#ifndef LLMRETRY_ADMISSION_PRIORITY_HPP
#define LLMRETRY_ADMISSION_PRIORITY_HPP

/// Priority classes in admission: which calls yield when a deployment's capacity is short.

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string_view>

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

/// Returns the class named `name` ("interactive", "standard", "batch"), or nullopt.
[[nodiscard]] constexpr std::optional<Priority> priority_from_string(std::string_view name) noexcept {
  for (const auto priority : {Priority::interactive, Priority::standard, Priority::batch})
    if (name == to_string(priority)) return priority;
  return std::nullopt;
}

/// How one reservation yields to others: the share of every dimension's burst it leaves free, in [0, 1)
/// (zero with `ahead` true: an interactive reservation, which may start later than now, in line); and the
/// tenant it is for, whose reservations are held to its share of the capacity while others want theirs.
struct Precedence {
  /// The share of each dimension's burst this reservation leaves free for calls of higher classes (a value
  /// outside [0, 1) is taken as the nearest bound; not a number as 0).
  double kept_free = 0.0;
  /// True: it may reserve capacity that frees up later (in line); false: only what is free now beyond
  /// `kept_free`, else it is held back.
  bool ahead = true;
  /// The tenant (empty: none): among the tenants that reserved within TenantShares::window, each is
  /// owed capacity in proportion to its `weight`. A tenant past what it is owed by more than one burst
  /// yields as a batch call does (TenantShares::past_share_kept_free, never ahead): it uses what the
  /// others leave, and their calls wait behind at most one burst of its own.
  std::string_view tenant;
  double weight = 1.0;  ///< the tenant's weight, in (0, 1000]
  /// True: held back long enough (PriorityOptions::longest_hold), it yields no more, neither for its class
  /// nor as a tenant past its share (its tenant is still charged).
  bool promoted = false;
};

namespace detail {

/// Returns a 64-bit hash of a tenant's name (FNV-1a), never 0.
[[nodiscard]] constexpr std::uint64_t tenant_hash(std::string_view tenant) noexcept {
  std::uint64_t hash = 14695981039346656037ULL;
  for (const char c : tenant) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  return hash == 0 ? 1 : hash;
}

/// Returns the share of a burst usable by a reservation that keeps `kept_free` of it free: 1 - kept_free
/// within [0, 1] (not a number: 1).
[[nodiscard]] constexpr double usable_share(double kept_free) noexcept {
  if (!(kept_free > 0.0)) return 1.0;
  return kept_free >= 1.0 ? 0.0 : 1.0 - kept_free;
}

/// Returns a tenant's `weight` in thousandths, within [1, 1,000,000] (not a number: 1).
[[nodiscard]] constexpr std::int64_t weight_in_thousandths(double weight) noexcept {
  if (!(weight > 0.001)) return 1;
  if (!(weight < 1000.0)) return 1'000'000;
  return static_cast<std::int64_t>(weight * 1000.0);
}

}  // namespace detail

/// How capacity is shared out between tenants.
struct TenantShares {
  /// A tenant counts in the sharing while it reserved within this window.
  std::chrono::milliseconds window{std::chrono::seconds{10}};
  /// The share of each dimension's burst a tenant past what it is owed leaves free for the others.
  double past_share_kept_free = 0.5;
  /// The most tenants tracked at once; the others share one entry ("other").
  int max_tenants = 64;

  /// Throws std::invalid_argument naming the field when the window is outside (0, 1 day], the share is
  /// outside [0, 1) or max_tenants is outside [1, 1000].
  void validate() const {
    if (window <= std::chrono::milliseconds::zero() || window > std::chrono::hours{24})
      detail::throw_invalid_argument("TenantShares::window must be in (0, 1 day]");
    if (!(past_share_kept_free >= 0.0 && past_share_kept_free < 1.0))
      detail::throw_invalid_argument("TenantShares::past_share_kept_free must be in [0, 1)");
    if (max_tenants < 1 || max_tenants > 1000)
      detail::throw_invalid_argument("TenantShares::max_tenants must be in [1, 1000]");
  }
};

/// Returns `precedence` promoted: it yields no more (Precedence::promoted), its tenant and weight kept.
[[nodiscard]] constexpr Precedence promoted(Precedence precedence) noexcept {
  precedence.kept_free = 0.0;
  precedence.ahead = true;
  precedence.promoted = true;
  return precedence;
}

/// What each class leaves to the ones above it, and how a held-back call is kept from starving.
struct PriorityOptions {
  /// The share of each dimension's burst a standard call leaves free for interactive calls.
  double standard_kept_free = 0.25;
  /// The share of each dimension's burst a batch call leaves free for interactive and standard calls.
  double batch_kept_free = 0.5;
  /// A call of a lower class (or a tenant past its share) held back this long in one attempt reserves as an
  /// interactive call from then on (in line behind earlier reservations, Precedence::promoted): capacity
  /// taken by higher classes delays it, never forever. Zero: no call paced by a Deployment yields at all.
  std::chrono::milliseconds longest_hold{std::chrono::seconds{30}};

  /// Throws std::invalid_argument naming the field when a share is outside [0, 1), batch leaves less than
  /// standard, or longest_hold is outside [0, 1 day].
  void validate() const {
    if (!(standard_kept_free >= 0.0 && standard_kept_free < 1.0))
      detail::throw_invalid_argument("PriorityOptions::standard_kept_free must be in [0, 1)");
    if (!(batch_kept_free >= standard_kept_free && batch_kept_free < 1.0))
      detail::throw_invalid_argument("PriorityOptions::batch_kept_free must be in [standard_kept_free, 1)");
    if (longest_hold < std::chrono::milliseconds::zero() || longest_hold > std::chrono::hours{24})
      detail::throw_invalid_argument("PriorityOptions::longest_hold must be in [0, 1 day]");
  }

  /// Returns how a reservation of `priority` yields.
  [[nodiscard]] constexpr Precedence precedence(Priority priority) const noexcept {
    Precedence yields;
    if (priority == Priority::interactive) return yields;
    yields.kept_free = priority == Priority::standard ? standard_kept_free : batch_kept_free;
    yields.ahead = false;
    return yields;
  }
};

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_ADMISSION_PRIORITY_HPP
