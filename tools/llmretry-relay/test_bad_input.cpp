// What an attacker or a broken client sends llmretry-relay: bodies past the limit whatever their framing,
// header floods, slow senders, pipelined requests, conflicting framing, control characters, thousands of
// idle connections, SIGTERM with stalled clients. Each is refused or cut with memory bounded, and the relay
// serves the others meanwhile and after.
#include "config.hpp"
#include "test_support.hpp"

using namespace relay_test;

namespace {

/// Whether this build runs under AddressSanitizer or ThreadSanitizer, whose shadow memory and quarantine make a
/// process's RSS say nothing of what it keeps.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool sanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool sanitized = true;
#else
constexpr bool sanitized = false;
#endif
#else
constexpr bool sanitized = false;
#endif

/// Returns the statuses of the answers in `raw`, in order ("HTTP/1.1 " and three digits).
std::vector<int> statuses(const std::string& raw) {
  std::vector<int> found;
  const auto digit = [&](std::size_t at) { return at < raw.size() && raw[at] >= '0' && raw[at] <= '9'; };
  for (auto at = raw.find("HTTP/1.1 "); at != std::string::npos; at = raw.find("HTTP/1.1 ", at + 1))
    if (digit(at + 9) && digit(at + 10) && digit(at + 11)) found.push_back(std::stoi(raw.substr(at + 9, 3)));
  return found;
}

/// Returns what the server sends on `fd` until `end` arrived (included), the connection closed, or 5 s
/// (scaled) passed.
std::string read_until(int fd, const std::string& end) {
  timeval timeout{llmretry_test::scaled(5s).count(), 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  std::string answer;
  char buffer[4096];
  while (answer.find(end) == std::string::npos) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    answer.append(buffer, static_cast<std::size_t>(n));
  }
  return answer;
}

/// Returns the status of the first answer to `request`, sent on a connection of its own (0: none came).
int status_of(const Relay& relay, const std::string& request) {
  const int fd = send_raw(relay.port(), request);
  const std::string answer = read_until(fd, "\r\n\r\n");  // its status line and header
  ::close(fd);
  const auto found = statuses(answer);
  return found.empty() ? 0 : found.front();
}

/// Returns the value of the series `series` (name and labels) in the relay's /metrics.
long metric(const Relay& relay, const std::string& series) {
  const auto page = relay.client().Get("/metrics");
  REQUIRE(page);
  const auto at = page->body.find("\n" + series + " ");
  REQUIRE(at != std::string::npos);
  return std::stol(page->body.substr(at + series.size() + 2));
}

/// Sends `bytes` on `fd` in pieces until all went or the relay stopped reading (closed or reset).
void send_until_refused(int fd, const std::string& bytes) {
  for (std::size_t sent = 0; sent < bytes.size();) {
    const ssize_t n = ::send(fd, bytes.data() + sent, std::min<std::size_t>(bytes.size() - sent, 65536), MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += static_cast<std::size_t>(n);
  }
}

/// An upstream on 127.0.0.1 that answers every request with `answer`, byte for byte: what an HTTP library would
/// refuse to send, such as a control character in a header value.
class RawUpstream {
 public:
  explicit RawUpstream(std::string answer) : answer_(std::move(answer)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(listener_ >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof address;
    REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&address), size) == 0);
    REQUIRE(::listen(listener_, 16) == 0);
    REQUIRE(::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &size) == 0);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  RawUpstream(const RawUpstream&) = delete;
  RawUpstream& operator=(const RawUpstream&) = delete;
  ~RawUpstream() {
    ::shutdown(listener_, SHUT_RDWR);  // accept() returns
    thread_.join();
    ::close(listener_);
  }
  [[nodiscard]] std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/v1"; }

