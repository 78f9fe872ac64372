#ifndef LLMRETRY_TESTS_CHILD_PROCESS_HPP
#define LLMRETRY_TESTS_CHILD_PROCESS_HPP

// A program under test run as a child process (POSIX), for the end-to-end tests of the tools.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <llmretry_catch.hpp>

extern char** environ;

namespace llmretry_test {

/// Returns the whole content of the file at `path` (empty when it cannot be read).
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// A child process: `program` run with `arguments`, in this process's environment without the variables
/// whose names start with one of `removed_prefixes`, plus `added` ("NAME=value" each); its stdout and stderr
/// go to stdout.txt and stderr.txt in `dir`. Killed with SIGKILL when destroyed while it runs.
class ChildProcess {
 public:
  /// Starts it. REQUIREs that it started.
  ChildProcess(const std::string& program, const std::vector<std::string>& arguments, std::filesystem::path dir,
               const std::vector<std::string_view>& removed_prefixes = {}, const std::vector<std::string>& added = {})
      : dir_(std::move(dir)) {
    std::vector<std::string> variables;
    for (char** variable = environ; *variable != nullptr; ++variable) {
      const std::string text = *variable;
      bool removed = false;
      for (const auto prefix : removed_prefixes) removed = removed || text.rfind(prefix, 0) == 0;
      if (!removed) variables.push_back(text);
    }
    variables.insert(variables.end(), added.begin(), added.end());
    std::vector<std::string> args{program};
    args.insert(args.end(), arguments.begin(), arguments.end());
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (auto& variable : variables) envp.push_back(variable.data());
    envp.push_back(nullptr);
    const std::string out_path = (dir_ / "stdout.txt").string();
    const std::string err_path = (dir_ / "stderr.txt").string();
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int error = posix_spawn(&pid_, program.c_str(), &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    REQUIRE(error == 0);
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ChildProcess(ChildProcess&&) = delete;
  ChildProcess& operator=(ChildProcess&&) = delete;
  ~ChildProcess() {
    if (pid_ == 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }

  /// Sends `signal` without waiting. REQUIREs that it was running.
  void signal(int signal) {
    REQUIRE(pid_ != 0);
    ::kill(pid_, signal);
  }

  /// Sends `signal` (none when 0), then waits for it to end. Returns its status as a shell reports it: the
  /// exit status, or 128 + the number of the signal that ended it (ended_by_signal() tells which). REQUIREs
  /// that it was running.
  int wait(int signal = 0) {
    REQUIRE(pid_ != 0);
    if (signal != 0) ::kill(pid_, signal);
    int status = 0;
    struct rusage usage {};
    REQUIRE(wait4(pid_, &status, 0, &usage) == pid_);
    max_rss_kib_ = usage.ru_maxrss;
    return record_end(status);
  }
  /// Returns the most memory it held at once (its peak resident set, KiB), once wait() returned.
  long max_rss_kib() const noexcept { return max_rss_kib_; }
  /// Returns true when a signal ended it, once wait() or wait_for() returned (128 + its number).
  bool ended_by_signal() const noexcept { return ended_by_signal_; }
  /// Returns true once it has ended (then wait() may no longer be called).
  bool ended() {
    if (pid_ == 0) return true;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
    (void)record_end(status);
    return true;
  }
  /// Waits at most `timeout` for it to end. Returns its status as wait() does, or nullopt when it still runs.
  /// REQUIREs that it was running.
  std::optional<int> wait_for(std::chrono::milliseconds timeout) {
    REQUIRE(pid_ != 0);
    for (const auto end = std::chrono::steady_clock::now() + timeout;;) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) return record_end(status);
      if (std::chrono::steady_clock::now() >= end) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds{10});
    }
  }

  /// Returns what it wrote to stdout so far.
  std::string out() const { return read_file(dir_ / "stdout.txt"); }
  /// Returns what it wrote to stderr so far.
  std::string err() const { return read_file(dir_ / "stderr.txt"); }

 private:
  /// Records that it ended with `status` (from waitpid). Returns its status as a shell reports it.
  int record_end(int status) noexcept {
    pid_ = 0;
    ended_by_signal_ = WIFSIGNALED(status);
    return ended_by_signal_ ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  }

  std::filesystem::path dir_;
  pid_t pid_ = 0;
  long max_rss_kib_ = 0;
  bool ended_by_signal_ = false;
};

}  // namespace llmretry_test

#endif  // LLMRETRY_TESTS_CHILD_PROCESS_HPP
