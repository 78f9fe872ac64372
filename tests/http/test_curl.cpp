// End to end over real sockets: libcurl attempts against the loopback provider on 127.0.0.1, driven by
// call_with_retry with a FakeSleep (the waits are recorded, never slept).
#include <llmretry/curl/curl.hpp>
#include <llmretry/json/error_fields.hpp>
#include <llmretry/loopback/provider.hpp>

#include <llmretry/admission/tokens.hpp>
#include <llmretry/http/rate_limits.hpp>
#include <llmretry/retry.hpp>
#include <llmretry/testing/fake_sleep.hpp>

#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <llmretry_catch.hpp>

#include "chat.hpp"

using namespace std::chrono_literals;
using llmretry::FailureKind;
using llmretry::Provider;
using llmretry::Sent;
using llmretry::StopReason;
using llmretry::curl::Call;
using llmretry::testing::LoopbackProvider;

namespace {

const std::string& secret = llmretry_test::secret_key;
using llmretry_test::chat_request;
using llmretry_test::options_for;

/// Runs `call` under `policy` with recorded waits, and keeps why it gave up.
struct Run {
  llmretry::testing::FakeSleep sleep;
  std::mt19937_64 rng{7};
  std::optional<llmretry::GiveUp> gave_up;
  llmretry::CallOptions call_options;

  Run() {
    call_options.on_give_up = [this](const llmretry::GiveUp& give_up) { gave_up = give_up; };
  }
  llmretry::curl::Response operator()(Call& call, const llmretry::RetryPolicy& policy = {}) {
    return llmretry::call_with_retry(call, policy, sleep, rng, llmretry::NoRetryHook{}, call_options);
  }
};

/// Checks that every request carried the same idempotency key and the attempt numbers 1, 2, 3...
void check_attempt_headers(const LoopbackProvider& server, const std::string& key) {
  const auto requests = server.requests();
  for (std::size_t i = 0; i < requests.size(); ++i) {
    INFO("request " << i + 1);
    CHECK(requests[i].header("Idempotency-Key") == key);
    CHECK(requests[i].header("X-Attempt") == std::to_string(i + 1));
    CHECK(requests[i].header("Authorization") == "Bearer " + secret);
    CHECK(requests[i].body == R"({"model":"chat-small","messages":[{"role":"user","content":"hello"}]})");
  }
}

/// Keeps the data of every event a streamed call delivers.
struct Collected {
  std::vector<std::string> data;
  std::function<void(const llmretry::SseEvent&)> handler() {
    return [this](const llmretry::SseEvent& event) { data.push_back(event.data); };
  }
};

template <class Error>
Error expect_throw(Run& run, Call& call, const llmretry::RetryPolicy& policy = {}) {
  try {
    run(call, policy);
  } catch (const Error& error) {
    CHECK(std::string(error.what()).find(secret) == std::string::npos);
    return error;
  }
  FAIL("the call did not throw the expected error");
  throw;  // unreachable
}

}  // namespace

TEST_CASE("a real Azure 429, then success: waits at least retry-after-ms, same key on every attempt") {
  LoopbackProvider server;
  server.then(LoopbackProvider::azure_rate_limited()).then(LoopbackProvider::chat_completion("bonjour"));
  Call call(chat_request(server), options_for(Provider::azure_openai));
  Run run;
  const auto response = run(call);
  CHECK(response.status == 200);
  CHECK(response.body.find("bonjour") != std::string::npos);
  REQUIRE(run.sleep.waits().size() == 1);
  CHECK(run.sleep.waits()[0] >= 511ms);
  CHECK(run.sleep.waits()[0] <= 8000ms);
  REQUIRE(server.request_count() == 2);
  check_attempt_headers(server, call.idempotency_key());
  CHECK(call.attempts() == 2);
}

TEST_CASE("a real Azure 429 is a RateLimited that carries the failure, the response and its rate-limit state") {
  LoopbackProvider server;
  server.then(LoopbackProvider::azure_rate_limited());
  Call call(chat_request(server), options_for(Provider::azure_openai));
  try {
    call();
    FAIL("no error");
  } catch (const llmretry::RateLimited& error) {
    CHECK(error.failure().kind == FailureKind::rate_limited);
    CHECK(error.provider_wait() == std::chrono::milliseconds{511});
    CHECK(std::string(error.what()).find("rate_limit_exceeded") != std::string::npos);
    const auto* response = llmretry::curl::response_of(error);
    REQUIRE(response != nullptr);
    CHECK(response->status == 429);
    CHECK(response->header("Retry-After") == std::string_view("30"));
    const auto limits = llmretry::parse_rate_limits(response->headers, std::chrono::system_clock::now());
    CHECK(limits.tokens.limit == 100000);
    CHECK(limits.tokens.remaining == -853);
    CHECK(limits.requests.remaining == 65);
  }
}

TEST_CASE("every failure maps to its llmretry exception class, the response reachable") {
  SECTION("a timeout is a ProviderTimeout") {
    LoopbackProvider server;
    server.then(LoopbackProvider::hang(5000ms));
    auto options = options_for(Provider::openai);
    options.timeout = 200ms;
    Call call(chat_request(server), options);
    try {
      call();
      FAIL("no error");
    } catch (const llmretry::ProviderTimeout& error) {
      REQUIRE(llmretry::curl::response_of(error) != nullptr);
      CHECK(llmretry::curl::response_of(error)->status == 0);
    }
  }
  SECTION("a refused connection is a ConnectionError") {
    std::string url;
    {
      LoopbackProvider closed;
      url = closed.base_url();
    }
    llmretry::curl::Request request;
    request.url = url;
    Call call(request, options_for(Provider::openai));
    CHECK_THROWS_AS(call(), llmretry::ConnectionError);
  }
  SECTION("a 400 is a ProviderError carrying the response; WithResponse can be caught too") {
    LoopbackProvider server;
    server.then(LoopbackProvider::context_length_exceeded());
    Call call(chat_request(server), options_for(Provider::openai));
    try {
      call();
      FAIL("no error");
    } catch (const llmretry::curl::WithResponse& error) {
      CHECK(error.response().status == 400);
      CHECK(error.response().body.find("context_length_exceeded") != std::string::npos);
    }
  }
  CHECK(llmretry::curl::response_of(std::runtime_error("other")) == nullptr);
}

TEST_CASE("retry-after: 30 alone is above max_provider_wait: stop at once") {
  LoopbackProvider server;
  auto only_seconds = LoopbackProvider::azure_rate_limited();
  only_seconds.headers.erase(only_seconds.headers.begin() + 1);  // retry-after-ms
  server.then(only_seconds);
  Call call(chat_request(server), options_for(Provider::azure_openai));
  Run run;
  expect_throw<llmretry::RateLimited>(run, call);
  REQUIRE(run.gave_up);
  CHECK(run.gave_up->reason == StopReason::provider_wait_too_long);
  CHECK(server.request_count() == 1);
}

TEST_CASE("503, then Anthropic's 529, then success") {
  LoopbackProvider server;
  server.then(LoopbackProvider::service_unavailable())
      .then(LoopbackProvider::overloaded())
      .then(LoopbackProvider::chat_completion("ok"));
  Call call(chat_request(server), options_for(Provider::anthropic));
  Run run;
  CHECK(run(call).status == 200);
  CHECK(run.sleep.waits().size() == 2);
  CHECK(server.request_count() == 3);
  check_attempt_headers(server, call.idempotency_key());
}

TEST_CASE("529 overloaded is retried even when the call is not safe to repeat; 503 is not") {
  LoopbackProvider server;
  server.then(LoopbackProvider::overloaded()).then(LoopbackProvider::service_unavailable());
  Call call(chat_request(server), options_for(Provider::anthropic));
  Run run;
  run.call_options.safe_to_repeat = false;
  const auto error = expect_throw<llmretry::ProviderError>(run, call);
  CHECK(error.status() == 503);
  REQUIRE(run.gave_up);
  CHECK(run.gave_up->reason == StopReason::not_safe_to_repeat);
  CHECK(server.request_count() == 2);
}

