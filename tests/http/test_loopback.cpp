// The loopback provider on its own, seen by a plain HTTP client (cpp-httplib's): its address, the script
// served in order, what it records, each ready-made response as it goes on the wire, delays and hangs.
#include <llmretry/testing/loopback/provider.hpp>

#include <httplib.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <llmretry_catch.hpp>

using namespace std::chrono_literals;
using llmretry::testing::LoopbackProvider;
using llmretry::testing::ScriptedResponse;

namespace {

/// A client of `server` whose attempts give up after `timeout`.
httplib::Client client_of(const LoopbackProvider& server, std::chrono::milliseconds timeout = 2000ms) {
  httplib::Client client(server.base_url());
  client.set_connection_timeout(timeout);
  client.set_read_timeout(timeout);
  return client;
}

/// POSTs a small JSON body to /v1/chat/completions.
httplib::Result post(httplib::Client& client) {
  return client.Post("/v1/chat/completions", R"({"model":"chat-small"})", "application/json");
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("the loopback provider listens on 127.0.0.1 and a port of its own") {
  LoopbackProvider first;
  LoopbackProvider second;
  const std::string prefix = "http://127.0.0.1:";
  REQUIRE(first.base_url().rfind(prefix, 0) == 0);
  CHECK(std::stoi(first.base_url().substr(prefix.size())) > 0);
  CHECK(first.base_url() != second.base_url());
  CHECK(first.request_count() == 0);
}

TEST_CASE("the script is served in order, then a 500 that says it is empty") {
  LoopbackProvider server;
  server.then(LoopbackProvider::service_unavailable()).then(LoopbackProvider::chat_completion("hello"));
  auto client = client_of(server);

  auto first = post(client);
  REQUIRE(first);
  CHECK(first->status == 503);
  auto second = post(client);
  REQUIRE(second);
  CHECK(second->status == 200);
  auto third = post(client);
  REQUIRE(third);
  CHECK(third->status == 500);
  CHECK(contains(third->body, "the script is empty"));
  CHECK(server.request_count() == 3);
}

TEST_CASE("every request is recorded: method, path, headers (looked up in any case) and body") {
  LoopbackProvider server;
  server.then(LoopbackProvider::chat_completion("a")).then(LoopbackProvider::chat_completion("b"));
  auto client = client_of(server);
  REQUIRE(client.Post("/v1/chat/completions", {{"Idempotency-Key", "key-1"}, {"X-Attempt", "1"}},
                      R"({"model":"chat-small"})", "application/json"));
  REQUIRE(client.Get("/v1/models"));

  const std::vector<llmretry::testing::ReceivedRequest> requests = server.requests();
  REQUIRE(requests.size() == 2);
  CHECK(requests[0].method == "POST");
  CHECK(requests[0].path == "/v1/chat/completions");
  CHECK(requests[0].body == R"({"model":"chat-small"})");
  CHECK(requests[0].header("idempotency-key") == "key-1");
  CHECK(requests[0].header("X-ATTEMPT") == "1");
  CHECK(requests[0].header("Content-Type") == "application/json");
  CHECK_FALSE(requests[0].header("Authorization").has_value());
  CHECK(requests[1].method == "GET");
  CHECK(requests[1].path == "/v1/models");
}

TEST_CASE("a scripted response goes out with its status, headers, body and content type") {
  LoopbackProvider server;
  ScriptedResponse scripted;
  scripted.status = 202;
  scripted.headers = {{"x-custom", "yes"}};
  scripted.body = "accepted";
  scripted.content_type = "text/plain";
  server.then(scripted);
  auto client = client_of(server);

  auto response = post(client);
  REQUIRE(response);
  CHECK(response->status == 202);
  CHECK(response->get_header_value("x-custom") == "yes");
  CHECK(response->get_header_value("Content-Type") == "text/plain");
  CHECK(response->body == "accepted");
}

TEST_CASE("the ready-made error responses") {
  LoopbackProvider server;
  auto client = client_of(server);

  SECTION("the seed's Azure 429") {
    server.then(LoopbackProvider::azure_rate_limited());
    auto response = post(client);
    REQUIRE(response);
    CHECK(response->status == 429);
    CHECK(response->get_header_value("retry-after") == "30");
    CHECK(response->get_header_value("retry-after-ms") == "511");
    CHECK(response->get_header_value("x-ratelimit-remaining-tokens") == "-853");
    CHECK(contains(response->body, R"("code": "rate_limit_exceeded")"));
  }
  SECTION("OpenAI's 503") {
    server.then(LoopbackProvider::service_unavailable());
    auto response = post(client);
    REQUIRE(response);
    CHECK(response->status == 503);
    CHECK(contains(response->body, R"("type":"server_error")"));
  }
  SECTION("Anthropic's 529") {
    server.then(LoopbackProvider::overloaded());
    auto response = post(client);
    REQUIRE(response);
    CHECK(response->status == 529);
    CHECK(contains(response->body, R"("type":"overloaded_error")"));
  }
  SECTION("context length exceeded") {
    server.then(LoopbackProvider::context_length_exceeded());
    auto response = post(client);
    REQUIRE(response);
    CHECK(response->status == 400);
    CHECK(contains(response->body, R"("code":"context_length_exceeded")"));
  }
  SECTION("insufficient quota") {
    server.then(LoopbackProvider::insufficient_quota());
    auto response = post(client);
    REQUIRE(response);
    CHECK(response->status == 429);
    CHECK(contains(response->body, R"("code":"insufficient_quota")"));
  }
  SECTION("Gemini's RESOURCE_EXHAUSTED with its retry delay") {
    server.then(LoopbackProvider::gemini_resource_exhausted("1.5s"));
    auto response = post(client);
    REQUIRE(response);
    CHECK(response->status == 429);
    CHECK(contains(response->body, R"("status":"RESOURCE_EXHAUSTED")"));
    CHECK(contains(response->body, R"("retryDelay":"1.5s")"));
  }
}

TEST_CASE("a chat completion carries its text") {
  LoopbackProvider server;
  server.then(LoopbackProvider::chat_completion("hello there"));
  auto client = client_of(server);
  auto response = post(client);
  REQUIRE(response);
  CHECK(response->status == 200);
  CHECK(response->get_header_value("Content-Type") == "application/json");
  CHECK(contains(response->body, R"("content":"hello there")"));
  CHECK(contains(response->body, R"("finish_reason":"stop")"));
}

TEST_CASE("streams: one SSE event per token, then [DONE], an error event, or a cut connection") {
  LoopbackProvider server;
  auto client = client_of(server);

  SECTION("whole") {
    server.then(LoopbackProvider::stream({"Hel", "lo"}));
    auto response = post(client);
    REQUIRE(response);
    CHECK(response->status == 200);
    CHECK(response->get_header_value("Content-Type") == "text/event-stream");
    const auto hel = response->body.find(R"("content":"Hel")");
    const auto lo = response->body.find(R"("content":"lo")");
    REQUIRE(hel != std::string::npos);
    REQUIRE(lo != std::string::npos);
    CHECK(hel < lo);
    const std::string done = "data: [DONE]\n\n";
    REQUIRE(response->body.size() > done.size());
    CHECK(response->body.substr(response->body.size() - done.size()) == done);
  }
  SECTION("with an error event instead of [DONE]") {
    server.then(LoopbackProvider::stream_error({"Hel"}));
    auto response = post(client);
    REQUIRE(response);
    CHECK(contains(response->body, R"("content":"Hel")"));
    CHECK(contains(response->body, "event: error\ndata: "));
    CHECK(contains(response->body, R"("type":"overloaded_error")"));
    CHECK_FALSE(contains(response->body, "[DONE]"));
  }
  SECTION("cut: the connection closes without the end of the stream") {
    server.then(LoopbackProvider::stream_cut({"Hel", "lo"}));
    auto response = post(client);
    CHECK_FALSE(response);
  }
}

TEST_CASE("closed mid-body: the client gets part of an announced body") {
  LoopbackProvider server;
  server.then(LoopbackProvider::closed_mid_body());
  auto client = client_of(server);
  auto response = post(client);
  CHECK_FALSE(response);
  CHECK(server.request_count() == 1);
}

TEST_CASE("delays: an answer comes after its delay; a hang outlasts the client, and stopping cuts it short") {
  SECTION("a short delay") {
    LoopbackProvider server;
    ScriptedResponse late = LoopbackProvider::hang(100ms);
    server.then(late);
    auto client = client_of(server);
    const auto start = std::chrono::steady_clock::now();
    auto response = post(client);
    REQUIRE(response);
    CHECK(response->status == 200);
    CHECK(std::chrono::steady_clock::now() - start >= 100ms);
  }
  SECTION("a hang") {
    const auto start = std::chrono::steady_clock::now();
    {
      LoopbackProvider server;
      server.then(LoopbackProvider::hang(30s));
      auto client = client_of(server, 200ms);
      auto response = post(client);
      CHECK_FALSE(response);
      CHECK(server.request_count() == 1);
    }  // the destructor wakes the handler that still waits
    CHECK(std::chrono::steady_clock::now() - start < 10s);
  }
}