 private:
  void serve() {
    for (int fd; (fd = ::accept(listener_, nullptr, nullptr)) >= 0; ::close(fd)) {
      std::string request = read_until(fd, "\r\n\r\n");
      const auto length_at = request.find("Content-Length: ");
      const std::size_t head_end = request.find("\r\n\r\n");
      if (length_at != std::string::npos && head_end != std::string::npos) {
        const std::size_t whole = head_end + 4 + std::stoul(request.substr(length_at + 16));
        char buffer[4096];
        for (ssize_t got; request.size() < whole && (got = ::recv(fd, buffer, sizeof buffer, 0)) > 0;)
          request.append(buffer, static_cast<std::size_t>(got));
      }
      (void)::send(fd, answer_.data(), answer_.size(), MSG_NOSIGNAL);
    }
  }

  std::string answer_;
  int listener_ = -1;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace

TEST_CASE("request bodies past --max-body are answered 413 at once, whatever their framing; encoded ones 415") {
  LoopbackProvider provider;
  serve_freely(provider);
  // A minute to send a request: an answer that came only at the deadline would not come within read_raw's 5 s.
  Relay relay("body_limits", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url(), "--max-body", "4096",
                              "--request-timeout", "60s"});
  relay.started();

  CHECK(status_of(relay, head("Content-Type: application/json\r\nContent-Length: 99999999999\r\n")) == 413);
  CHECK(status_of(relay, head("Content-Length: -1\r\n")) == 400);
  CHECK(status_of(relay, head("Content-Length: 1x\r\n")) == 400);
  // A chunked body: refused as soon as it passes 4096 bytes, the rest never read.
  std::string chunked = head("Transfer-Encoding: chunked\r\n");
  for (int i = 0; i < 3; ++i) chunked += "800\r\n" + std::string(0x800, 'a') + "\r\n";
  CHECK(status_of(relay, chunked) == 413);
  // A 64 MiB chunked body, sent as fast as the relay takes it: it takes 4 KiB and a little more.
  {
    const int fd = send_raw(relay.port(), head("Transfer-Encoding: chunked\r\n"));
    std::string body;
    for (int i = 0; i < 1024; ++i) body += "10000\r\n" + std::string(0x10000, 'b') + "\r\n";
    send_until_refused(fd, body);
    CHECK(statuses(read_raw(fd)) == std::vector<int>{413});
    ::close(fd);
  }
  // A compressed body is refused before a byte of it is read: it could inflate to anything.
  CHECK(status_of(relay, head("Content-Encoding: gzip\r\nContent-Length: 1000\r\n")) == 415);
  CHECK(status_of(relay, head("Content-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n")) == 415);
  CHECK(status_of(relay, head("Content-Encoding: identity\r\nContent-Length: 2\r\n") + "{}") == 400);  // read: no model

  CHECK(provider.request_count() == 0);
  CHECK(post(relay, "/v1/chat/completions", chat())->status == 200);
  CHECK(relay.stop() == 0);
}

TEST_CASE("header floods are answered 431 before the client key is checked, and memory stays bounded") {
  LoopbackProvider provider;
  serve_freely(provider);
  Relay relay("header_flood", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url()},
              {"LLMRETRY_RELAY_CLIENT_KEY=client-key"});
  relay.started();
  // 8 clients at once, each sending 16 MB of short header lines (each far below any line limit).
  std::string flood = head("");
  flood.resize(flood.size() - 2);  // without the blank line: the header never ends
  for (int i = 0; i < 2'000'000; ++i) flood += "X-A: b\r\n";
  std::vector<std::string> answers(8);
  std::vector<std::thread> clients;
  for (auto& answer : answers)
    clients.emplace_back([&] {
      const int fd = connect_raw(relay.port());
      send_until_refused(fd, flood);
      answer = read_raw(fd);
      ::close(fd);
    });
  for (auto& client : clients) client.join();
  for (const auto& answer : answers) CHECK(statuses(answer) == std::vector<int>{431});
  // Few lines, but more of them than the relay accepts.
  std::string many;
  for (int i = 0; i < 200; ++i) many += "X-" + std::to_string(i) + ": b\r\n";
  CHECK(status_of(relay, head(many + "Content-Length: 0\r\n")) == 431);

  CHECK(relay.client().Get("/healthz")->status == 200);
  const auto unauthorized = post(relay, "/v1/chat/completions", chat());
  CHECK(unauthorized->status == 401);
  CHECK(post(relay, "/v1/chat/completions", chat(), {{"Authorization", "Bearer client-key"}})->status == 200);
  CHECK(relay.stop() == 0);
  if (!sanitized) CHECK(relay.max_rss_kib() < 100 * 1024);  // the floods cost 128 MB to send: none was kept
}

