#ifndef LLMRETRY_REDIS_TESTING_SERVER_HPP
#define LLMRETRY_REDIS_TESTING_SERVER_HPP

/// A throwaway redis-server for tests (target llmretry::redis, POSIX): a free port on 127.0.0.1, a temporary
/// directory, started and stopped by the test, killed and restarted on demand.

#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "../clock.hpp"
#include "../version.hpp"
#include "connection.hpp"

extern char** environ;  // NOLINT(readability-redundant-declaration,*-avoid-non-const-global-variables): POSIX

LLMRETRY_BEGIN_NAMESPACE
namespace testing {

/// How to run the server.
struct RedisServerOptions {
  std::string executable = "redis-server";  ///< looked up in PATH unless it holds a '/'
  /// Persist every write to an append-only file before answering (appendfsync always), so that a server
  /// killed with SIGKILL and restarted loses nothing it acknowledged. Off: nothing is persisted.
  bool append_only = false;
  std::chrono::milliseconds start_timeout{10000};  ///< for the server to answer PING
};

/// A redis-server child process on a free loopback port, with its own temporary directory (data, log),
/// answering PING when the constructor returns. The destructor kills it and removes the directory.
class RedisServer {
 public:
  /// Starts the server. Throws std::runtime_error (with the end of its log) when it does not start.
  explicit RedisServer(RedisServerOptions options = {})
      : options_(std::move(options)), directory_(make_directory()), port_(free_port()) {
    try {
      start();
    } catch (...) {
      std::error_code ignored;
      std::filesystem::remove_all(directory_, ignored);
      throw;
    }
  }
  ~RedisServer() {
    kill();
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
  }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;
  RedisServer(RedisServer&&) = delete;
  RedisServer& operator=(RedisServer&&) = delete;

  /// Returns the port it listens on (on 127.0.0.1).
  [[nodiscard]] int port() const noexcept { return port_; }
  /// Returns the directory holding its data and its log.
  [[nodiscard]] const std::filesystem::path& directory() const noexcept { return directory_; }
  /// Returns connection options that reach it, with `prefix` for the stores' keys.
  [[nodiscard]] redis::Options connection_options(std::string prefix = "llmretry:") const {
    redis::Options options;
    options.port = port_;
    options.prefix = std::move(prefix);
    return options;
  }
  /// Returns true while the server process runs.
  [[nodiscard]] bool running() const noexcept { return pid_ > 0; }

  /// Kills the server with SIGKILL (no shutdown, no save) and waits for it. Does nothing if it is not running.
  void kill() noexcept {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {}
    pid_ = -1;
  }
  /// Starts the server again on the same port and directory (its append-only file, if any, is read back).
  /// Requires !running(). Throws std::runtime_error when it does not start.
  void restart() { start(); }
  /// Stops the process (SIGSTOP): connections stay open but nothing answers, as with a hung server.
  void pause() const noexcept {
    if (pid_ > 0) ::kill(pid_, SIGSTOP);
  }
  /// Resumes a paused process (SIGCONT).
  void resume() const noexcept {
    if (pid_ > 0) ::kill(pid_, SIGCONT);
  }

 private:
  static std::filesystem::path make_directory() {
    std::string path = (std::filesystem::temp_directory_path() / "llmretry-redis-XXXXXX").string();
    if (::mkdtemp(path.data()) == nullptr)
      throw std::runtime_error("RedisServer: cannot create a temporary directory: " +
                               std::string(std::strerror(errno)));
    return path;
  }

  /// A port that was free a moment ago: bound to port 0 by the kernel, then closed.
  static int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) throw std::runtime_error("RedisServer: socket: " + std::string(std::strerror(errno)));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    auto* generic = reinterpret_cast<sockaddr*>(&address);  // NOLINT(*-reinterpret-cast): the sockets API
    const bool bound = ::bind(fd, generic, sizeof address) == 0 && ::getsockname(fd, generic, &length) == 0;
    ::close(fd);
    if (!bound) throw std::runtime_error("RedisServer: no free port: " + std::string(std::strerror(errno)));
    return ntohs(address.sin_port);
  }

  [[nodiscard]] std::string log_tail() const {
    std::ifstream log(directory_ / "redis.log");
    std::vector<std::string> lines;
    for (std::string line; std::getline(log, line);) lines.push_back(line);
    std::string tail;
    for (std::size_t i = lines.size() > 10 ? lines.size() - 10 : 0; i < lines.size(); ++i) tail += "\n  " + lines[i];
    return tail;
  }

  void start() {
    const std::string port = std::to_string(port_);
    const std::string dir = directory_.string();
    const std::string log = (directory_ / "redis.log").string();
    std::vector<std::string> args = {options_.executable,
                                     "--port",
                                     port,
                                     "--bind",
                                     "127.0.0.1",
                                     "--dir",
                                     dir,
                                     "--logfile",
                                     log,
                                     "--save",
                                     "",
                                     "--daemonize",
                                     "no",
                                     "--appendonly",
                                     options_.append_only ? "yes" : "no",
                                     "--appendfsync",
                                     "always"};
    std::vector<char*> argv;
    argv.reserve(args.size() + 1);
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    // Its standard streams go to /dev/null (it logs to its file): it never holds the caller's pipes open.
    posix_spawn_file_actions_t streams;
    ::posix_spawn_file_actions_init(&streams);
    for (const int fd : {0, 1, 2})
      ::posix_spawn_file_actions_addopen(&streams, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0);
    const int spawned = ::posix_spawnp(&pid_, argv[0], &streams, nullptr, argv.data(), environ);
    ::posix_spawn_file_actions_destroy(&streams);
    if (spawned != 0) {
      pid_ = -1;
      throw std::runtime_error("RedisServer: cannot start " + options_.executable + ": " + std::strerror(spawned) +
                               " (Debian: apt-get install redis-server)");
    }
    const auto deadline = real_now() + options_.start_timeout;
    redis::Options options = connection_options();
    options.connect_timeout = options.command_timeout = std::chrono::milliseconds(500);
    while (true) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("RedisServer: " + options_.executable + " on port " + port + " exited:" + log_tail());
      }
      try {
        redis::Connection connection(options);
        if (connection.command("ping", {"PING"}).text() == "PONG") return;
      } catch (const redis::RedisError&) {
        // not listening yet (or still loading its append-only file)
      }
      if (real_now() > deadline) {
        kill();
        throw std::runtime_error("RedisServer: no PONG from port " + port + " in time:" + log_tail());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  RedisServerOptions options_;
  std::filesystem::path directory_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace testing
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_REDIS_TESTING_SERVER_HPP
