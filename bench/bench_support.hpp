// What the benchmarks that start programs share: percentiles, a response body dropped, and a child process
// in a process group of its own (its address read from its first line, or its exit status waited for), its
// group ended when it is destroyed. POSIX.
#ifndef LLMRETRY_BENCH_SUPPORT_HPP
#define LLMRETRY_BENCH_SUPPORT_HPP

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

extern char** environ;  // NOLINT(readability-redundant-declaration,*-avoid-non-const-global-variables): POSIX

namespace bench {

/// A directory of its own under the system's temporary directory (mkdtemp), named after `prefix`, removed with
/// what it holds by the destructor.
class TemporaryDirectory {
 public:
  /// Creates it. Throws std::runtime_error when it cannot.
  explicit TemporaryDirectory(const std::string& prefix) {
    std::string path = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (::mkdtemp(path.data()) == nullptr)
      throw std::runtime_error("cannot create a temporary directory: " + std::string(std::strerror(errno)));
    path_ = path;
  }
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;
  TemporaryDirectory(TemporaryDirectory&&) = delete;
  TemporaryDirectory& operator=(TemporaryDirectory&&) = delete;
  ~TemporaryDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }

  /// Returns its path.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

/// Returns the `p`th percentile (nearest rank) of the sorted `values`, or 0 when there are none.
inline double percentile(const std::vector<double>& values, double p) {
  if (values.empty()) return 0;
  const auto rank = static_cast<std::size_t>(std::ceil(p / 100 * static_cast<double>(values.size())));
  return values[std::min(values.size() - 1, rank == 0 ? 0 : rank - 1)];
}

/// A libcurl write callback that drops what it is given. Returns its size, so that the transfer goes on.
inline std::size_t discard(char* /*data*/, std::size_t size, std::size_t count, void* /*user*/) { return size * count; }

/// How a Child is started.
struct ChildOptions {
  /// "NAME=value" variables set in the child, each replacing the variable of that name of this process.
  std::vector<std::string> environment{"OPENAI_API_KEY=sk-loopback"};
  /// Its standard error goes where its standard output goes (kept: see Child::output) instead of to this
  /// process's standard error.
  bool capture_errors = false;
  /// Read its address from the first line it prints ("listening on http://HOST:PORT", or https://) within this long;
  /// empty: it prints none (wait for its exit instead).
  std::optional<std::chrono::milliseconds> address_within;
  std::string directory;  ///< its working directory; empty: this process's
};

/// A program run as a child process in a process group of its own, with ChildOptions. The destructor ends
/// the group (SIGTERM, then SIGKILL after 2 s) unless the child has exited, and waits for it; on Linux the
/// child is also killed if this process dies first. What it prints on its standard output is read (and kept
/// up to 64 KiB) by a thread of its own, so that a full pipe never blocks it. Not thread-safe.
class Child {
 public:
  /// Starts `program` with `arguments`, called `name` in messages ("relay", "batch worker 2"). Throws
  /// std::runtime_error when it cannot start or, with ChildOptions::address_within, when it does not print
  /// "listening on http://HOST:PORT" in time (naming it and what it printed).
  Child(std::string name, const std::string& program, const std::vector<std::string>& arguments,
        const ChildOptions& options)
      : name_(std::move(name)) {
    std::vector<std::string> words{program};
    words.insert(words.end(), arguments.begin(), arguments.end());
    std::vector<char*> argv;
    for (std::string& word : words) argv.push_back(word.data());
    argv.push_back(nullptr);
    std::vector<std::string> variables = options.environment;
    for (char** variable = environ; *variable != nullptr; ++variable) {
      const char* equals = std::strchr(*variable, '=');
      const std::size_t length =
          equals == nullptr ? std::strlen(*variable) : static_cast<std::size_t>(equals - *variable);
      const bool replaced =
          std::any_of(options.environment.begin(), options.environment.end(), [&](const std::string& set) {
            return set.size() > length && set[length] == '=' && set.compare(0, length, *variable, length) == 0;
          });
      if (!replaced) variables.emplace_back(*variable);
    }
    std::vector<char*> envp;
    for (std::string& variable : variables) envp.push_back(variable.data());
    envp.push_back(nullptr);
    const std::string cannot_run = name_ + ": cannot run " + program + "\n";  // written by the child if exec fails
    const char* directory = options.directory.empty() ? nullptr : options.directory.c_str();

    int out[2];
    if (::pipe(out) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    pid_ = ::fork();
    if (pid_ < 0) {
      const int error = errno;
      ::close(out[0]);
      ::close(out[1]);
      throw std::runtime_error("the " + name_ + " could not start: fork: " + std::strerror(error));
    }
    if (pid_ == 0) {  // the child: only async-signal-safe calls until exec
      ::setpgid(0, 0);
#if defined(__linux__)
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
      ::dup2(out[1], STDOUT_FILENO);
      if (options.capture_errors) ::dup2(out[1], STDERR_FILENO);
      ::close(out[0]);
      ::close(out[1]);
      if (directory == nullptr || ::chdir(directory) == 0) ::execve(argv[0], argv.data(), envp.data());
      const ssize_t written = ::write(STDERR_FILENO, cannot_run.data(), cannot_run.size());
      static_cast<void>(written);
      ::_exit(127);
    }
    ::setpgid(pid_, pid_);  // also here: whichever runs first, the group exists before it is signalled
    ::close(out[1]);
    output_ = out[0];
    try {
      if (options.address_within) base_url_ = read_address(*options.address_within);
    } catch (...) {
      stop();
      throw;
    }
    drain_ = std::thread([this] {
      char buffer[4096];
      for (ssize_t got = 0; (got = ::read(output_, buffer, sizeof buffer)) > 0;) {
        const std::lock_guard<std::mutex> lock(mutex_);
        kept_.append(buffer, static_cast<std::size_t>(got));
        if (kept_.size() > kept_limit) kept_.erase(0, kept_.size() - kept_limit);
      }
    });
  }

  /// Starts `program` as the relay_stress benchmark starts its servers: OPENAI_API_KEY=sk-loopback, its
  /// standard error this process's, its address read within `startup`. Throws as the constructor above.
  Child(std::string name, const std::string& program, const std::vector<std::string>& arguments,
        std::chrono::milliseconds startup)
      : Child(std::move(name), program, arguments, with_address(startup)) {}

  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  Child(Child&&) = delete;
  Child& operator=(Child&&) = delete;
  ~Child() { stop(); }

  /// Returns the name it was given.
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  /// Returns the address it printed, such as "http://127.0.0.1:41234" (empty without
  /// ChildOptions::address_within).
  [[nodiscard]] const std::string& base_url() const noexcept { return base_url_; }
  /// Returns its process id.
  [[nodiscard]] pid_t pid() const noexcept { return pid_; }

  /// Returns its exit status if it has exited (128 + the signal when a signal ended it), else nullopt at once.
  std::optional<int> poll_exit() {
    if (status_) return status_;
    if (pid_ <= 0) return std::nullopt;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) != pid_) return std::nullopt;
    reaped(status);
    return status_;
  }