TEST_CASE("slow senders are cut after --request-timeout, and the others are served meanwhile") {
  LoopbackProvider provider;
  serve_freely(provider);
  Relay relay("slow_senders", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url(), "--threads", "1",
                               "--request-timeout", "500ms"});
  relay.started();
  // 200 connections that send half a request header and stall, 50 that send nothing; one that sends a byte
  // every 100 ms.
  std::vector<int> stalled;
  for (int i = 0; i < 200; ++i) stalled.push_back(send_raw(relay.port(), "POST /v1/chat/completions HTTP/1.1\r\nHo"));
  for (int i = 0; i < 50; ++i) stalled.push_back(connect_raw(relay.port()));
  const std::string request = head("Content-Length: 2\r\n") + "{}";
  const int trickling = connect_raw(relay.port());
  std::atomic<bool> cut{false};
  std::thread trickle([&] {
    for (const char c : request) {
      if (::send(trickling, &c, 1, MSG_NOSIGNAL) != 1) {
        cut = true;
        return;
      }
      std::this_thread::sleep_for(100ms);
    }
  });
  // Meanwhile, a client that sends its request at once is served, and so is /healthz.
  CHECK(post(relay, "/v1/chat/completions", chat())->status == 200);
  CHECK(relay.client().Get("/healthz")->status == 200);
  for (const int fd : stalled) {
    CHECK(read_raw(fd).empty());  // closed without an answer
    ::close(fd);
  }
  trickle.join();
  CHECK(cut);
  ::close(trickling);
  CHECK(metric(relay, "llm_relay_clients_cut_total{reason=\"slow_request\"}") >= 251);
  CHECK(provider.request_count() == 1);
  CHECK(relay.stop() == 0);
}

TEST_CASE("SIGTERM with stalled and idle clients: the request in flight is answered, the relay exits at once") {
  LoopbackProvider provider;
  serve_freely(provider, 300ms);
  Relay relay("sigterm_stalled", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url()});
  relay.started();
  std::vector<int> connections;
  for (int i = 0; i < 50; ++i) connections.push_back(send_raw(relay.port(), "POST /v1/chat/completions HTTP/1.1\r\n"));
  for (int i = 0; i < 50; ++i) connections.push_back(connect_raw(relay.port()));  // idle
  int status = 0;
  std::thread client([&] {
    auto result = relay.client().Post("/v1/chat/completions", chat(), "application/json");
    status = result ? result->status : -1;
  });
  while (provider.request_count() == 0) std::this_thread::sleep_for(1ms);
  relay.signal(SIGTERM);
  // The default grace period is 30 s: the relay does not wait for clients that send nothing.
  CHECK(relay.wait_for(llmretry_test::scaled(10s)) == std::optional<int>(0));
  client.join();
  CHECK(status == 200);
  for (const int fd : connections) ::close(fd);
}

TEST_CASE("pipelined requests are all answered, in order, on their connection") {
  LoopbackProvider provider;
  serve_freely(provider);
  Relay relay("pipelining", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url()});
  relay.started();
  const std::string body = chat();
  const std::string post_chat =
      head("Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n") + body;
  const std::string requests = post_chat + head("", "GET", "/healthz") + post_chat + head("", "GET", "/nowhere") +
                               post_chat + head("Connection: close\r\n", "GET", "/healthz");
  const int fd = send_raw(relay.port(), requests);
  const std::string answers = read_raw(fd);
  ::close(fd);
  CHECK(statuses(answers) == std::vector<int>{200, 200, 200, 404, 200, 200});
  CHECK(provider.request_count() == 3);
}

