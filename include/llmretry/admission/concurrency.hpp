#ifndef LLMRETRY_ADMISSION_CONCURRENCY_HPP
#define LLMRETRY_ADMISSION_CONCURRENCY_HPP

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>

#include "../detail/config.hpp"
#include "../version.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// Caps the calls in flight at once: a call takes a slot just before it is sent and gives it back when
/// its answer is in. Waiters are served first come, first served. Waiting is either blocking
/// (acquire_until) or by notification (enqueue), so that a virtual-time driver uses the same class.
/// Thread-safe.
class ConcurrencyLimit {
 public:
  /// One caller waiting for a slot, told by granted() when it has one. Must stay alive until then, or
  /// until withdraw() took it out of the queue.
  class Waiter {
   public:
    Waiter() = default;
    Waiter(const Waiter&) = delete;
    Waiter& operator=(const Waiter&) = delete;
    Waiter(Waiter&&) = delete;
    Waiter& operator=(Waiter&&) = delete;
    virtual ~Waiter() = default;

    /// Called, with the limit's lock held, when this waiter has been given a slot: do not call back into
    /// the limit from it.
    virtual void granted() = 0;

   private:
    friend class ConcurrencyLimit;
    Waiter* next_ = nullptr;
    bool queued_ = false;
  };

  /// A limit of `slots` calls in flight. Throws std::invalid_argument when `slots` is below 1.
  explicit ConcurrencyLimit(int slots) : slots_(slots) {
    if (slots < 1) detail::throw_invalid_argument("ConcurrencyLimit: slots must be at least 1");
  }
  ConcurrencyLimit(const ConcurrencyLimit&) = delete;
  ConcurrencyLimit& operator=(const ConcurrencyLimit&) = delete;
  ConcurrencyLimit(ConcurrencyLimit&&) = delete;
  ConcurrencyLimit& operator=(ConcurrencyLimit&&) = delete;
  ~ConcurrencyLimit() = default;

  /// Takes a slot when one is free and nobody waits for it. Returns true when it took one.
  [[nodiscard]] bool try_acquire() {
    std::lock_guard<std::mutex> lock(mutex_);
    return take_if_free();
  }

  /// Takes a slot when one is free and nobody waits (returns true, granted() is not called); otherwise
  /// queues `waiter`, whose granted() is called when a slot is handed to it (returns false).
  [[nodiscard]] bool enqueue(Waiter& waiter) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (take_if_free()) return true;
    waiter.next_ = nullptr;
    waiter.queued_ = true;
    (tail_ != nullptr ? tail_->next_ : head_) = &waiter;
    tail_ = &waiter;
    ++waiting_;
    return false;
  }

  /// Takes `waiter` out of the queue. Returns true when it was still waiting; false when it had been
  /// granted a slot already (which it now holds and must release).
  [[nodiscard]] bool withdraw(Waiter& waiter) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!waiter.queued_) return false;
    Waiter** link = &head_;
    Waiter* previous = nullptr;
    while (*link != &waiter) {
      previous = *link;
      link = &(*link)->next_;
    }
    *link = waiter.next_;
    if (tail_ == &waiter) tail_ = previous;
    waiter.queued_ = false;
    --waiting_;
    return true;
  }

  /// Takes a slot, blocking the calling thread in line until one is free or `deadline` passes.
  /// Returns true when it took one.
  [[nodiscard]] bool acquire_until(std::chrono::steady_clock::time_point deadline) {
    struct Blocked final : Waiter {
      std::condition_variable ready;
      bool done = false;
      void granted() override {
        done = true;
        ready.notify_one();
      }
    } blocked;
    if (enqueue(blocked)) return true;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (blocked.ready.wait_until(lock, deadline, [&] { return blocked.done; })) return true;
    }
    return !withdraw(blocked);
  }

  /// Gives a slot back: the first waiter in line gets it, else it becomes free.
  /// Requires a slot taken by try_acquire, enqueue or acquire_until.
  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (head_ == nullptr) {
      --in_use_;
      return;
    }
    Waiter* first = head_;
    head_ = first->next_;
    if (head_ == nullptr) tail_ = nullptr;
    first->queued_ = false;
    --waiting_;
    first->granted();
  }

  /// Returns the number of slots.
  [[nodiscard]] int slots() const noexcept { return slots_; }
  /// Returns the slots taken now.
  [[nodiscard]] int in_use() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return in_use_;
  }
  /// Returns how many wait in line now.
  [[nodiscard]] std::size_t waiting() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return waiting_;
  }

 private:
  bool take_if_free() noexcept {
    if (head_ != nullptr || in_use_ >= slots_) return false;
    ++in_use_;
    return true;
  }

  const int slots_;
  mutable std::mutex mutex_;
  int in_use_ = 0;
  std::size_t waiting_ = 0;
  Waiter* head_ = nullptr;
  Waiter* tail_ = nullptr;
};

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_ADMISSION_CONCURRENCY_HPP