  /// Waits up to `timeout` for it to exit. Returns its exit status (see poll_exit), or nullopt when it still
  /// runs.
  std::optional<int> wait_for(std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (!poll_exit() && pid_ > 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return poll_exit();
  }

  /// Returns what it printed (the last 64 KiB): all of it once it has exited, else what was read so far.
  [[nodiscard]] std::string output() {
    if (status_ && drain_.joinable()) drain_.join();  // the rest of its output is read: the pipe ends
    const std::lock_guard<std::mutex> lock(mutex_);
    return kept_;
  }

 private:
  static constexpr std::size_t kept_limit = 64 * 1024;

  static ChildOptions with_address(std::chrono::milliseconds startup) {
    ChildOptions options;
    options.address_within = startup;
    return options;
  }

  /// Reads the first line of the child's output. Returns the address in it.
  std::string read_address(std::chrono::milliseconds startup) const {
    const std::string prefix = "listening on ";
    std::string line;
    const auto until = std::chrono::steady_clock::now() + startup;
    char c = 0;
    while (line.size() < 1024) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      pollfd ready{output_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&ready, 1, static_cast<int>(left.count())) <= 0)
        throw std::runtime_error("the " + name_ + " printed no address within " + std::to_string(startup.count()) +
                                 " ms");
      if (::read(output_, &c, 1) != 1)
        throw std::runtime_error("the " + name_ + " ended before it printed its address" +
                                 (line.empty() ? std::string() : " (it printed \"" + line + "\")"));
      if (c == '\n') break;
      line += c;
    }
    if (line.rfind(prefix + "http://", 0) != 0 && line.rfind(prefix + "https://", 0) != 0)
      throw std::runtime_error("the " + name_ + " printed \"" + line + "\", not \"listening on http://HOST:PORT\"");
    return line.substr(prefix.size());
  }

  void reaped(int status) noexcept {
    status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    ::kill(-pid_, SIGKILL);  // whatever else is left in its group (the group outlives its leader's exit)
    pid_ = -1;
  }

  /// Ends the child's group unless the child has exited: SIGTERM, SIGKILL after 2 s, and waits for it.
  void stop() noexcept {
    if (pid_ > 0 && !poll_exit()) {
      const pid_t group = pid_;
      ::kill(-group, SIGTERM);
      int status = 0;
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      pid_t waited = 0;
      while ((waited = ::waitpid(group, &status, WNOHANG)) == 0) {
        if (std::chrono::steady_clock::now() >= until) {
          ::kill(-group, SIGKILL);
          waited = ::waitpid(group, &status, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (waited == group) {
        reaped(status);
      } else {
        ::kill(-group, SIGKILL);
        pid_ = -1;
      }
    }
    if (drain_.joinable()) drain_.join();  // the pipe's writers are gone: the read ends
    if (output_ >= 0) ::close(output_);
    output_ = -1;
  }

  std::string name_;
  pid_t pid_ = -1;
  std::optional<int> status_;
  int output_ = -1;
  std::string base_url_;
  mutable std::mutex mutex_;
  std::string kept_;
  std::thread drain_;
};

}  // namespace bench

#endif  // LLMRETRY_BENCH_SUPPORT_HPP
