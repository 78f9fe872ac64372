#ifndef LLMRETRY_SIM_EVENT_QUEUE_HPP
#define LLMRETRY_SIM_EVENT_QUEUE_HPP

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "../detail/config.hpp"
#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE
namespace sim {

/// Virtual time, counted from the start of a simulation. Nothing in the simulator reads a real clock.
using Time = std::chrono::milliseconds;

/// One scheduled event: when it happens, its rank among events at the same instant, and what it carries.
template <class Payload>
struct Event {
  Time at{0};                  ///< when it happens
  std::uint64_t rank = 0;      ///< among events at the same instant, a lower rank comes first
  std::uint64_t sequence = 0;  ///< push order: among equal (at, rank), the earlier push comes first
  Payload payload;             ///< what the event carries (the simulator: a client's index)
};

/// A priority queue of events in virtual time: pop() returns the earliest event; events at the same
/// instant come out by rank, then in the order they were pushed. The order is a total order, so a run
/// is the same on every platform and standard library.
template <class Payload>
class EventQueue {
 public:
  /// Schedules `payload` at `at` with tie-breaking `rank`. Throws std::invalid_argument when `at` is
  /// before the last popped event (time never goes back).
  void push(Time at, std::uint64_t rank, Payload payload) {
    if (at < now_) detail::throw_invalid_argument("EventQueue::push: the event is in the past");
    heap_.push_back(Event<Payload>{at, rank, next_sequence_++, std::move(payload)});
    std::push_heap(heap_.begin(), heap_.end(), later);
  }

  /// Removes and returns the earliest event, and moves now() to its time. Requires !empty().
  [[nodiscard]] Event<Payload> pop() {
    std::pop_heap(heap_.begin(), heap_.end(), later);
    Event<Payload> event = std::move(heap_.back());
    heap_.pop_back();
    now_ = event.at;
    return event;
  }

  /// Returns true when no event is scheduled.
  [[nodiscard]] bool empty() const noexcept { return heap_.empty(); }
  /// Returns how many events are scheduled.
  [[nodiscard]] std::size_t size() const noexcept { return heap_.size(); }
  /// Returns the time of the last popped event (zero before the first pop).
  [[nodiscard]] Time now() const noexcept { return now_; }
  /// Reserves room for `count` scheduled events.
  void reserve(std::size_t count) { heap_.reserve(count); }

 private:
  [[nodiscard]] static bool later(const Event<Payload>& a, const Event<Payload>& b) noexcept {
    if (a.at != b.at) return a.at > b.at;
    if (a.rank != b.rank) return a.rank > b.rank;
    return a.sequence > b.sequence;
  }

  std::vector<Event<Payload>> heap_;
  std::uint64_t next_sequence_ = 0;
  Time now_{0};
};

}  // namespace sim
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_SIM_EVENT_QUEUE_HPP