TEST_CASE("overloaded_error from an OpenAI-compatible server is retried, even when not safe to repeat") {
  LoopbackProvider server;
  Collected collected;
  Call call(chat_request(server), options_for(Provider::openai));
  SECTION("an SSE event: error before any content") {
    server.then(LoopbackProvider::stream_error({})).then(LoopbackProvider::stream({"a", "b"}));
    call.on_event(collected.handler());
  }
  SECTION("a JSON error body whose error.type is overloaded_error") {
    auto overloaded = LoopbackProvider::overloaded();
    overloaded.status = 503;
    server.then(overloaded).then(LoopbackProvider::chat_completion("ok"));
  }
  Run run;
  run.call_options.safe_to_repeat = false;
  CHECK(run(call).status == 200);
  CHECK_FALSE(run.gave_up);
  CHECK(run.sleep.waits().size() == 1);
  CHECK(server.request_count() == 2);
  check_attempt_headers(server, call.idempotency_key());
}

TEST_CASE("400 context_length_exceeded and 429 insufficient_quota are not retried") {
  LoopbackProvider server;
  Run run;
  SECTION("context length") {
    server.then(LoopbackProvider::context_length_exceeded());
    Call call(chat_request(server), options_for(Provider::openai));
    CHECK(expect_throw<llmretry::ProviderError>(run, call).failure().kind == FailureKind::context_length);
  }
  SECTION("quota") {
    server.then(LoopbackProvider::insufficient_quota());
    Call call(chat_request(server), options_for(Provider::openai));
    CHECK(expect_throw<llmretry::ProviderError>(run, call).failure().kind == FailureKind::quota_exhausted);
  }
  REQUIRE(run.gave_up);
  CHECK(run.gave_up->reason == StopReason::not_retryable);
  CHECK(run.sleep.waits().empty());
  CHECK(server.request_count() == 1);
}