TEST_CASE("conflicting framing and control characters are answered 400, and nothing reaches the upstream") {
  LoopbackProvider provider;
  serve_freely(provider);
  Relay relay("framing", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url()});
  relay.started();
  const std::string body = chat();
  const std::string length = "Content-Length: " + std::to_string(body.size()) + "\r\n";
  CHECK(status_of(relay, head(length + "Content-Length: 3\r\n") + body) == 400);
  CHECK(status_of(relay, head(length + length) + body) == 400);
  CHECK(status_of(relay, head(length + "Transfer-Encoding: chunked\r\n") + body) == 400);
  CHECK(status_of(relay, head("Transfer-Encoding: gzip, chunked\r\n") + "0\r\n\r\n") == 400);
  CHECK(status_of(relay, head(length + std::string("Idempotency-Key: ab\0c\r\n", 22)) + body) == 400);
  CHECK(status_of(relay, head(length + "Idempotency-Key: a\r\nX-Bare: lf\nIdempotency-Key: b\r\n") + body) == 400);
  CHECK(status_of(relay, head(length + "Idempotency-Key: a\r\nIdempotency-Key: b\r\n") + body) == 400);
  CHECK(status_of(relay, head(length + "Expect: teapot\r\n") + body) == 417);
  // A trailer would add header fields after every check: an Idempotency-Key, a control character...
  const std::string chunk = [&] {
    char size[16];
    std::snprintf(size, sizeof size, "%zx", body.size());
    return std::string(size) + "\r\n" + body + "\r\n";
  }();
  CHECK(status_of(relay, head("Transfer-Encoding: chunked\r\n") + chunk + "0\r\nIdempotency-Key: late\r\n\r\n") == 400);
  CHECK(status_of(relay, head("Connection: close\r\nTransfer-Encoding: chunked\r\n") + chunk + "0\r\n\r\n") == 200);
  CHECK(status_of(relay, "POST /v1/chat/completions HTTP/1.1\r\n Host: folded\r\n\r\n") == 400);
  CHECK(provider.request_count() == 1);  // the chunked request without a trailer
  // A body without Content-Type (curl -d sends one of its own, others none) is read as the JSON it is.
  const std::string big = chat("loopback", std::string(10'000, 'x'));
  CHECK(status_of(relay, head("Connection: close\r\nContent-Length: " + std::to_string(big.size()) + "\r\n") + big) ==
        200);
  CHECK(provider.request_count() == 2);
}

TEST_CASE("2,000 idle connections cost the relay a socket each: a request meanwhile is served") {
  LoopbackProvider provider;
  serve_freely(provider);
  Relay relay("idle", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url(), "--threads", "1"});
  relay.started();
  std::vector<int> idle;
  for (int i = 0; i < 2000; ++i) idle.push_back(connect_raw(relay.port()));
  CHECK(post(relay, "/v1/chat/completions", chat())->status == 200);
  CHECK(metric(relay, "llm_relay_connections") >= 2000);
  for (const int fd : idle) ::close(fd);
  CHECK(relay.stop() == 0);
}

TEST_CASE("--max-connections: one more connection is answered 503 with Retry-After, and the others served") {
  LoopbackProvider provider;
  serve_freely(provider);
  // A minute for a connection's first request: the three idle ones stay open while the test runs.
  Relay relay("max_connections", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url(), "--max-connections",
                                  "3", "--request-timeout", "60s"});
  relay.started();
  std::vector<int> idle;
  for (int i = 0; i < 3; ++i) idle.push_back(connect_raw(relay.port()));
  for (int tries = 0;; ++tries) {  // until the relay has accepted the three (after their handshakes)
    REQUIRE(tries < 1000);
    const int fd = send_raw(relay.port(), head("Connection: close\r\n", "GET", "/healthz"));
    const std::string answer = read_raw(fd);
    ::close(fd);
    if (statuses(answer) == std::vector<int>{503}) {
      CHECK_THAT(answer, llmretry_catch::contains("Retry-After: 1"));
      break;
    }
    std::this_thread::sleep_for(5ms);
  }
  ::close(idle.back());
  idle.pop_back();
  bool served = false;
  for (int i = 0; i < 1000 && !served; ++i) {  // once the relay saw the connection go
    const auto answer = relay.client().Get("/healthz");
    served = answer && answer->status == 200;
    if (!served) std::this_thread::sleep_for(5ms);
  }
  CHECK(served);
  for (const int fd : idle) ::close(fd);
}

