// The loopback provider on its own, seen by a plain HTTP client (cpp-httplib's): its address, the script
// served in order, what it records, each ready-made response as it goes on the wire, delays and hangs, and
// the rate-limited mode (its buckets first on their own, in given time).
#include <llmretry/loopback/provider.hpp>

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <llmretry_catch.hpp>

using namespace std::chrono_literals;
using llmretry::testing::LoopbackLimits;
using llmretry::testing::LoopbackProvider;
using llmretry::testing::LoopbackRateLimit;
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

/// Returns the value of header `name` in `headers`, or "" when absent.
std::string value_of(const LoopbackRateLimit::Headers& headers, const std::string& name) {
  for (const auto& [key, value] : headers)
    if (key == name) return value;
  return {};
}

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

TEST_CASE("connection_count: the client ports the requests came over") {
  LoopbackProvider server;
  for (int i = 0; i < 4; ++i) server.then(LoopbackProvider::chat_completion("a"));
  auto kept = client_of(server);
  kept.set_keep_alive(true);
  for (int i = 0; i < 3; ++i) REQUIRE(post(kept));
  CHECK(server.connection_count() == 1);
  auto other = client_of(server);
  REQUIRE(post(other));
  CHECK(server.connection_count() == 2);
  const auto requests = server.requests();
  REQUIRE(requests.size() == 4);
  CHECK(requests[0].client_port > 0);
  CHECK(requests[1].client_port == requests[0].client_port);
  CHECK(requests[2].client_port == requests[0].client_port);
  CHECK(requests[3].client_port != requests[0].client_port);
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

  SECTION("a real Azure 429") {
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

TEST_CASE("the rate-limited mode's buckets: refilled continuously, enforced per second") {
  using time_point = LoopbackRateLimit::time_point;
  const time_point t0{std::chrono::hours{1}};
  LoopbackLimits limits;
  limits.requests_per_minute = 600;  // 10 at once, one more every 100 ms
  limits.tokens_per_minute = 6000;   // 100 at once, one more every 10 ms
  LoopbackRateLimit rate(limits, t0);

  SECTION("requests: 10 at once, then one every 100 ms; the refusal charges nothing") {
    for (int i = 0; i < 10; ++i) {
      const auto verdict = rate.admit(1, t0);
      REQUIRE(verdict.admitted);
      CHECK(value_of(verdict.headers, "x-ratelimit-remaining-requests") == std::to_string(9 - i));
    }
    const auto refused = rate.admit(1, t0 + 40ms);
    CHECK_FALSE(refused.admitted);
    CHECK(refused.limited_by == "requests");
    CHECK(refused.wait == 60ms);
    CHECK(value_of(refused.headers, "x-ratelimit-limit-requests") == "600");
    CHECK(value_of(refused.headers, "x-ratelimit-remaining-requests") == "0");
    CHECK(value_of(refused.headers, "x-ratelimit-reset-requests") == "960ms");  // 9.6 requests to refill
    CHECK(value_of(refused.headers, "x-ratelimit-remaining-tokens") == "94");   // 10 taken, 4 back
    CHECK(rate.admit(1, t0 + 100ms).admitted);
    CHECK_FALSE(rate.admit(1, t0 + 150ms).admitted);
  }
  SECTION("tokens: the charge at admission decides, and the wait is the exact time until it fits") {
    REQUIRE(rate.admit(60, t0).admitted);
    const auto refused = rate.admit(50, t0);
    CHECK_FALSE(refused.admitted);
    CHECK(refused.limited_by == "tokens");
    CHECK(refused.wait == 100ms);  // 10 tokens missing at 100 per second
    CHECK(value_of(refused.headers, "x-ratelimit-limit-tokens") == "6000");
    CHECK(value_of(refused.headers, "x-ratelimit-remaining-tokens") == "40");
    CHECK(value_of(refused.headers, "x-ratelimit-reset-tokens") == "600ms");
    CHECK(value_of(refused.headers, "x-ratelimit-remaining-requests") == "9");
    CHECK(rate.admit(50, t0 + 100ms).admitted);
  }
  SECTION("a cost above the burst waits for a full bucket, then leaves it in debt") {
    REQUIRE(rate.admit(30, t0).admitted);
    const auto refused = rate.admit(150, t0);
    CHECK_FALSE(refused.admitted);
    CHECK(refused.wait == 300ms);
    const auto admitted = rate.admit(150, t0 + 300ms);
    REQUIRE(admitted.admitted);
    CHECK(value_of(admitted.headers, "x-ratelimit-remaining-tokens") == "-50");
    CHECK(value_of(admitted.headers, "x-ratelimit-reset-tokens") == "1500ms");
  }
  SECTION("bursts set by hand") {
    limits.requests_burst = 600;
    limits.tokens_burst = 1;
    LoopbackRateLimit whole(limits, t0);
    for (int i = 0; i < 600; ++i) REQUIRE(whole.admit(0, t0).admitted);
    CHECK_FALSE(whole.admit(0, t0).admitted);
    CHECK(whole.admit(1, t0).wait == 100ms);  // 600 requests to refill take a minute; one, 100 ms
  }
}

TEST_CASE("the rate-limited mode refuses limits that make no sense, naming the field") {
  const auto refused = [](void (*change)(LoopbackLimits&), const std::string& field) {
    LoopbackLimits limits;
    limits.requests_per_minute = 60;
    limits.tokens_per_minute = 6000;
    change(limits);
    try {
      LoopbackRateLimit rate(limits, {});
      return false;
    } catch (const std::invalid_argument& error) {
      return contains(error.what(), field);
    }
  };
  CHECK(refused([](LoopbackLimits& l) { l.requests_per_minute = 0; }, "requests_per_minute"));
  CHECK(refused([](LoopbackLimits& l) { l.tokens_per_minute = -1; }, "tokens_per_minute"));
  CHECK(refused([](LoopbackLimits& l) { l.requests_burst = 61; }, "requests_burst"));
  CHECK(refused([](LoopbackLimits& l) { l.tokens_burst = 0; }, "tokens_burst"));
  CHECK(refused([](LoopbackLimits& l) { l.default_max_tokens = -1; }, "default_max_tokens"));
  CHECK(refused([](LoopbackLimits& l) { l.latency = -1ms; }, "latency"));
  CHECK(refused([](LoopbackLimits& l) { l.token_interval = -1ms; }, "token_interval"));
  LoopbackProvider server;
  CHECK_THROWS_AS(server.enforce(LoopbackLimits{}), std::invalid_argument);
}

TEST_CASE("what a request costs: its body's tokens, and max_tokens or the default") {
  LoopbackLimits limits;
  limits.default_max_tokens = 7;
  const std::string with = R"({"model":"m","max_tokens" : 250,"messages":[]})";
  CHECK(llmretry::testing::loopback_usage(with, limits).prompt_tokens == llmretry::estimate_tokens(with));
  CHECK(llmretry::testing::loopback_usage(with, limits).completion_tokens == 250);
  CHECK(llmretry::testing::loopback_usage(R"({"max_completion_tokens":40})", limits).completion_tokens == 40);
  // A count beyond any model's, even beyond 64 bits, counts as 10^12: sums and refill times stay in range.
  CHECK(llmretry::testing::loopback_usage(R"({"max_tokens":18446744073709551616})", limits).completion_tokens ==
        1'000'000'000'000);
  CHECK(llmretry::testing::loopback_usage(R"({"max_tokens":18446744073709551616})", limits).tokens() > 0);
  for (const char* body : {"{}", R"({"max_tokens":"12"})", R"({"max_tokens":-3})", R"({"max_tokens")", ""}) {
    INFO(body);
    CHECK(llmretry::testing::loopback_usage(body, limits).completion_tokens == 7);
  }
}

TEST_CASE("the rate-limited loopback provider answers by itself, with OpenAI's headers and 429s") {
  LoopbackProvider server;
  LoopbackLimits limits;
  limits.requests_per_minute = 60;  // one a second
  limits.requests_burst = 2;
  limits.tokens_per_minute = 600'000;
  server.enforce(limits);
  auto client = client_of(server);
  const std::string body = R"({"model":"chat-small","max_tokens":20})";

  auto first = client.Post("/v1/chat/completions", body, "application/json");
  REQUIRE(first);
  CHECK(first->status == 200);
  const std::string usage =
      R"("usage":{"prompt_tokens":)" + std::to_string(llmretry::estimate_tokens(body)) + R"(,"completion_tokens":20,)";
  CHECK(contains(first->body, usage));
  CHECK(first->get_header_value("x-ratelimit-limit-requests") == "60");
  CHECK(first->get_header_value("x-ratelimit-remaining-requests") == "1");
  CHECK(first->get_header_value("x-ratelimit-limit-tokens") == "600000");
  CHECK(first->get_header_value("x-ratelimit-remaining-tokens") ==
        std::to_string(10'000 - llmretry::estimate_tokens(body) - 20));
  CHECK(first->has_header("x-ratelimit-reset-requests"));
  CHECK(first->has_header("x-ratelimit-reset-tokens"));

  server.then(LoopbackProvider::service_unavailable());  // an admitted request still gets the script first
  auto second = client.Post("/v1/chat/completions", body, "application/json");
  REQUIRE(second);
  CHECK(second->status == 503);
  CHECK(second->get_header_value("x-ratelimit-remaining-requests") == "0");

  auto third = client.Post("/v1/chat/completions", body, "application/json");
  REQUIRE(third);
  CHECK(third->status == 429);
  CHECK(contains(third->body, R"("code":"rate_limit_exceeded")"));
  CHECK(contains(third->body, R"("type":"requests")"));
  const auto wait = std::stoi(third->get_header_value("retry-after-ms"));
  CHECK(wait > 0);
  CHECK(wait <= 1000);
  CHECK(third->get_header_value("x-ratelimit-remaining-requests") == "0");

  CHECK(server.served() == 2);
  CHECK(server.refused() == 1);
  CHECK(server.request_count() == 3);
}

TEST_CASE("what a request asks for: \"stream\": true and stream_options.include_usage, found by scanning") {
  using llmretry::testing::detail::json_true;
  CHECK(json_true(R"({"model":"m","stream":true})", "stream"));
  CHECK(json_true(R"({"stream" : true , "max_tokens":2})", "stream"));
  CHECK(json_true(R"({"stream_options":{"include_usage":true},"stream":true})", "include_usage"));
  CHECK(json_true(R"({"content":"stream","stream":true})", "stream"));  // the first "stream" member
  for (const char* body : {"{}", R"({"stream":false})", R"({"stream":"true"})", R"({"stream":trueish})",
                           R"({"stream_options":{"include_usage":true}})", R"({"stream")", ""}) {
    INFO(body);
    CHECK_FALSE(json_true(body, "stream"));
  }
}

namespace {

/// A rate-limited loopback provider with room for every request of a test.
void serve_freely(LoopbackProvider& server) {
  LoopbackLimits limits;
  limits.requests_per_minute = 60'000;
  limits.tokens_per_minute = 6'000'000;
  server.enforce(limits);
}

/// Returns how many times `part` occurs in `text`.
std::size_t count_of(const std::string& text, const std::string& part) {
  std::size_t count = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++count;
  return count;
}

}  // namespace

TEST_CASE("the rate-limited mode streams its own answer when the body asks for it, as OpenAI does") {
  LoopbackProvider server;
  serve_freely(server);
  auto client = client_of(server);
  const std::string body = R"({"model":"chat-small","max_tokens":3,"stream":true})";
  const std::string prompt = std::to_string(llmretry::estimate_tokens(body));

  const auto streamed = client.Post("/v1/chat/completions", body, "application/json");
  REQUIRE(streamed);
  CHECK(streamed->status == 200);
  CHECK(contains(streamed->get_header_value("Content-Type"), "text/event-stream"));
  CHECK(streamed->has_header("x-ratelimit-remaining-requests"));
  const std::string& events = streamed->body;
  CHECK(count_of(events, "data: ") == 6);  // the role, 3 tokens, the finish, [DONE]
  CHECK(count_of(events, R"("object":"chat.completion.chunk")") == 5);
  CHECK(events.find(R"("delta":{"role":"assistant","content":""})") < events.find(R"("content":"loopback")"));
  CHECK(count_of(events, R"("delta":{"content":" loopback"})") == 2);
  CHECK(contains(events, R"("delta":{},"finish_reason":"stop"})"));
  CHECK_FALSE(contains(events, "usage"));
  CHECK(events.size() >= 14);
  CHECK(events.substr(events.size() - 14) == "data: [DONE]\n\n");

  SECTION("stream_options.include_usage: a usage chunk before [DONE]") {
    const std::string with_usage =
        R"({"model":"chat-small","max_tokens":3,"stream":true,"stream_options":{"include_usage":true}})";
    const auto answer = client.Post("/v1/chat/completions", with_usage, "application/json");
    REQUIRE(answer);
    const std::string usage = std::string(R"("choices":[],"usage":{"prompt_tokens":)")
                                  .append(std::to_string(llmretry::estimate_tokens(with_usage)))
                                  .append(R"(,"completion_tokens":3,)");
    CHECK(contains(answer->body, usage));
    CHECK(answer->body.find(usage) > answer->body.find(R"("finish_reason":"stop")"));
    CHECK(answer->body.find(usage) < answer->body.find("data: [DONE]"));
  }
  SECTION("\"stream\": false, or none: the whole chat completion") {
    const auto whole = client.Post("/v1/chat/completions", R"({"max_tokens":3,"stream":false})", "application/json");
    REQUIRE(whole);
    CHECK(contains(whole->get_header_value("Content-Type"), "application/json"));
    CHECK(contains(whole->body, R"("object":"chat.completion")"));
  }
  SECTION("the script still comes first") {
    server.then(LoopbackProvider::chat_completion("scripted"));
    const auto scripted = client.Post("/v1/chat/completions", body, "application/json");
    REQUIRE(scripted);
    CHECK(contains(scripted->body, "scripted"));
  }
  SECTION("over the limit: the same 429, not a stream") {
    LoopbackProvider limited;
    LoopbackLimits limits;
    limits.requests_per_minute = 60;
    limits.requests_burst = 1;
    limits.tokens_per_minute = 600'000;
    limited.enforce(limits);
    auto limited_client = client_of(limited);
    REQUIRE(limited_client.Post("/v1/chat/completions", body, "application/json")->status == 200);
    const auto refused = limited_client.Post("/v1/chat/completions", body, "application/json");
    REQUIRE(refused);
    CHECK(refused->status == 429);
    CHECK(contains(refused->body, R"("code":"rate_limit_exceeded")"));
    CHECK(refused->has_header("retry-after-ms"));
  }
}

TEST_CASE("the rate-limited mode answers /v1/messages as Anthropic does, whole or streamed") {
  LoopbackProvider server;
  serve_freely(server);
  auto client = client_of(server);
  SECTION("whole") {
    const std::string body = R"({"model":"claude","max_tokens":5,"messages":[]})";
    const auto answer = client.Post("/v1/messages", body, "application/json");
    REQUIRE(answer);
    CHECK(answer->status == 200);
    CHECK(contains(answer->body, R"("type":"message")"));
    CHECK(contains(answer->body, R"("stop_reason":"end_turn")"));
    CHECK(contains(answer->body, std::string(R"("usage":{"input_tokens":)")
                                     .append(std::to_string(llmretry::estimate_tokens(body)))
                                     .append(R"(,"output_tokens":5})")));
  }
  SECTION("streamed") {
    const auto answer =
        client.Post("/v1/messages", R"({"model":"claude","max_tokens":2,"stream":true})", "application/json");
    REQUIRE(answer);
    CHECK(answer->status == 200);
    CHECK(contains(answer->get_header_value("Content-Type"), "text/event-stream"));
    std::vector<std::string> names;
    for (auto at = answer->body.find("event: "); at != std::string::npos; at = answer->body.find("event: ", at + 1))
      names.push_back(answer->body.substr(at + 7, answer->body.find('\n', at) - at - 7));
    CHECK(names == std::vector<std::string>{"message_start", "content_block_start", "content_block_delta",
                                            "content_block_delta", "content_block_stop", "message_delta",
                                            "message_stop"});
    CHECK(contains(answer->body, R"("delta":{"type":"text_delta","text":"loopback"})"));
    CHECK(contains(answer->body, R"("usage":{"output_tokens":2})"));
    CHECK_FALSE(contains(answer->body, "[DONE]"));
  }
}

TEST_CASE("the rate-limited mode's latency: each admitted answer takes that long") {
  LoopbackProvider server;
  LoopbackLimits limits;
  limits.requests_per_minute = 6000;
  limits.tokens_per_minute = 600'000;
  limits.latency = 150ms;
  server.enforce(limits);
  auto client = client_of(server);
  const auto start = std::chrono::steady_clock::now();
  auto response = post(client);
  REQUIRE(response);
  CHECK(response->status == 200);
  CHECK(std::chrono::steady_clock::now() - start >= 150ms);
}

TEST_CASE("the rate-limited mode holds under concurrent clients") {
  LoopbackProvider server;
  LoopbackLimits limits;
  limits.requests_per_minute = 60;  // one a second after the first five
  limits.requests_burst = 5;
  limits.tokens_per_minute = 600'000;
  server.enforce(limits);
  std::atomic<int> ok{0};
  std::atomic<int> too_many{0};
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> clients;
  for (int t = 0; t < 8; ++t) {
    clients.emplace_back([&] {
      auto client = client_of(server);
      for (int i = 0; i < 5; ++i) {
        auto response = post(client);
        if (response && response->status == 200) ++ok;
        if (response && response->status == 429) ++too_many;
      }
    });
  }
  for (auto& client : clients) client.join();
  const auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(ok + too_many == 40);
  CHECK(server.served() == ok);
  CHECK(server.refused() == too_many);
  CHECK(ok >= 5);
  CHECK(ok <= 5 + static_cast<int>(seconds) + 1);
}

TEST_CASE("the loopback provider serves as many connections at once as it has threads") {
  constexpr int clients = 24;  // more than cpp-httplib's default of 8 threads on a small machine
  auto server = std::make_unique<LoopbackProvider>(0, static_cast<std::size_t>(clients));
  for (int i = 0; i < clients; ++i) server->then(LoopbackProvider::hang(30s));  // each holds its thread
  std::atomic<int> answered{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i)
    threads.emplace_back([&, base_url = server->base_url()] {
      httplib::Client client(base_url);
      client.set_read_timeout(60s);
      if (client.Post("/v1/chat/completions", "{}", "application/json")) ++answered;
    });
  // Every request arrives while the others hang; with fewer threads, some would wait for a thread.
  const auto give_up = std::chrono::steady_clock::now() + 20s;
  while (server->request_count() < clients && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(10ms);
  CHECK(server->request_count() == clients);
  server.reset();  // cuts the hangs short: every client gets its answer
  for (auto& thread : threads) thread.join();
  CHECK(answered == clients);
}