TEST_CASE("Gemini 429 RESOURCE_EXHAUSTED: the wait comes from RetryInfo in the body") {
  LoopbackProvider server;
  Run run;
  SECTION("1.5s: waited, then success") {
    server.then(LoopbackProvider::gemini_resource_exhausted("1.5s")).then(LoopbackProvider::chat_completion("ok"));
    Call call(chat_request(server), options_for(Provider::gemini));
    CHECK(run(call).status == 200);
    REQUIRE(run.sleep.waits().size() == 1);
    CHECK(run.sleep.waits()[0] >= 1500ms);
    CHECK(server.request_count() == 2);
  }
  SECTION("30s: above max_provider_wait, stop at once") {
    server.then(LoopbackProvider::gemini_resource_exhausted("30s"));
    Call call(chat_request(server), options_for(Provider::gemini));
    const auto error = expect_throw<llmretry::RateLimited>(run, call);
    CHECK(error.failure().provider_wait == std::chrono::milliseconds{30'000});
    REQUIRE(run.gave_up);
    CHECK(run.gave_up->reason == StopReason::provider_wait_too_long);
    CHECK(server.request_count() == 1);
  }
}

TEST_CASE("a hang longer than the attempt's timeout") {
  LoopbackProvider server;
  server.then(LoopbackProvider::hang(5000ms));
  auto options = options_for(Provider::openai);
  options.timeout = 300ms;
  Run run;
  const auto started = std::chrono::steady_clock::now();

  SECTION("not safe to repeat: not retried after the ambiguous timeout, the server saw one request") {
    Call call(chat_request(server), options);
    run.call_options.safe_to_repeat = false;
    const auto error = expect_throw<llmretry::ProviderTimeout>(run, call);
    CHECK(error.failure().kind == FailureKind::timeout);
    CHECK(error.failure().sent == Sent::maybe_processed);
    REQUIRE(run.gave_up);
    CHECK(run.gave_up->reason == StopReason::not_safe_to_repeat);
    CHECK(server.request_count() == 1);
  }
  SECTION("safe to repeat: retried with the same key") {
    server.then(LoopbackProvider::chat_completion("ok"));
    Call call(chat_request(server), options);
    CHECK(run(call).status == 200);
    CHECK(server.request_count() == 2);
    check_attempt_headers(server, call.idempotency_key());
  }
  CHECK(std::chrono::steady_clock::now() - started < 4500ms);  // cut short: the hang lasts 5 s
}

TEST_CASE("the attempt's time left bounds its total timeout") {
  LoopbackProvider server;
  server.then(LoopbackProvider::hang(5000ms));
  auto options = options_for(Provider::openai);
  options.timeout = 10'000ms;
  Call call(chat_request(server), options);
  const auto started = std::chrono::steady_clock::now();
  try {
    call(llmretry::Attempt{1, 300ms});
    FAIL("no error");
  } catch (const llmretry::ProviderTimeout& error) {
    CHECK(error.failure().sent == Sent::maybe_processed);
  }
  const auto took = std::chrono::steady_clock::now() - started;
  CHECK(took >= 280ms);
  CHECK(took < 4500ms);  // cut short: the hang lasts 5 s
  CHECK_THROWS_AS(Call(chat_request(server), options)(llmretry::Attempt{1, 0ms}), std::invalid_argument);
  CHECK(server.request_count() == 1);
}

TEST_CASE("the call's deadline alone bounds every transfer and stops the retries") {
  LoopbackProvider server;
  server.then(LoopbackProvider::hang(5000ms)).then(LoopbackProvider::hang(5000ms)).then(LoopbackProvider::hang(5000ms));
  Call call(chat_request(server), options_for(Provider::openai));  // a 600 s timeout per attempt
  llmretry::CallStats stats;
  llmretry::CallOptions options;
  const auto started = std::chrono::steady_clock::now();
  options.deadline = started + 700ms;  // the only deadline
  options.stats = &stats;
  llmretry::RetryPolicy policy;
  policy.base = 10ms;
  policy.cap = 10ms;
  CHECK_THROWS_AS(llmretry::call_with_retry(call, policy, options), llmretry::ProviderTimeout);
  const auto took = std::chrono::steady_clock::now() - started;
  CHECK(took >= 650ms);
  CHECK(took < 4500ms);  // cut short: each hang lasts 5 s
  CHECK(stats.stopped == StopReason::deadline);
  CHECK(server.request_count() <= 2);
}

TEST_CASE("a connection closed mid-body may have been processed") {
  LoopbackProvider server;
  server.then(LoopbackProvider::closed_mid_body()).then(LoopbackProvider::chat_completion("whole"));
  Run run;
  SECTION("retried when safe to repeat") {
    Call call(chat_request(server), options_for(Provider::openai));
    CHECK(run(call).body.find("whole") != std::string::npos);
    CHECK(server.request_count() == 2);
  }
  SECTION("not retried otherwise") {
    Call call(chat_request(server), options_for(Provider::openai));
    run.call_options.safe_to_repeat = false;
    const auto error = expect_throw<llmretry::ConnectionError>(run, call);
    CHECK(error.failure().sent == Sent::maybe_processed);
    CHECK(server.request_count() == 1);
  }
}

TEST_CASE("connection refused: never sent, so always safe to repeat") {
  std::string url;
  {
    LoopbackProvider closed;
    url = closed.base_url() + "/v1/chat/completions";
  }
  llmretry::curl::Request request;
  request.url = url;
  request.body = "{}";
  Call call(request, options_for(Provider::openai));
  Run run;
  run.call_options.safe_to_repeat = false;
  llmretry::RetryPolicy policy;
  policy.max_attempts = 2;
  const auto error = expect_throw<llmretry::ConnectionError>(run, call, policy);
  CHECK(error.failure().sent == Sent::not_sent);
  REQUIRE(run.gave_up);
  CHECK(run.gave_up->reason == StopReason::attempts_exhausted);
  CHECK(call.attempts() == 2);
}

TEST_CASE("the caller's own idempotency key, and headers that can be renamed or left out") {
  LoopbackProvider server;
  server.then(LoopbackProvider::service_unavailable()).then(LoopbackProvider::chat_completion("ok"));
  SECTION("own key") {
    Call call(chat_request(server), options_for(Provider::openai), "order-1234");
    Run run;
    run(call);
    check_attempt_headers(server, "order-1234");
  }
  SECTION("renamed and left out") {
    auto options = options_for(Provider::openai);
    options.idempotency_header = "X-Request-Key";
    options.attempt_header.clear();
    Call call(chat_request(server), options);
    Run run;
    run(call);
    for (const auto& request : server.requests()) {
      CHECK(request.header("X-Request-Key") == call.idempotency_key());
      CHECK_FALSE(request.header("X-Attempt"));
      CHECK_FALSE(request.header("Idempotency-Key"));
    }
  }
}

TEST_CASE("each logical call has its own key") {
  LoopbackProvider server;
  server.then(LoopbackProvider::chat_completion("a")).then(LoopbackProvider::chat_completion("b"));
  Call first(chat_request(server), options_for(Provider::openai));
  Call second(chat_request(server), options_for(Provider::openai));
  first();
  second();
  const auto requests = server.requests();
  REQUIRE(requests.size() == 2);
  CHECK(requests[0].header("Idempotency-Key") != requests[1].header("Idempotency-Key"));
}

TEST_CASE("streaming: events reach the handler in order") {
  LoopbackProvider server;
  server.then(LoopbackProvider::stream({"Hel", "lo"}));
  Collected collected;
  Call call(chat_request(server), options_for(Provider::openai));
  call.on_event(collected.handler());
  Run run;
  const auto response = run(call);
  CHECK(response.status == 200);
  CHECK(response.body.empty());
  REQUIRE(collected.data.size() == 3);
  CHECK(collected.data[0].find("Hel") != std::string::npos);
  CHECK(collected.data[2] == "[DONE]");
  CHECK(call.stream().delivered_events() == 3);
}

TEST_CASE("streaming: a failure before the first event is retried like any other") {
  LoopbackProvider server;
  Collected collected;
  SECTION("529 before the stream") {
    server.then(LoopbackProvider::overloaded()).then(LoopbackProvider::anthropic_stream({"a", "b"}));
  }
  SECTION("an SSE error event before any content") {
    server.then(LoopbackProvider::stream_error({})).then(LoopbackProvider::anthropic_stream({"a", "b"}));
  }
  Call call(chat_request(server), options_for(Provider::anthropic));
  call.on_event(collected.handler());
  Run run;
  CHECK(run(call).status == 200);
  CHECK(collected.data.size() == 4);  // delivered once, not replayed
  CHECK(server.request_count() == 2);
  check_attempt_headers(server, call.idempotency_key());
}

TEST_CASE("streaming: a stream cut after content is never replayed") {
  LoopbackProvider server;
  Collected collected;
  std::size_t delivered = 0;
  SECTION("the connection closes after two tokens") {
    server.then(LoopbackProvider::stream_cut({"Hel", "lo"}));
    delivered = 2;
  }
  SECTION("Anthropic's mid-stream overloaded_error in a 200 stream") {
    server.then(LoopbackProvider::stream_error({"Hel", "lo", "!"}));
    delivered = 3;
  }
  server.then(LoopbackProvider::stream({"never", "sent"}));
  Call call(chat_request(server), options_for(Provider::anthropic));
  call.on_event(collected.handler());
  Run run;
  const auto error = expect_throw<llmretry::StreamInterrupted>(run, call);
  CHECK(error.failure().kind == FailureKind::stream_interrupted);
  CHECK(error.delivered_events() == delivered);
  CHECK(error.delivered_bytes() > 0);
  CHECK(llmretry::is_transient(error.cause().kind));
  CHECK(collected.data.size() == delivered);
  REQUIRE(run.gave_up);
  CHECK(run.gave_up->reason == StopReason::not_retryable);
  CHECK(server.request_count() == 1);
}

TEST_CASE("an exception from the event handler propagates unchanged and is not retried") {
  LoopbackProvider server;
  server.then(LoopbackProvider::stream({"a"})).then(LoopbackProvider::stream({"a"}));
  Call call(chat_request(server), options_for(Provider::openai));
  call.on_event([](const llmretry::SseEvent&) { throw std::logic_error("handler"); });
  Run run;
  CHECK_THROWS_AS(run(call), std::logic_error);
  CHECK(server.request_count() == 1);
}

TEST_CASE("transport_failure: whether the request can have reached the provider") {
  using llmretry::curl::transport_failure;
  CHECK(transport_failure(CURLE_COULDNT_CONNECT, true).sent == Sent::not_sent);
  CHECK(transport_failure(CURLE_COULDNT_RESOLVE_HOST, false).kind == FailureKind::connection);
  const auto connect_timeout = transport_failure(CURLE_OPERATION_TIMEDOUT, false);
  CHECK(connect_timeout.kind == FailureKind::timeout);
  CHECK(connect_timeout.sent == Sent::not_sent);
  CHECK(transport_failure(CURLE_OPERATION_TIMEDOUT, true).sent == Sent::maybe_processed);
  CHECK(transport_failure(CURLE_RECV_ERROR, true).kind == FailureKind::connection);
  CHECK(transport_failure(CURLE_RECV_ERROR, true).sent == Sent::maybe_processed);
  CHECK(transport_failure(CURLE_URL_MALFORMAT, false).kind == FailureKind::unknown);
  CHECK(transport_failure(CURLE_PEER_FAILED_VERIFICATION, true).kind == FailureKind::unknown);
}

TEST_CASE("streaming: a server that answers with plain JSON is returned whole") {
  LoopbackProvider server;
  server.then(LoopbackProvider::chat_completion("not streamed"));
  Collected collected;
  Call call(chat_request(server), options_for(Provider::openai));
  call.on_event(collected.handler());
  const auto response = call();
  CHECK(response.body.find("not streamed") != std::string::npos);
  CHECK(collected.data.empty());
}

TEST_CASE("a timeout that is not positive, or a buffer size out of range, is refused before anything is sent") {
  LoopbackProvider server;
  auto options = options_for(Provider::openai);
  SECTION("total") { options.timeout = 0ms; }
  SECTION("connect") { options.connect_timeout = -1ms; }
  SECTION("receive buffer too small") { options.receive_buffer = 512; }
  SECTION("receive buffer too large") { options.receive_buffer = std::size_t{11} << 20; }
  SECTION("upload buffer too small") { options.upload_buffer = std::size_t{8} << 10; }
  SECTION("upload buffer too large") { options.upload_buffer = std::size_t{3} << 20; }
  Call call(chat_request(server), options);
  CHECK_THROWS_AS(call(), std::invalid_argument);
  CHECK(server.request_count() == 0);
}

// ---- What the server sends: errors inside streams, stream ends, sizes, encodings, methods, texts ----

namespace {

/// Returns `text` as a gzip member holding one stored (uncompressed) deflate block. Requires text.size() < 65536.
std::string gzip_stored(const std::string& text) {
  std::uint32_t crc = 0xFFFFFFFFu;
  for (const char c : text) {
    crc ^= static_cast<unsigned char>(c);
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  crc = ~crc;
  const auto le32 = [](std::uint32_t value) {
    std::string bytes;
    for (int i = 0; i < 4; ++i) bytes += static_cast<char>((value >> (8 * i)) & 0xFFu);
    return bytes;
  };
  const auto size = static_cast<std::uint16_t>(text.size());
  const auto not_size = static_cast<std::uint16_t>(~size);
  std::string out("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff", 10);
  out += '\x01';  // the final block, stored
  out += static_cast<char>(size & 0xFF);
  out += static_cast<char>(size >> 8);
  out += static_cast<char>(not_size & 0xFF);
  out += static_cast<char>(not_size >> 8);
  out += text;
  out += le32(crc);
  out += le32(static_cast<std::uint32_t>(text.size()));
  return out;
}

/// A server on 127.0.0.1 that answers every connection with the same raw bytes, then closes it: for
/// answers an HTTP library would not send (malformed chunked framing).
class RawServer {
 public:
  explicit RawServer(std::string answer) : answer_(std::move(answer)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
        ::listen(listener_, 8) != 0 || ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length) != 0)
      throw std::runtime_error("raw server: cannot listen on 127.0.0.1");
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  RawServer(const RawServer&) = delete;
  RawServer& operator=(const RawServer&) = delete;
  ~RawServer() {
    ::shutdown(listener_, SHUT_RDWR);
    ::close(listener_);
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/v1/chat/completions"; }
  int connections() const { return connections_.load(); }

 private:
  void serve() {
    for (;;) {
      const int client = ::accept(listener_, nullptr, nullptr);
      if (client < 0) return;
      ++connections_;
      std::string request;
      char buffer[4096];
      while (request.find("\r\n\r\n") == std::string::npos) {
        const auto got = ::recv(client, buffer, sizeof buffer, 0);
        if (got <= 0) break;
        request.append(buffer, static_cast<std::size_t>(got));
      }
      ::send(client, answer_.data(), answer_.size(), MSG_NOSIGNAL);
      ::shutdown(client, SHUT_WR);
      while (::recv(client, buffer, sizeof buffer, 0) > 0) {}
      ::close(client);
    }
  }

  std::string answer_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<int> connections_{0};
  std::thread thread_;
};

/// Returns the failure `call()` throws as a ProviderError (FAILs when it returns).
llmretry::Failure failure_of_attempt(Call& call) {
  try {
    call();
  } catch (const llmretry::ProviderError& error) {
    CHECK(std::string(error.what()).find(secret) == std::string::npos);
    return error.failure();
  }
  FAIL("the attempt did not throw");
  return {};
}

const std::string openai_server_error =
    R"(data: {"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}})"
    "\n\n";

}  // namespace

