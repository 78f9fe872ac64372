#ifndef LLMRETRY_DETAIL_SPIN_LOCK_HPP
#define LLMRETRY_DETAIL_SPIN_LOCK_HPP

#include <atomic>
#include <thread>

#include "../version.hpp"

#if defined(_MSC_VER) && (defined(_M_IX86) || defined(_M_X64))
#include <intrin.h>
#endif

LLMRETRY_BEGIN_NAMESPACE
namespace detail {

/// Tells the processor that this thread is waiting in a loop (x86 `pause`, Arm `yield`; nothing elsewhere).
inline void cpu_relax() noexcept {
#if defined(__i386__) || defined(__x86_64__)
  __builtin_ia32_pause();
#elif defined(_MSC_VER) && (defined(_M_IX86) || defined(_M_X64))
  _mm_pause();
#elif defined(__aarch64__) || defined(__arm__)
  __asm__ __volatile__("yield");
#endif
}

/// A lock for sections of a few dozen instructions: one atomic flag, taken by exchange. A waiter backs off
/// (1, 2, 4 ... 64 pauses between reads of the flag), so that the holder keeps the flag's cache line for
/// a while instead of losing it at every turn, then yields the processor to the holder when it does not
/// let go soon. Meets BasicLockable (for std::lock_guard). Neither recursive nor fair; allocates nothing.
class SpinLock {
 public:
  /// The most pauses between two reads of the flag; the waiter yields the processor once past it.
  static constexpr int most_pauses = 64;

  /// Takes the lock, waiting as long as it is held.
  void lock() noexcept {
    int pauses = 1;
    while (locked_.exchange(true, std::memory_order_acquire)) {
      do {
        if (pauses <= most_pauses) {
          for (int i = 0; i < pauses; ++i) cpu_relax();
          pauses *= 2;
        } else {
          std::this_thread::yield();
        }
      } while (locked_.load(std::memory_order_relaxed));
    }
  }
  /// Lets the lock go. Requires: this thread holds it.
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace detail
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_DETAIL_SPIN_LOCK_HPP