TEST_CASE("two streamed answers, one after the other on one keep-alive connection, both arrive whole") {
  LoopbackProvider provider;
  ScriptedResponse stream = LoopbackProvider::stream({"Hel", "lo", "!"});
  stream.chunk_interval = 100ms;
  provider.then(stream).then(stream);
  Relay relay("two_streams", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url()});
  relay.started();
  auto body = nlohmann::json::parse(chat());
  body["stream"] = true;
  const std::string request =
      head("Content-Type: application/json\r\nContent-Length: " + std::to_string(body.dump().size()) + "\r\n") +
      body.dump();
  const int fd = connect_raw(relay.port());
  for (int i = 0; i < 2; ++i) {
    INFO("stream " << i + 1);
    REQUIRE(::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size()));
    const std::string answer = read_until(fd, "\r\n0\r\n\r\n");
    CHECK(statuses(answer) == std::vector<int>{200});
    CHECK_THAT(answer, llmretry_catch::contains(R"("content":"!")"));
    CHECK_THAT(answer, llmretry_catch::contains("data: [DONE]"));
  }
  ::close(fd);
  CHECK(provider.request_count() == 2);
}

TEST_CASE("HEAD /healthz gets a header without a body; an HTTP/1.1 request without Host is a 400") {
  LoopbackProvider provider;
  serve_freely(provider);
  Relay relay("head", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url()});
  relay.started();
  const int fd =
      send_raw(relay.port(), head("", "HEAD", "/healthz") + head("Connection: close\r\n", "GET", "/healthz"));
  const std::string answers = read_raw(fd);
  ::close(fd);
  CHECK(statuses(answers) == std::vector<int>{200, 200});
  CHECK_THAT(answers, llmretry_catch::contains("Content-Length: 3\r\n"));
  CHECK_THAT(answers, llmretry_catch::contains("\r\n\r\nHTTP/1.1 200"));  // nothing between the two answers
  CHECK(answers.size() >= 3);
  CHECK(answers.substr(answers.size() - 3) == "ok\n");
  CHECK(status_of(relay, "GET /healthz HTTP/1.1\r\n\r\n") == 400);
  CHECK(status_of(relay, "GET /healthz HTTP/1.0\r\n\r\n") == 200);
}

TEST_CASE("an HTTP/1.0 client gets a stream without chunks, ended by the connection's close") {
  LoopbackProvider provider;
  provider.then(LoopbackProvider::stream({"Hel", "lo"}));
  Relay relay("http10_stream", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url()});
  relay.started();
  auto body = nlohmann::json::parse(chat());
  body["stream"] = true;
  const int fd = send_raw(relay.port(),
                          "POST /v1/chat/completions HTTP/1.0\r\nContent-Type: application/json\r\n"
                          "Content-Length: " +
                              std::to_string(body.dump().size()) + "\r\n\r\n" + body.dump());
  const std::string answer = read_raw(fd);
  ::close(fd);
  CHECK(statuses(answer) == std::vector<int>{200});
  CHECK(answer.find("chunked") == std::string::npos);
  CHECK_THAT(answer, llmretry_catch::contains("\r\n\r\ndata: {"));  // the first event right after the header
  CHECK(answer.size() > 14);
  CHECK(answer.substr(answer.size() - 14) == "data: [DONE]\n\n");
}

