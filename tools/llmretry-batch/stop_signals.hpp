// SIGINT and SIGTERM as a request to stop: the run sends nothing more, the requests in flight finish and are
// written, then the process ends by that signal; a second signal ends it at once.
#ifndef LLMRETRY_BATCH_STOP_SIGNALS_HPP
#define LLMRETRY_BATCH_STOP_SIGNALS_HPP

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <stdexcept>
#include <string>
#include <thread>

namespace batch {

/// Ends the process by `signal` (SIGINT or SIGTERM), as its default action does, so that the parent sees
/// what stopped it (a shell reports status 128 + its number; after a Ctrl-C it also stops the script or loop
/// it runs). Nothing is flushed: call it once everything is written.
[[noreturn]] inline void end_by(int signal) noexcept {
  std::signal(signal, SIG_DFL);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, signal);
  pthread_sigmask(SIG_UNBLOCK, &only, nullptr);
  std::raise(signal);
  std::_Exit(128 + signal);  // not reached: the default action of both ends the process
}

/// Watches SIGINT and SIGTERM on a thread of its own while it lives; a signal the process ignores (a command
/// started in the background by a shell ignores SIGINT) stays ignored. Make it before any other thread starts:
/// the signals are blocked in the thread that makes it, and threads inherit that. The first signal sets
/// requested() and writes `first_words` to stderr; a second one ends the process at once by that signal
/// (end_by): what is written stays valid, as after SIGKILL. When it goes, the signals are unblocked again
/// (one that came after the watch ended then acts as it would have).
class StopSignals {
 public:
  /// Throws std::runtime_error when the signals cannot be blocked or the thread cannot start.
  explicit StopSignals(std::string first_words) : first_words_(std::move(first_words)) {
    sigemptyset(&signals_);
    for (const int watched : {SIGINT, SIGTERM}) {
      struct sigaction action {};
      if (sigaction(watched, nullptr, &action) == 0 && action.sa_handler != SIG_IGN) sigaddset(&signals_, watched);
    }
    if (pthread_sigmask(SIG_BLOCK, &signals_, &before_) != 0) throw std::runtime_error("cannot block SIGINT, SIGTERM");
    try {
      watcher_ = std::thread([this] { watch(); });
    } catch (...) {
      pthread_sigmask(SIG_SETMASK, &before_, nullptr);
      throw;
    }
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  StopSignals(StopSignals&&) = delete;
  StopSignals& operator=(StopSignals&&) = delete;
  ~StopSignals() {
    over_ = true;
    watcher_.join();
    pthread_sigmask(SIG_SETMASK, &before_, nullptr);
  }

  /// Returns the flag the first signal sets.
  [[nodiscard]] const std::atomic<bool>& requested() const noexcept { return requested_; }
  /// Returns the first signal's number, 0 before it came.
  [[nodiscard]] int signal() const noexcept { return signal_; }

 private:
  /// Waits for the signals in slices of 100 ms, so that the destructor's over_ is seen.
  void watch() {
    const timespec slice{0, 100'000'000};
    while (!over_) {
      const int caught = sigtimedwait(&signals_, nullptr, &slice);
      if (caught <= 0) continue;  // the slice passed, or EINTR
      if (requested_) end_by(caught);
      signal_ = caught;
      requested_ = true;
      (void)!::write(STDERR_FILENO, first_words_.data(), first_words_.size());
    }
  }

  std::string first_words_;
  sigset_t signals_{};
  sigset_t before_{};
  std::atomic<bool> requested_{false};
  std::atomic<int> signal_{0};
  std::atomic<bool> over_{false};
  std::thread watcher_;  ///< last: it starts once everything it reads is made
};

}  // namespace batch

#endif  // LLMRETRY_BATCH_STOP_SIGNALS_HPP