TEST_CASE("OpenAI's data-only error event inside a 200 stream is a failure, not content") {
  LoopbackProvider server;
  Collected collected;
  Run run;
  SECTION("before any content: retried") {
    auto broken = LoopbackProvider::stream({});
    broken.chunks = {openai_server_error};
    server.then(broken).then(LoopbackProvider::stream({"a", "b"}));
    Call call(chat_request(server), options_for(Provider::openai));
    call.on_event(collected.handler());
    CHECK(run(call).status == 200);
    CHECK(collected.data.size() == 3);
    CHECK(server.request_count() == 2);
  }
  SECTION("after content: StreamInterrupted, caused by a server error") {
    auto broken = LoopbackProvider::stream({"Hel", "lo"});
    broken.chunks.back() = openai_server_error;
    server.then(broken).then(LoopbackProvider::stream({"never"}));
    Call call(chat_request(server), options_for(Provider::openai));
    call.on_event(collected.handler());
    const auto error = expect_throw<llmretry::StreamInterrupted>(run, call);
    CHECK(error.cause().kind == FailureKind::server_error);
    CHECK(error.delivered_events() == 2);
    CHECK(collected.data.size() == 2);
    CHECK(server.request_count() == 1);
  }
}

TEST_CASE("event: error is classified under OpenAI and Azure too") {
  LoopbackProvider server;
  const auto error_event = [](const std::string& code, const std::string& type) {
    auto r = LoopbackProvider::stream({});
    r.chunks = {"event: error\ndata: {\"error\":{\"message\":\"m\",\"type\":\"" + type + "\",\"code\":\"" + code +
                "\"}}\n\n"};
    return r;
  };
  server.then(error_event("rate_limit_exceeded", "tokens"))
      .then(error_event("", "server_error"))
      .then(error_event("insufficient_quota", "insufficient_quota"))
      .then(error_event("rate_limit_exceeded", "requests"));
  for (auto provider : {Provider::azure_openai, Provider::openai}) {
    INFO(to_string(provider));
    Call rate(chat_request(server), options_for(provider));
    rate.on_event([](const llmretry::SseEvent&) {});
    CHECK_THROWS_AS(rate(), llmretry::RateLimited);
    if (provider == Provider::openai) break;
    Call server_error(chat_request(server), options_for(provider));
    server_error.on_event([](const llmretry::SseEvent&) {});
    CHECK(failure_of_attempt(server_error).kind == FailureKind::server_error);
    Call quota(chat_request(server), options_for(provider));
    quota.on_event([](const llmretry::SseEvent&) {});
    CHECK(failure_of_attempt(quota).kind == FailureKind::quota_exhausted);
  }
}

TEST_CASE("a stream that ends cleanly without its end marker, or inside an event, was interrupted") {
  LoopbackProvider server;
  Collected collected;
  Run run;
  SECTION("OpenAI without data: [DONE], after content: StreamInterrupted") {
    auto unfinished = LoopbackProvider::stream({"Hel", "lo"});
    unfinished.chunks.pop_back();  // no [DONE], yet the chunked body ends properly
    server.then(unfinished);
    Call call(chat_request(server), options_for(Provider::openai));
    call.on_event(collected.handler());
    const auto error = expect_throw<llmretry::StreamInterrupted>(run, call);
    CHECK(error.delivered_events() == 2);
    CHECK(server.request_count() == 1);
  }
  SECTION("OpenAI's Responses API: event: response.completed ends the stream, without data: [DONE]") {
    auto responses = LoopbackProvider::stream({});
    responses.chunks = {"event: response.output_text.delta\ndata: {\"delta\":\"Hi\"}\n\n",
                        "event: response.completed\ndata: {\"response\":{\"status\":\"completed\"}}\n\n"};
    auto cut = responses;
    cut.chunks.pop_back();
    server.then(responses).then(cut);
    Call complete(chat_request(server), options_for(Provider::openai));
    complete.on_event(collected.handler());
    CHECK(complete().status == 200);
    Call unfinished(chat_request(server), options_for(Provider::openai));
    unfinished.on_event(collected.handler());
    CHECK_THROWS_AS(unfinished(), llmretry::StreamInterrupted);
  }
  SECTION("a partial last event before any content: retried") {
    auto partial = LoopbackProvider::stream({});
    partial.chunks = {"data: {\"object\":\"chat.completion.chunk\",\"cho"};
    server.then(partial).then(LoopbackProvider::stream({"ok"}));
    Call call(chat_request(server), options_for(Provider::openai));
    call.on_event(collected.handler());
    CHECK(run(call).status == 200);
    CHECK(collected.data.size() == 2);
    CHECK(server.request_count() == 2);
  }
  SECTION("Anthropic: message_stop ends the stream, data: [DONE] does not") {
    server.then(LoopbackProvider::anthropic_stream({"a"})).then(LoopbackProvider::stream({"b"}));
    Call complete(chat_request(server), options_for(Provider::anthropic));
    complete.on_event(collected.handler());
    CHECK(complete().status == 200);
    Call openai_shaped(chat_request(server), options_for(Provider::anthropic));
    openai_shaped.on_event(collected.handler());
    CHECK_THROWS_AS(openai_shaped(), llmretry::StreamInterrupted);
  }
  SECTION("Gemini: a chunk with a finishReason ends the stream") {
    auto gemini = LoopbackProvider::stream({});
    gemini.chunks = {
        "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hi\"}]}}]}\r\n\r\n",
        "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"!\"}]},\"finishReason\":\"STOP\"}]}\r\n\r\n"};
    auto cut = gemini;
    cut.chunks.pop_back();
    server.then(gemini).then(cut);
    Call complete(chat_request(server), options_for(Provider::gemini));
    complete.on_event(collected.handler());
    CHECK(complete().status == 200);
    Call unfinished(chat_request(server), options_for(Provider::gemini));
    unfinished.on_event(collected.handler());
    CHECK_THROWS_AS(unfinished(), llmretry::StreamInterrupted);
  }
}

