// A thread that does something at a regular interval until it is stopped.
#ifndef LLMRETRY_TOOLS_COMMON_PERIODIC_THREAD_HPP
#define LLMRETRY_TOOLS_COMMON_PERIODIC_THREAD_HPP

#include <llmretry/clock.hpp>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

namespace llmretry_tools {

/// How a PeriodicThread waits for `deadline` on its clock: it returns when the deadline has come, when
/// `wake` is notified (the thread is stopping), or earlier (the thread waits again). `lock` holds the
/// mutex of `wake` and must hold it again on return. Empty: `wake.wait_until(lock, deadline)`, which
/// goes with the real clock only.
using PeriodicWait = std::function<void(std::condition_variable& wake, std::unique_lock<std::mutex>& lock,
                                        std::chrono::steady_clock::time_point deadline)>;

/// Calls `tick()` on a thread of its own `period` after it starts and then `period` after each tick
/// returns, measured on `clock` (empty: the real clock), until `tick()` returns false or the
/// PeriodicThread is destroyed. The clock, the wait and tick() are called on that thread.
class PeriodicThread {
 public:
  /// Starts the thread. Requires `period` > 0.
  PeriodicThread(std::chrono::milliseconds period, std::function<bool()> tick, llmretry::Clock clock = {},
                 PeriodicWait wait = {})
      : period_(period), tick_(std::move(tick)), clock_(std::move(clock)), wait_(std::move(wait)) {
    thread_ = std::thread([this] { run(); });
  }
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;
  PeriodicThread(PeriodicThread&&) = delete;
  PeriodicThread& operator=(PeriodicThread&&) = delete;
  /// Stops the thread and waits for it (and for a tick in progress).
  ~PeriodicThread() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stopped_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    auto next = llmretry::now_on(clock_) + period_;
    while (!stopped_) {
      if (llmretry::now_on(clock_) < next) {
        if (wait_) {
          wait_(wake_, lock, next);
        } else {
          wake_.wait_until(lock, next);
        }
        continue;
      }
      lock.unlock();
      const bool again = tick_();
      lock.lock();
      if (!again) return;
      next = llmretry::now_on(clock_) + period_;
    }
  }

  const std::chrono::milliseconds period_;
  const std::function<bool()> tick_;
  const llmretry::Clock clock_;
  const PeriodicWait wait_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopped_ = false;
  std::thread thread_;
};

}  // namespace llmretry_tools

#endif  // LLMRETRY_TOOLS_COMMON_PERIODIC_THREAD_HPP