TEST_CASE("an upstream's header value with a control character is not passed back: the client's header stays whole") {
  const std::string bad_headers =
      "x-request-id: abc\rSet-Cookie: session=evil\r\n"
      "x-ratelimit-limit-requests: 1\x0b"
      "2\r\n"
      "x-ratelimit-remaining-requests: 5\x1b[31m\r\n"
      "x-ratelimit-limit-tokens: 1000000\r\n";
  for (const bool streamed : {false, true}) {
    INFO((streamed ? "a streamed answer" : "a whole answer"));
    const std::string body =
        streamed
            ? "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[]}\n\ndata: [DONE]\n\n"
            : R"({"id":"chatcmpl-1","object":"chat.completion","choices":[],"usage":{"prompt_tokens":1,)"
              R"("completion_tokens":1}})";
    RawUpstream upstream("HTTP/1.1 200 OK\r\nContent-Type: " +
                         std::string(streamed ? "text/event-stream" : "application/json") + "\r\n" + bad_headers +
                         "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
    Relay relay("upstream_headers", {"--listen", "127.0.0.1:0", "--upstream", upstream.base_url()});
    relay.started();
    const std::string request =
        streamed ? R"({"model":"loopback","stream":true,"messages":[{"role":"user","content":"Hello"}]})" : chat();
    const int fd =
        send_raw(relay.port(),
                 head("Connection: close\r\nContent-Length: " + std::to_string(request.size()) + "\r\n") + request);
    const std::string answer = read_raw(fd);
    ::close(fd);
    std::string header = answer.substr(0, answer.find("\r\n\r\n"));
    INFO(header);
    std::transform(header.begin(), header.end(), header.begin(), [](unsigned char c) { return std::tolower(c); });
    CHECK(statuses(answer) == std::vector<int>{200});
    CHECK(header.find("x-ratelimit-limit-tokens: 1000000") != std::string::npos);  // a valid one passes
    CHECK(header.find("set-cookie") == std::string::npos);
    CHECK(header.find("x-request-id") == std::string::npos);
    CHECK(header.find("x-ratelimit-limit-requests") == std::string::npos);
    CHECK(header.find("x-ratelimit-remaining-requests") == std::string::npos);
    for (std::size_t at = header.find('\r'); at != std::string::npos; at = header.find('\r', at + 1))
      CHECK(header.compare(at, 2, "\r\n") == 0);  // every CR ends a line
    CHECK(answer.find(streamed ? "data: [DONE]" : body) != std::string::npos);
  }
}

TEST_CASE("an upstream URL with a port that is no port, or brackets that hold no IPv6 address, is refused") {
  for (const char* url : {"http://example.com/v1", "https://example.com:8443/v1", "http://127.0.0.1:9",
                          "http://[::1]:8080/v1", "http://[::1]/v1", "https://user:pw@example.com:1/v1?x=1",
                          "http://[fe80::1%25eth0]:8080/v1", "http://[::ffff:10.0.0.1]/v1",
                          "https://res.openai.azure.com/openai/deployments/gpt-4o?api-version=2024-10-21"}) {
    INFO(url);
    CHECK(relay::base_url_problem(url).empty());
  }
  for (const auto& [url, problem] : std::vector<std::pair<const char*, const char*>>{
           {"http://example.com:abc/v1", "has a port that is not a number in [1, 65535]"},
           {"http://example.com:99999/v1", "has a port that is not a number in [1, 65535]"},
           {"http://example.com:0/v1", "has a port that is not a number in [1, 65535]"},
           {"http://example.com:/v1", "has a port that is not a number in [1, 65535]"},
           {"http://example.com:80:80/v1", "has a port that is not a number in [1, 65535]"},
           {"http://[::1/v1", "has an IPv6 address without its ']'"},
           {"http://[]:80/v1", "has an IPv6 address without its ']'"},
           {"http://[example.com]/v1", "has a bracketed host that is no IPv6 address"},
           {"http://[:::]/v1", "has a bracketed host that is no IPv6 address"},
           {"http://[1.2.3.4]/v1", "has a bracketed host that is no IPv6 address"},
           {"http://[::1]x/v1", "has something after its IPv6 address's ']'"},
           {"http://exa]mple.com/v1", "has a '[' or ']' outside an IPv6 address"}}) {
    INFO(url);
    CHECK(relay::base_url_problem(url) == "\"" + std::string(url) + "\" " + problem);
  }
}