TEST_CASE("OpenAI's Responses API: response.failed is a failure, response.incomplete a finished answer") {
  LoopbackProvider server;
  Collected collected;
  Run run;
  const std::string created = "event: response.created\ndata: {\"response\":{\"status\":\"in_progress\"}}\n\n";
  const std::string delta = "event: response.output_text.delta\ndata: {\"delta\":\"Hi\"}\n\n";
  const auto failed = [](const std::string& code) {
    return "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\","
           "\"error\":{\"code\":\"" +
           code + "\",\"message\":\"m\"}}}\n\n";
  };
  auto responses = LoopbackProvider::stream({});
  SECTION("after content: StreamInterrupted, caused by the error in response.error") {
    responses.chunks = {created, delta, failed("server_error")};
    server.then(responses).then(LoopbackProvider::stream({"never"}));
    Call call(chat_request(server), options_for(Provider::openai));
    call.on_event(collected.handler());
    const auto error = expect_throw<llmretry::StreamInterrupted>(run, call);
    CHECK(error.cause().kind == FailureKind::server_error);
    CHECK(error.delivered_events() == 2);  // response.failed itself is not content
    CHECK(collected.data.size() == 2);
    CHECK(server.request_count() == 1);
  }
  SECTION("before any content: classified and retried like any other failure") {
    responses.chunks = {failed("rate_limit_exceeded")};
    auto completed = LoopbackProvider::stream({});
    completed.chunks = {delta, "event: response.completed\ndata: {\"response\":{\"status\":\"completed\"}}\n\n"};
    server.then(responses).then(completed);
    Call call(chat_request(server), options_for(Provider::openai));
    call.on_event(collected.handler());
    CHECK(run(call).status == 200);
    CHECK(server.request_count() == 2);
    Call unread(chat_request(server), [] {
      auto options = options_for(Provider::azure_openai);
      options.read_error = nullptr;  // without the error's strings, still a failure
      return options;
    }());
    server.then(responses);
    unread.on_event(collected.handler());
    CHECK_THROWS_AS(unread(), llmretry::ProviderError);
  }
  SECTION("response.incomplete ends a stream that succeeded; the handler reads why it was cut") {
    responses.chunks = {created, delta,
                        "event: response.incomplete\ndata: {\"response\":{\"status\":\"incomplete\","
                        "\"incomplete_details\":{\"reason\":\"max_output_tokens\"}}}\n\n"};
    server.then(responses);
    Call call(chat_request(server), options_for(Provider::openai));
    call.on_event(collected.handler());
    CHECK(run(call).status == 200);
    REQUIRE(collected.data.size() == 3);
    CHECK_THAT(collected.data.back(), llmretry_catch::contains("max_output_tokens"));
  }
}

