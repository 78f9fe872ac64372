// What the end-to-end tests of llmretry-relay share: the relay as a child process, requests over HTTP and
// over raw sockets, a loopback provider that answers freely.
#ifndef LLMRETRY_RELAY_TEST_SUPPORT_HPP
#define LLMRETRY_RELAY_TEST_SUPPORT_HPP

#include <llmretry/loopback/provider.hpp>
#if LLMRETRY_RELAY_REDIS
#include <llmretry/redis/testing_server.hpp>
#endif

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <child_process.hpp>
#include <llmretry_catch.hpp>
#include <test_time.hpp>

namespace relay_test {

using namespace std::chrono_literals;
using llmretry::testing::LoopbackProvider;
using llmretry::testing::ScriptedResponse;

/// The upstream key the relay is given: it must never come out of the relay.
inline constexpr const char* upstream_key = "sk-upstream-secret-7f3a9c";

/// A fresh directory for one relay's output files, of this process only.
inline std::filesystem::path work_dir(const std::string& name) {
  const std::filesystem::path dir =
      std::filesystem::path(LLMRETRY_RELAY_WORK_DIR) / ("test_work_" + std::to_string(::getpid())) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

/// llmretry-relay as a child process: started with `arguments` and OPENAI_API_KEY set to upstream_key (and
/// `environment` added), its stdout and stderr in files. Once it prints its address, port() is set.
class Relay : public llmretry_test::ChildProcess {
 public:
  Relay(const std::string& name, const std::vector<std::string>& arguments,
        const std::vector<std::string>& environment = {})
      : ChildProcess(LLMRETRY_RELAY_PROGRAM, arguments, work_dir(name), {"OPENAI_", "ANTHROPIC_", "LLMRETRY_RELAY_"},
                     with_upstream_key(environment)) {}

  /// Waits until the relay prints "listening on http://127.0.0.1:PORT" (at most 10 s, scaled). Returns *this.
  Relay& started() {
    constexpr std::string_view prefix = "listening on http://";
    const auto give_up = std::chrono::steady_clock::now() + llmretry_test::scaled(10s);
    while (std::chrono::steady_clock::now() < give_up) {
      const std::string text = out();
      const auto at = text.find(prefix);
      if (at != std::string::npos && text.find('\n', at) != std::string::npos) {
        const auto colon = text.rfind(':', text.find('\n', at));
        port_ = std::stoi(text.substr(colon + 1));
        return *this;
      }
      if (ended()) FAIL("the relay exited at start-up: " << err());
      std::this_thread::sleep_for(5ms);
    }
    FAIL("the relay did not start: " << err());
    return *this;
  }

  /// Sends SIGTERM and waits for the relay to end. Returns its status as ChildProcess::wait does.
  int stop() { return wait(SIGTERM); }

  int port() const { return port_; }
  httplib::Client client() const {
    httplib::Client client("127.0.0.1", port_);
    client.set_read_timeout(llmretry_test::scaled(30s));
    client.set_tcp_nodelay(true);  // headers and body leave at once, never held back for an ACK
    return client;
  }

 private:
  static std::vector<std::string> with_upstream_key(std::vector<std::string> environment) {
    environment.insert(environment.begin(), std::string("OPENAI_API_KEY=") + upstream_key);
    return environment;
  }

  int port_ = 0;
};

/// Returns a chat completion request body for `model`.
inline std::string chat(const std::string& model = "loopback", const std::string& content = "Hello") {
  return nlohmann::json{{"model", model}, {"max_tokens", 10}, {"messages", {{{"role", "user"}, {"content", content}}}}}
      .dump();
}

/// POSTs `body` to `path` of `relay` with `headers`. Returns the response (REQUIREd to have arrived).
inline httplib::Result post(const Relay& relay, const std::string& path, const std::string& body,
                            const httplib::Headers& headers = {}) {
  auto result = relay.client().Post(path.c_str(), headers, body, "application/json");
  REQUIRE(result);
  return result;
}

/// Returns the "error" object of an OpenAI-style error body.
inline nlohmann::json error_of(const std::string& body) {
  const auto parsed = nlohmann::json::parse(body, nullptr, false);
  REQUIRE(parsed.is_object());
  REQUIRE(parsed.contains("error"));
  return parsed.at("error");
}

/// Returns the start of a request to `path`, its header lines `fields` (each ending in CRLF) and the blank
/// line.
inline std::string head(const std::string& fields, const std::string& method = "POST",
                        const std::string& path = "/v1/chat/completions") {
  return method + " " + path + " HTTP/1.1\r\nHost: relay\r\n" + fields + "\r\n";
}

/// Returns a whole POST of `body` to `path` with `fields` (each ending in CRLF), as a client sends it.
inline std::string post_text(const std::string& body, const std::string& fields = {},
                             const std::string& path = "/v1/chat/completions") {
  return head(fields + "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n",
              "POST", path) +
         body;
}

/// Waits until the relay's /metrics holds `line` (at most 10 s, scaled). Returns true when it did.
inline bool metrics_hold(const Relay& relay, const std::string& line) {
  const auto give_up = std::chrono::steady_clock::now() + llmretry_test::scaled(10s);
  do {
    const auto metrics = relay.client().Get("/metrics");
    if (metrics && metrics->body.find(line) != std::string::npos) return true;
    std::this_thread::sleep_for(10ms);
  } while (std::chrono::steady_clock::now() < give_up);
  return false;
}

/// Waits until `provider` received `count` requests (REQUIREd within 10 s, scaled).
inline void await_requests(const LoopbackProvider& provider, std::size_t count) {
  const auto give_up = std::chrono::steady_clock::now() + llmretry_test::scaled(10s);
  while (provider.request_count() < count && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(1ms);
  REQUIRE(provider.request_count() >= count);
}

/// Returns a new connection to 127.0.0.1:`port` (close it).
inline int connect_raw(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  return fd;
}

/// Sends `bytes` on a new connection to 127.0.0.1:`port`. Returns the socket (close it).
inline int send_raw(int port, const std::string& bytes) {
  const int fd = connect_raw(port);
  REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()));
  return fd;
}

/// Returns what the server answers on `fd` until it closes the connection or 5 s (scaled) pass.
inline std::string read_raw(int fd) {
  timeval timeout{llmretry_test::scaled(5s).count(), 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  std::string answer;
  char buffer[4096];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) answer.append(buffer, static_cast<std::size_t>(n));
  return answer;
}

/// A provider that answers every request itself (a chat completion with its usage), with generous limits.
inline void serve_freely(LoopbackProvider& provider, std::chrono::milliseconds latency = 0ms) {
  llmretry::testing::LoopbackLimits limits;
  limits.requests_per_minute = 600'000;
  limits.tokens_per_minute = 100'000'000;
  limits.latency = latency;
  provider.enforce(limits);
}

}  // namespace relay_test

#endif  // LLMRETRY_RELAY_TEST_SUPPORT_HPP