TEST_CASE("idle_timeout cuts a stream that goes silent, well before the total timeout") {
  LoopbackProvider server;
  auto slow = LoopbackProvider::stream({"a", "b"});
  slow.chunk_interval = 4000ms;
  server.then(slow);
  auto options = options_for(Provider::openai);
  options.timeout = 10'000ms;
  options.idle_timeout = 300ms;
  Call call(chat_request(server), options);
  Collected collected;
  call.on_event(collected.handler());
  const auto started = std::chrono::steady_clock::now();
  try {
    call();
    FAIL("no error");
  } catch (const llmretry::StreamInterrupted& error) {
    CHECK(error.cause().kind == FailureKind::timeout);
    CHECK(std::string(error.what()).find("idle_timeout") != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - started < 2500ms);
  CHECK(collected.data.size() == 1);
}

TEST_CASE("Options::cancel aborts an attempt within about a second of being set, never retried") {
  LoopbackProvider server;
  auto slow = LoopbackProvider::stream({"a", "b"});
  slow.chunk_interval = 5000ms;
  server.then(slow);
  std::atomic<bool> cancel{false};
  auto options = options_for(Provider::openai);
  options.timeout = 10'000ms;
  options.cancel = &cancel;
  Call call(chat_request(server), options);
  Collected collected;
  const auto collect = collected.handler();
  call.on_event([&](const llmretry::SseEvent& event) {
    collect(event);
    cancel = true;  // the caller's client went away after the first event
  });
  const auto started = std::chrono::steady_clock::now();
  try {
    call();
    FAIL("no error");
  } catch (const llmretry::StreamInterrupted& error) {
    CHECK(error.cause().kind == FailureKind::unknown);
    CHECK_THAT(error.what(), llmretry_catch::contains("Options::cancel"));
  }
  CHECK(std::chrono::steady_clock::now() - started < 4000ms);  // not the 5 s of the second event
  CHECK(collected.data.size() == 1);
  CHECK(server.request_count() == 1);
}

TEST_CASE("a Call is one logical call: reusing it after it ended is refused") {
  LoopbackProvider server;
  SECTION("after a streamed answer") {
    server.then(LoopbackProvider::stream({"a"})).then(LoopbackProvider::stream({"b"}));
    Call call(chat_request(server), options_for(Provider::openai));
    call.on_event([](const llmretry::SseEvent&) {});
    call();
    CHECK_THROWS_AS(call(), std::logic_error);
  }
  SECTION("after a stream broke") {
    server.then(LoopbackProvider::stream_cut({"a"})).then(LoopbackProvider::stream({"b"}));
    Call call(chat_request(server), options_for(Provider::openai));
    call.on_event([](const llmretry::SseEvent&) {});
    CHECK_THROWS_AS(call(), llmretry::StreamInterrupted);
    CHECK_THROWS_AS(call(), std::logic_error);
  }
  SECTION("after a plain answer") {
    server.then(LoopbackProvider::chat_completion("a")).then(LoopbackProvider::chat_completion("b"));
    Call call(chat_request(server), options_for(Provider::openai));
    call();
    CHECK_THROWS_AS(call(), std::logic_error);
  }
  CHECK(server.request_count() == 1);
}

TEST_CASE("HEAD, GET and DELETE without a body") {
  LoopbackProvider server;
  server.then(LoopbackProvider::chat_completion("head")).then(LoopbackProvider::chat_completion("delete"));
  auto request = chat_request(server);
  request.body.clear();
  auto options = options_for(Provider::openai);
  options.timeout = 1500ms;
  request.method = "HEAD";
  const auto head = Call(request, options)();
  CHECK(head.status == 200);
  CHECK(head.body.empty());
  request.method = "DELETE";
  CHECK(Call(request, options)().status == 200);
  const auto requests = server.requests();
  REQUIRE(requests.size() == 2);
  CHECK(requests[0].method == "HEAD");
  CHECK(requests[1].method == "DELETE");
  for (const auto& received : requests) {
    CHECK_FALSE(received.header("Content-Length"));
    CHECK(received.header("Content-Type") == "application/json");  // only the request's own
  }
  request.method = "GET";
  request.body = "{}";
  CHECK_THROWS_AS(Call(request, options)(), std::invalid_argument);
}

TEST_CASE("size limits: a clear failure, not retried; an oversized error body is classified by status") {
  LoopbackProvider server;
  Run run;
  auto options = options_for(Provider::openai);
  SECTION("a 2xx body above max_body") {
    options.max_body = 1000;
    server.then(LoopbackProvider::chat_completion(std::string(2000, 'x')));
  }
  SECTION("a header block above max_header_bytes") {
    auto many = LoopbackProvider::chat_completion("x");
    for (int i = 0; i < 80; ++i) many.headers.emplace_back("X-Filler-" + std::to_string(i), std::string(1000, 'h'));
    server.then(many);
  }
  SECTION("a single header line above libcurl's own limit") {
    auto one = LoopbackProvider::chat_completion("x");
    one.headers.emplace_back("X-Huge", std::string(200'000, 'h'));
    options.max_header_bytes = 1 << 20;
    server.then(one);
  }
  SECTION("one server-sent event above max_event_bytes") {
    options.max_event_bytes = 4096;
    auto stream = LoopbackProvider::stream({std::string(10'000, 'y')});
    server.then(stream);
  }
  server.then(LoopbackProvider::chat_completion("never"));
  Call call(chat_request(server), options);
  call.on_event([](const llmretry::SseEvent&) {});
  const auto error = expect_throw<llmretry::ProviderError>(run, call);
  CHECK(error.failure().kind == FailureKind::too_large);
  CHECK_FALSE(llmretry::is_transient(error.failure().kind));
  REQUIRE(run.gave_up);
  CHECK(run.gave_up->reason == StopReason::not_retryable);
  CHECK(server.request_count() == 1);
}

TEST_CASE("an error body above max_error_body is classified by status and headers alone") {
  LoopbackProvider server;
  auto huge = LoopbackProvider::insufficient_quota();
  huge.body.insert(huge.body.size() - 1, ",\"padding\":\"" + std::string(100'000, 'p') + "\"");
  server.then(huge);
  auto options = options_for(Provider::openai);
  std::size_t parsed = 0;
  options.read_error = [&](std::string_view body) {
    ++parsed;
    return llmretry::json::error_fields(body);
  };
  Call call(chat_request(server), options);
  CHECK(failure_of_attempt(call).kind == FailureKind::rate_limited);  // the quota code was past the limit
  CHECK(parsed == 0);
}

TEST_CASE("content encodings are asked for and decoded") {
  LoopbackProvider server;
  Run run;
  SECTION("a gzipped insufficient_quota 429 is quota_exhausted") {
    auto quota = LoopbackProvider::insufficient_quota();
    quota.body = gzip_stored(quota.body);
    quota.headers.emplace_back("Content-Encoding", "gzip");
    server.then(quota);
    Call call(chat_request(server), options_for(Provider::openai));
    CHECK(expect_throw<llmretry::ProviderError>(run, call).failure().kind == FailureKind::quota_exhausted);
    CHECK(server.requests()[0].header("Accept-Encoding").value_or("").find("gzip") != std::string::npos);
  }
  SECTION("a body that does not decode fails the same way again: not retried") {
    auto broken = LoopbackProvider::chat_completion("x");
    broken.body = "this is not gzip";
    broken.headers.emplace_back("Content-Encoding", "gzip");
    server.then(broken).then(broken);
    Call call(chat_request(server), options_for(Provider::openai));
    CHECK(expect_throw<llmretry::ProviderError>(run, call).failure().kind == FailureKind::unknown);
    CHECK(server.request_count() == 1);
  }
}

TEST_CASE("malformed chunked framing fails the same way again: not retried") {
  RawServer server(
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: "
      "chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n");
  llmretry::curl::Request request;
  request.url = server.url();
  request.body = "{}";
  Call call(request, options_for(Provider::openai));
  Run run;
  const auto error = expect_throw<llmretry::ProviderError>(run, call);
  CHECK(error.failure().kind == FailureKind::unknown);
  CHECK(server.connections() == 1);
}

TEST_CASE("server text in what() is bounded, printable, and never shows the request's secrets") {
  LoopbackProvider server;
  auto echo = LoopbackProvider::insufficient_quota();
  echo.body = "{\"error\":{\"code\":\"Bearer " + secret + " \\u0001\\n" + std::string(500, 'z') + "\"}}";
  echo.status = 400;
  auto key_only = echo;
  key_only.body = "{\"error\":{\"type\":\"" + secret + "\"}}";
  server.then(echo).then(key_only);
  for (int i = 0; i < 2; ++i) {
    Call call(chat_request(server), options_for(Provider::openai));
    try {
      call();
      FAIL("no error");
    } catch (const llmretry::ProviderError& error) {
      const std::string what = error.what();
      INFO(what);
      CHECK(what.find(secret) == std::string::npos);
      CHECK(what.find("sk-test") == std::string::npos);
      CHECK(what.size() < 200);
      for (char c : what) CHECK((c >= 0x20 && c <= 0x7E));
    }
  }
}

TEST_CASE("529 is overloaded and refused before any work, under every provider") {
  LoopbackProvider server;
  server.then(LoopbackProvider::overloaded()).then(LoopbackProvider::overloaded());
  for (auto provider : {Provider::anthropic, Provider::openai}) {
    INFO(to_string(provider));
    Call call(chat_request(server), options_for(provider));
    const auto failure = failure_of_attempt(call);
    CHECK(failure.kind == FailureKind::server_error);
    CHECK(failure.sent == Sent::refused);
    CHECK(failure == llmretry::classify_status(529));
  }
}

TEST_CASE("provider answers recognised over the wire") {
  LoopbackProvider server;
  SECTION("Anthropic's prompt is too long is context_length") {
    auto too_long = LoopbackProvider::overloaded();
    too_long.status = 400;
    too_long.body =
        R"({"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}})";
    server.then(too_long);
    Call call(chat_request(server), options_for(Provider::anthropic));
    CHECK(failure_of_attempt(call).kind == FailureKind::context_length);
  }
  SECTION("Gemini's per-day QuotaFailure is quota_exhausted, a per-minute one is rate_limited") {
    const auto quota = [](const std::string& id) {
      auto r = LoopbackProvider::gemini_resource_exhausted("20s");
      r.body.insert(
          r.body.find("{\"@type\""),
          R"({"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":")" +
              id + "\"}]},");
      return r;
    };
    server.then(quota("GenerateRequestsPerDayPerProjectPerModel-FreeTier"))
        .then(quota("GenerateRequestsPerMinutePerProjectPerModel-FreeTier"));
    Call per_day(chat_request(server), options_for(Provider::gemini));
    CHECK(failure_of_attempt(per_day).kind == FailureKind::quota_exhausted);
    Call per_minute(chat_request(server), options_for(Provider::gemini));
    CHECK(failure_of_attempt(per_minute).kind == FailureKind::rate_limited);
  }
  SECTION("Azure's content_filter finish reason in a 200") {
    auto filtered = LoopbackProvider::chat_completion("");
    const auto at = filtered.body.find("\"stop\"");
    filtered.body.replace(at, 6, "\"content_filter\"");
    server.then(filtered);
    const auto response = Call(chat_request(server), options_for(Provider::azure_openai))();
    const auto body = nlohmann::json::parse(response.body);
    const auto reason = body["choices"][0]["finish_reason"].get<std::string>();
    const auto failure = llmretry::finish_reason_failure(Provider::azure_openai, reason);
    REQUIRE(failure);
    CHECK(failure->kind == FailureKind::content_filter);
    CHECK_FALSE(llmretry::finish_reason_failure(Provider::azure_openai, "stop"));
  }
  SECTION("Azure's x-ratelimit-*-tokens: -1 is unknown, not a number") {
    auto unknown = LoopbackProvider::chat_completion("ok");
    unknown.headers = {{"x-ratelimit-limit-tokens", "-1"},
                       {"x-ratelimit-remaining-tokens", "-1"},
                       {"x-ratelimit-remaining-requests", "-1"}};
    server.then(unknown);
    const auto response = Call(chat_request(server), options_for(Provider::azure_openai))();
    const auto limits = llmretry::parse_rate_limits(response.headers, std::chrono::system_clock::now());
    CHECK_FALSE(limits.tokens.limit);
    CHECK_FALSE(limits.tokens.remaining);
    CHECK(limits.requests.remaining == -1);
  }
}

TEST_CASE("a Session makes attempt after attempt on one handle, none inheriting the options of the one before") {
  LoopbackProvider provider;
  provider.then(LoopbackProvider::stream({"a", "b"}))
      .then(LoopbackProvider::rate_limit_exceeded("requests", 20ms))
      .then(LoopbackProvider::chat_completion("whole"));
  llmretry::curl::Session session;
  const llmretry::curl::Request request{"POST", provider.base_url() + "/v1/chat/completions", {}, "{}"};
  llmretry::curl::Options options;
  std::vector<std::string> events;
  const std::function<void(const llmretry::SseEvent&)> on_event = [&](const llmretry::SseEvent& event) {
    events.push_back(event.data);
  };
  llmretry::StreamGuard guard;
  CHECK(session.perform(request, options, {{"X-First", "1"}}, &on_event, &guard).body.empty());
  CHECK(events.size() == 3);
  CHECK_THROWS_AS(session.perform(request, options), llmretry::RateLimited);
  const auto whole = session.perform(request, options);
  CHECK(whole.status == 200);
  CHECK_THAT(whole.body, llmretry_catch::contains("whole"));
  CHECK(events.size() == 3);
  const auto received = provider.requests();
  REQUIRE(received.size() == 3);
  CHECK(received[0].header("X-First") == std::string("1"));
  CHECK_FALSE(received[2].header("X-First").has_value());
  CHECK_THAT(received[2].header("Accept-Encoding").value_or(""), llmretry_catch::contains("gzip"));

  SECTION("Options::accept_encoding: the encodings asked for") {
    provider.then(LoopbackProvider::chat_completion("plain"));
    options.accept_encoding = "identity";
    CHECK_THAT(session.perform(request, options).body, llmretry_catch::contains("plain"));
    CHECK(provider.requests().back().header("Accept-Encoding") == std::string("identity"));
  }
}

TEST_CASE("after an attempt, returned or thrown, its handle keeps none of its options") {
  LoopbackProvider provider;
  provider.then(LoopbackProvider::chat_completion("once"));
  llmretry::curl::detail::global_init();
  const std::unique_ptr<CURL, llmretry::curl::detail::EasyDeleter> handle(curl_easy_init());
  REQUIRE(handle);
  const std::string url = provider.base_url() + "/v1/chat/completions";
  SECTION("returned") {
    const llmretry::curl::detail::ResetOnExit reset(handle.get());
    curl_easy_setopt(handle.get(), CURLOPT_URL, url.c_str());
  }
  SECTION("thrown") {
    CHECK_THROWS_AS(
        [&] {
          const llmretry::curl::detail::ResetOnExit reset(handle.get());
          curl_easy_setopt(handle.get(), CURLOPT_URL, url.c_str());
          throw std::runtime_error("the attempt failed");
        }(),
        std::runtime_error);
  }
  CHECK(curl_easy_perform(handle.get()) == CURLE_URL_MALFORMAT);  // no URL set any more
  CHECK(provider.request_count() == 0);
}

// ---- Connections: every attempt on a thread reuses that thread's session ----

TEST_CASE("50 sequential Calls on one thread open one connection, whatever they answer") {
  LoopbackProvider server;
  for (int i = 0; i < 50; ++i) {
    if (i % 10 == 3) server.then(LoopbackProvider::service_unavailable());
    server.then(i % 5 == 0 ? LoopbackProvider::stream({"a", "b"}) : LoopbackProvider::chat_completion("ok"));
  }
  int answered = 0;
  for (int i = 0; i < 50; ++i) {
    Call call(chat_request(server), options_for(Provider::openai));
    Collected collected;
    if (i % 5 == 0) call.on_event(collected.handler());
    Run run;
    if (run(call).status == 200) ++answered;
    if (i % 5 == 0) CHECK(collected.data.size() == 3);
  }
  CHECK(answered == 50);
  CHECK(server.request_count() == 55);  // 5 of them answered 503 first, then retried
  CHECK(server.connection_count() == 1);
  SECTION("curl::perform too") {
    server.then(LoopbackProvider::chat_completion("ok"));
    CHECK(llmretry::curl::perform(chat_request(server), options_for(Provider::openai)).status == 200);
    CHECK(server.connection_count() == 1);
  }
}

TEST_CASE("two threads making Calls: each on its own connection") {
  LoopbackProvider server;
  constexpr int per_thread = 20;
  for (int i = 0; i < 2 * per_thread; ++i) server.then(LoopbackProvider::chat_completion("ok"));
  std::atomic<int> answered{0};
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        auto request = chat_request(server);
        request.headers.emplace_back("X-Thread", std::to_string(t));
        try {
          if (Call(request, options_for(Provider::openai))().status == 200) ++answered;
        } catch (const std::exception&) {
          ++failed;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(answered == 2 * per_thread);
  CHECK(failed == 0);
  CHECK(server.connection_count() == 2);
  const auto requests = server.requests();
  REQUIRE(requests.size() == 2 * per_thread);
  std::optional<int> port_of[2];
  for (const auto& request : requests) {
    const int t = request.header("X-Thread") == std::string("1") ? 1 : 0;
    if (!port_of[t]) port_of[t] = request.client_port;
    CHECK(request.client_port == *port_of[t]);
  }
  CHECK(port_of[0] != port_of[1]);
}

TEST_CASE("a Call made from a streaming handler on the same thread gets a connection of its own") {
  LoopbackProvider server;
  server.then(LoopbackProvider::stream({"a", "b"}))
      .then(LoopbackProvider::chat_completion("nested"))
      .then(LoopbackProvider::chat_completion("after"));
  std::vector<std::string> nested;
  Call outer(chat_request(server), options_for(Provider::openai));
  outer.on_event([&](const llmretry::SseEvent& event) {
    if (nested.empty()) nested.push_back(Call(chat_request(server), options_for(Provider::openai))().body);
    nested.push_back(event.data);
  });
  CHECK(outer().status == 200);
  REQUIRE(nested.size() == 4);
  CHECK_THAT(nested[0], llmretry_catch::contains("nested"));
  CHECK(nested[3] == "[DONE]");
  CHECK(server.connection_count() == 2);
  const auto after = Call(chat_request(server), options_for(Provider::openai))();
  CHECK_THAT(after.body, llmretry_catch::contains("after"));
  CHECK(server.connection_count() == 2);  // the thread's connection again
  const auto requests = server.requests();
  REQUIRE(requests.size() == 3);
  CHECK(requests[2].client_port == requests[0].client_port);
  CHECK(requests[1].client_port != requests[0].client_port);
}

TEST_CASE("Call::with_session: the attempts go through the session given") {
  LoopbackProvider server;
  for (int i = 0; i < 3; ++i) server.then(LoopbackProvider::chat_completion("ok"));
  llmretry::curl::Session session;
  Call first(chat_request(server), options_for(Provider::openai));
  CHECK(first.with_session(session)().status == 200);
  Call second(chat_request(server), options_for(Provider::openai));
  CHECK(second.with_session(session)().status == 200);
  CHECK(server.connection_count() == 1);
  CHECK(Call(chat_request(server), options_for(Provider::openai))().status == 200);  // the thread's session
  CHECK(server.connection_count() == 2);

  SECTION("a session is never re-entered from its own streaming handler") {
    server.then(LoopbackProvider::stream({"a"}));
    Call streamed(chat_request(server), options_for(Provider::openai));
    streamed.with_session(session).on_event(
        [&](const llmretry::SseEvent&) { session.perform(chat_request(server), options_for(Provider::openai)); });
    CHECK_THROWS_AS(streamed(), std::logic_error);
    CHECK_FALSE(session.busy());
    CHECK(server.request_count() == 4);
  }
}

// ---- The rate-limited loopback provider streams its own answers ----

namespace {

/// Makes `server` rate-limited with room for every request of a test, each content event after `interval`.
void serve_freely(LoopbackProvider& server, std::chrono::milliseconds interval = 0ms) {
  llmretry::testing::LoopbackLimits limits;
  limits.requests_per_minute = 60'000;
  limits.tokens_per_minute = 6'000'000;
  limits.token_interval = interval;
  server.enforce(limits);
}

}  // namespace

TEST_CASE("curl::Call with on_event gets the rate-limited loopback's own stream, complete") {
  LoopbackProvider server;
  serve_freely(server);
  std::vector<llmretry::SseEvent> events;
  auto request = chat_request(server);
  SECTION("OpenAI chat completion chunks, then usage, then [DONE]") {
    request.body =
        R"({"model":"chat-small","max_tokens":4,"stream":true,"stream_options":{"include_usage":true},"messages":[]})";
    Call call(request, options_for(Provider::openai));
    call.on_event([&](const llmretry::SseEvent& event) { events.push_back(event); });
    const auto response = Run{}(call);
    CHECK(response.status == 200);
    CHECK(response.header("x-ratelimit-limit-requests") == std::string_view("60000"));
    REQUIRE(events.size() == 8);  // the role, 4 tokens, the finish, the usage, [DONE]
    CHECK(events.back().data == "[DONE]");
    std::string content;
    for (std::size_t i = 0; i + 2 < events.size(); ++i) {
      const auto chunk = nlohmann::json::parse(events[i].data);
      CHECK(chunk.at("object") == "chat.completion.chunk");
      const auto& choice = chunk.at("choices").at(0);
      if (i == 0) CHECK(choice.at("delta").at("role") == "assistant");
      if (choice.at("delta").contains("content")) content += choice.at("delta").at("content").get<std::string>();
      CHECK(choice.at("finish_reason") == (i + 3 == events.size() ? nlohmann::json("stop") : nlohmann::json()));
    }
    CHECK(content == "loopback loopback loopback loopback");
    const auto usage = nlohmann::json::parse(events[events.size() - 2].data);
    CHECK(usage.at("choices").empty());
    CHECK(usage.at("usage").at("completion_tokens") == 4);
    CHECK(usage.at("usage").at("prompt_tokens") == llmretry::estimate_tokens(request.body));
  }
  SECTION("Anthropic Messages events, ended by message_stop") {
    request.url = server.base_url() + "/v1/messages";
    request.body = R"({"model":"claude","max_tokens":2,"stream":true,"messages":[]})";
    Call call(request, options_for(Provider::anthropic));
    call.on_event([&](const llmretry::SseEvent& event) { events.push_back(event); });
    CHECK(Run{}(call).status == 200);
    std::vector<std::string> names;
    for (const auto& event : events) names.push_back(event.event);
    CHECK(names == std::vector<std::string>{"message_start", "content_block_start", "content_block_delta",
                                            "content_block_delta", "content_block_stop", "message_delta",
                                            "message_stop"});
    CHECK(nlohmann::json::parse(events[5].data).at("usage").at("output_tokens") == 2);
  }
  CHECK(server.served() == 1);
}

TEST_CASE("the loopback's token_interval comes before each content event; stopping cuts the wait short") {
  auto server = std::make_unique<LoopbackProvider>();
  serve_freely(*server, 60s);  // the first content event would come a minute after the role's
  auto request = chat_request(*server);
  request.body = R"({"model":"chat-small","max_tokens":2,"stream":true})";
  auto options = options_for(Provider::openai);
  options.timeout = 120s;
  std::atomic<int> events{0};
  std::optional<std::size_t> delivered;
  bool returned = false;
  std::thread client([&] {
    Call call(request, options);
    call.on_event([&](const llmretry::SseEvent&) { ++events; });
    try {
      call();
      returned = true;
    } catch (const llmretry::StreamInterrupted& error) {
      delivered = error.delivered_events();
    } catch (const std::exception&) {}
  });
  for (int i = 0; i < 20'000 && events.load() == 0; ++i) std::this_thread::sleep_for(1ms);
  CHECK(events.load() == 1);
  server.reset();
  client.join();
  CHECK_FALSE(returned);
  CHECK(delivered == std::optional<std::size_t>(1));
}

TEST_CASE("without_userinfo: the user name and password of every URL in libcurl's words", "[curl]") {
  using llmretry::curl::detail::without_userinfo;
  CHECK(without_userinfo("Unsupported proxy syntax in 'http://alice:s3cr@t@proxy:8080': Bad URL") ==
        "Unsupported proxy syntax in 'http://[redacted]@proxy:8080': Bad URL");
  CHECK(without_userinfo("Unsupported proxy scheme for 'alice:s3cret@proxy'") ==
        "Unsupported proxy scheme for '[redacted]@proxy'");
  CHECK(without_userinfo("a http://u:p@h/x and \"socks5://v@w\"") ==
        "a http://[redacted]@h/x and \"socks5://[redacted]@w\"");
  CHECK(without_userinfo("Failed to connect to 127.0.0.1 port 1 after 0 ms: Connection refused") ==
        "Failed to connect to 127.0.0.1 port 1 after 0 ms: Connection refused");
  CHECK(without_userinfo("'@' x://@h @") == "'@' x://@h @");  // nothing before the '@'
  CHECK(without_userinfo("") == "");
}

TEST_CASE("a proxy from the environment that libcurl cannot use: its credentials are not in the failure", "[curl]") {
  // Set for this test only: libcurl reads them at each transfer.
  struct Environment {
    Environment() {
      ::setenv("http_proxy", "http://alice:s3cret@[not-an-address", 1);
      ::setenv("no_proxy", "", 1);
    }
    Environment(const Environment&) = delete;
    Environment& operator=(const Environment&) = delete;
    ~Environment() {
      ::unsetenv("http_proxy");
      ::unsetenv("no_proxy");
    }
  } environment;
  LoopbackProvider server;
  Call call(chat_request(server), options_for(Provider::openai));
  try {
    (void)call();
    FAIL("the transfer went through the proxy");
  } catch (const llmretry::ProviderError& error) {
    INFO(error.what());
    CHECK(std::string(error.what()).find("s3cret") == std::string::npos);
    CHECK(std::string(error.what()).find("[redacted]@") != std::string::npos);
  }
  CHECK(server.request_count() == 0);
}

TEST_CASE("redact: every secret in any ASCII case or JSON escape, overlapping echoes included; ifind's bounds",
          "[curl]") {
  using llmretry::curl::detail::redact;
  CHECK(redact("key sk-AbC123 and SK-abc123 and sk-abc123sk-abc123", {"sk-abc123"}) ==
        "key [redacted] and [redacted] and [redacted][redacted]");
  CHECK(redact("nothing here", {"sk-abc123", ""}) == "nothing here");
  CHECK(redact("Bearer sk-long-key", {"sk-long-key", "sk-long"}) == "Bearer [redacted]");
  // Spelled with JSON escapes, all or some of its characters, in any case of the hex digits.
  CHECK(redact(R"({"content":"\u0073\u006B\u002d\u0061bc123!"})", {"sk-abc123"}) == R"({"content":"[redacted]!"})");
  CHECK(redact(R"(a\/b sk\u002Dabc123)", {"a/b", "sk-abc123"}) == "[redacted] [redacted]");
  CHECK(redact(R"(\u00e9 \u00 \uzzzz \)", {"sk-abc123"}) == R"(\u00e9 \u00 \uzzzz \)");  // not ASCII, cut, bad
  CHECK(llmretry::detail::ifind("abc", "C") == 2);
  CHECK(llmretry::detail::ifind("abc", "c", 3) == std::string_view::npos);
  CHECK(llmretry::detail::ifind("abc", "c", 4) == std::string_view::npos);
  CHECK(llmretry::detail::ifind("abc", "abcd") == std::string_view::npos);
}
