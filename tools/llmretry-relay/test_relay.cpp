// End to end: loopback providers run in this process, llmretry-relay as a child process in front of them;
// the tests talk to the relay over HTTP (and raw sockets for malformed or slow clients).
#include <future>

#include "test_support.hpp"

using namespace relay_test;

TEST_CASE("the three routes are forwarded with the relay's key, and the answer comes back") {
  LoopbackProvider provider;
  serve_freely(provider);
  Relay relay("routes", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url() + "/v1"});
  relay.started();
  for (const std::string path : {"/v1/chat/completions", "/v1/responses", "/v1/embeddings"}) {
    INFO(path);
    const auto answer = post(relay, path, chat(), {{"Authorization", "Bearer client-key-not-forwarded"}});
    CHECK(answer->status == 200);
    CHECK_THAT(answer->body, llmretry_catch::contains("loopback"));
    CHECK_THAT(answer->get_header_value("Content-Type"), llmretry_catch::contains("application/json"));
    CHECK(answer->has_header("x-ratelimit-remaining-requests"));
    const auto received = provider.requests().back();
    CHECK(received.path == path);
    CHECK(received.header("Authorization") == std::string("Bearer ") + upstream_key);
    CHECK(nlohmann::json::parse(received.body) == nlohmann::json::parse(chat()));
  }
  CHECK(relay.stop() == 0);
  CHECK(relay.out().find(upstream_key) == std::string::npos);
  CHECK(relay.err().find(upstream_key) == std::string::npos);
}

TEST_CASE("an upstream 429 with Retry-After is retried: the client sees 200") {
  LoopbackProvider provider;
  provider.then(LoopbackProvider::rate_limit_exceeded("requests", 50ms))
      .then(LoopbackProvider::chat_completion("after the wait"));
  Relay relay("retry_429", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url()});
  relay.started();
  const auto answer = post(relay, "/v1/chat/completions", chat());
  CHECK(answer->status == 200);
  CHECK_THAT(answer->body, llmretry_catch::contains("after the wait"));
  CHECK(provider.request_count() == 2);
}

TEST_CASE("a primary failing with 5xx falls back to the --fallback URL") {
  LoopbackProvider primary;
  LoopbackProvider fallback;
  for (int i = 0; i < 3; ++i) primary.then(LoopbackProvider::service_unavailable());
  fallback.then(LoopbackProvider::chat_completion("from the fallback"));
  Relay relay("fallback",
              {"--listen", "127.0.0.1:0", "--upstream", primary.base_url(), "--fallback", fallback.base_url() + "/v1"});
  relay.started();
  const auto answer = post(relay, "/v1/chat/completions", chat());
  CHECK(answer->status == 200);
  CHECK_THAT(answer->body, llmretry_catch::contains("from the fallback"));
  CHECK(primary.request_count() >= 1);
  CHECK(fallback.request_count() == 1);
  const auto metrics = relay.client().Get("/metrics");
  REQUIRE(metrics);
  CHECK_THAT(metrics->body,
             llmretry_catch::contains(
                 R"(llm_fallbacks_total{from_provider="upstream",to_provider="fallback-1",reason="provider_5xx"} 1)"));
}

TEST_CASE("the client's own 4xx comes back as the upstream sent it, unretried; a give-up on 5xx is a 502") {
  LoopbackProvider provider;
  ScriptedResponse refused_key;  // as a provider does, it echoes the key it refused
  refused_key.status = 401;
  refused_key.body = std::string(R"({"error":{"message":"Incorrect API key provided: )") + upstream_key +
                     R"(","code":"invalid_api_key"}})";
  provider.then(refused_key);
  Relay relay("client_error", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url()});
  relay.started();
  const auto echoed = post(relay, "/v1/chat/completions", chat());
  CHECK(echoed->status == 401);
  CHECK(echoed->body.find(upstream_key) == std::string::npos);
  CHECK_THAT(echoed->body, llmretry_catch::contains("Incorrect API key provided: [redacted]"));

  provider.then(LoopbackProvider::context_length_exceeded());
  const auto answer = post(relay, "/v1/chat/completions", chat());
  CHECK(answer->status == 400);
  CHECK(error_of(answer->body).at("code") == "context_length_exceeded");
  CHECK(provider.request_count() == 2);

  for (int i = 0; i < 3; ++i) provider.then(LoopbackProvider::service_unavailable());
  const auto gave_up = post(relay, "/v1/chat/completions", chat());
  CHECK(gave_up->status == 502);
  const auto error = error_of(gave_up->body);
  CHECK(error.at("code") == "attempts_exhausted");
  CHECK_THAT(error.at("message").get<std::string>(), llmretry_catch::contains("attempts_exhausted"));
  CHECK(gave_up->body.find(upstream_key) == std::string::npos);
  CHECK(gave_up->get_header_value("x-should-retry") == "false");  // retried here: an SDK must not retry again

  ScriptedResponse timed_out;  // retried by the relay too: passed back as it is, said to be final
  timed_out.status = 408;
  timed_out.body = R"({"error":{"message":"request timeout","code":"timeout"}})";
  for (int i = 0; i < 3; ++i) provider.then(timed_out);
  const auto gave_up_408 = post(relay, "/v1/chat/completions", chat());
  CHECK(gave_up_408->status == 408);
  CHECK(gave_up_408->get_header_value("x-should-retry") == "false");
}

TEST_CASE("an upstream that echoes its key, in any case, in headers, a 200 body or a stream: none reaches the client") {
  std::string upper = upstream_key;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  LoopbackProvider provider;
  ScriptedResponse echoed = LoopbackProvider::chat_completion(std::string("your key is ") + upstream_key);
  echoed.headers = {{"x-request-id", std::string("req-") + upstream_key},
                    {"x-ratelimit-limit-requests", upper},
                    {"retry-after-ms", upstream_key}};
  // A key spelled with JSON escapes: a JSON parser reads it back.
  std::string escaped;
  for (const char c : std::string(upstream_key)) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "\\u%04x", static_cast<unsigned>(c));
    escaped += hex;
  }
  ScriptedResponse escaped_echo;
  escaped_echo.body = R"({"id":"1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant",)"
                      R"("content":")" +
                      escaped + R"("},"finish_reason":"stop"}]})";
  provider.then(escaped_echo);
  provider.then(echoed);
  ScriptedResponse echoed_stream = LoopbackProvider::stream({"key ", upper, " again"});
  echoed_stream.headers = {{"x-request-id", upper}};
  provider.then(echoed_stream);
  for (int i = 0; i < 3; ++i) {
    ScriptedResponse limited = LoopbackProvider::rate_limit_exceeded("requests", 1ms);
    limited.headers.emplace_back("x-request-id", upstream_key);
    provider.then(limited);
  }
  Relay relay("echoed_key", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url()});
  relay.started();
  const auto decoded = post(relay, "/v1/chat/completions", chat());
  REQUIRE(decoded->status == 200);
  CHECK(nlohmann::json::parse(decoded->body).dump().find(upstream_key) == std::string::npos);
  CHECK_THAT(decoded->body, llmretry_catch::contains("[redacted]"));
  const auto whole = post(relay, "/v1/chat/completions", chat(), {{"Idempotency-Key", "echo"}});
  REQUIRE(whole->status == 200);
  const auto leaks = [&](const std::string& text) {
    return text.find(upstream_key) != std::string::npos || text.find(upper) != std::string::npos;
  };
  CHECK_FALSE(leaks(whole->body));
  CHECK_THAT(whole->body, llmretry_catch::contains("your key is [redacted]"));
  for (const auto& header : whole->headers) CHECK_FALSE(leaks(header.second));
  CHECK(whole->get_header_value("x-request-id") == "req-[redacted]");
  CHECK_FALSE(whole->has_header("x-should-retry"));
  const auto replayed = post(relay, "/v1/chat/completions", chat(), {{"Idempotency-Key", "echo"}});
  CHECK(replayed->get_header_value("Idempotent-Replayed") == "true");
  CHECK_FALSE(leaks(replayed->body));
  for (const auto& header : replayed->headers) CHECK_FALSE(leaks(header.second));
  CHECK(replayed->get_header_value("x-request-id") == "req-[redacted]");

  auto body = nlohmann::json::parse(chat());
  body["stream"] = true;
  const auto streamed = relay.client().Post("/v1/chat/completions", {}, body.dump(), "application/json");
  REQUIRE(streamed);
  CHECK(streamed->status == 200);
  CHECK_FALSE(leaks(streamed->body));
  CHECK_THAT(streamed->body, llmretry_catch::contains("[redacted]"));
  for (const auto& header : streamed->headers) CHECK_FALSE(leaks(header.second));
  CHECK(streamed->get_header_value("x-request-id") == "[redacted]");

  const auto limited = post(relay, "/v1/chat/completions", chat());  // 429 three times: the relay gives up
  CHECK(limited->status == 429);
  for (const auto& header : limited->headers) CHECK_FALSE(leaks(header.second));
  CHECK(limited->get_header_value("x-should-retry") == "false");
}

TEST_CASE("Idempotency-Key: a duplicate gets the stored answer, a reuse with another body 422, none: each sent") {
  LoopbackProvider provider;
  serve_freely(provider);
  Relay relay("idempotency", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url()});
  relay.started();

  const auto first = post(relay, "/v1/chat/completions", chat(), {{"Idempotency-Key", "order-1"}});
  CHECK(first->status == 200);
  CHECK_FALSE(first->has_header("Idempotent-Replayed"));
  // The same payload, its keys in another order: the same request.
  const std::string reordered = nlohmann::json::parse(chat()).dump(2);
  const auto again = post(relay, "/v1/chat/completions", reordered, {{"Idempotency-Key", "order-1"}});
  CHECK(again->status == 200);
  CHECK(again->get_header_value("Idempotent-Replayed") == "true");
  CHECK(again->body == first->body);
  // With the headers it was stored with.
  REQUIRE(first->has_header("x-ratelimit-remaining-requests"));
  CHECK(again->get_header_value("x-ratelimit-remaining-requests") ==
        first->get_header_value("x-ratelimit-remaining-requests"));
  CHECK_THAT(again->get_header_value("Content-Type"), llmretry_catch::contains("application/json"));
  CHECK(provider.request_count() == 1);
  CHECK(provider.requests().back().header("Idempotency-Key") == std::string("order-1"));

  const auto other = post(relay, "/v1/chat/completions", chat("loopback", "Another"), {{"Idempotency-Key", "order-1"}});
  CHECK(other->status == 422);
  CHECK(error_of(other->body).at("code") == "idempotency_key_reused");
  CHECK(provider.request_count() == 1);

  CHECK(post(relay, "/v1/chat/completions", chat())->status == 200);
  CHECK(post(relay, "/v1/chat/completions", chat())->status == 200);
  CHECK(provider.request_count() == 3);
  CHECK_FALSE(provider.requests().back().header("Idempotency-Key").has_value());

  const auto metrics = relay.client().Get("/metrics");
  REQUIRE(metrics);
  CHECK_THAT(metrics->body, llmretry_catch::contains(R"(llm_duplicate_suppressed_total{task_type="chat"} 1)"));
}

TEST_CASE("an answer over 1 MiB is not stored under its Idempotency-Key: the key is freed instead") {
  LoopbackProvider provider;
  const auto large = LoopbackProvider::chat_completion(std::string((std::size_t{1} << 20) + 1, 'a'));
  provider.then(large).then(large);
  Relay relay("idempotency_large", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url()});
  relay.started();
  CHECK(post(relay, "/v1/chat/completions", chat(), {{"Idempotency-Key", "large"}})->status == 200);
  const auto again = post(relay, "/v1/chat/completions", chat(), {{"Idempotency-Key", "large"}});
  CHECK(again->status == 200);
  CHECK_FALSE(again->has_header("Idempotent-Replayed"));
  CHECK(provider.request_count() == 2);
}

TEST_CASE("16 concurrent requests with one Idempotency-Key reach the upstream once") {
  LoopbackProvider provider;
  serve_freely(provider, 300ms);
  Relay relay("idempotency_concurrent", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url()});
  relay.started();
  std::vector<int> statuses(16);
  std::vector<std::thread> clients;
  for (std::size_t i = 0; i < statuses.size(); ++i)
    clients.emplace_back([&, i] {
      auto result =
          relay.client().Post("/v1/chat/completions", {{"Idempotency-Key", "same"}}, chat(), "application/json");
      statuses[i] = result ? result->status : -1;
    });
  for (auto& client : clients) client.join();
  CHECK(provider.request_count() == 1);
  int answered = 0;
  for (const int status : statuses) {
    CHECK((status == 200 || status == 409));
    answered += status == 200 ? 1 : 0;
  }
  CHECK(answered >= 1);
  // Once the first has ended, the key replays.
  const auto replay = post(relay, "/v1/chat/completions", chat(), {{"Idempotency-Key", "same"}});
  CHECK(replay->get_header_value("Idempotent-Replayed") == "true");
  CHECK(provider.request_count() == 1);
}

TEST_CASE("--coalesce-wait: duplicates of a request in flight wait for its answer instead of a 409") {
  LoopbackProvider provider;
  serve_freely(provider, 400ms);
  Relay relay("coalesce", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url(), "--coalesce-wait", "10s"});
  relay.started();
  std::vector<int> statuses(8);
  std::vector<std::string> replayed(8);
  std::vector<std::thread> clients;
  for (std::size_t i = 0; i < statuses.size(); ++i)
    clients.emplace_back([&, i] {
      auto result =
          relay.client().Post("/v1/chat/completions", {{"Idempotency-Key", "shared"}}, chat(), "application/json");
      statuses[i] = result ? result->status : -1;
      replayed[i] = result ? result->get_header_value("Idempotent-Replayed") : "";
    });
  while (provider.request_count() == 0) std::this_thread::sleep_for(1ms);
  // Another body under the same key is refused at once, not made to wait.
  CHECK(post(relay, "/v1/chat/completions", chat("loopback", "Other"), {{"Idempotency-Key", "shared"}})->status == 422);
  for (auto& client : clients) client.join();
  CHECK(statuses == std::vector<int>(8, 200));
  CHECK(std::count(replayed.begin(), replayed.end(), "true") == 7);
  CHECK(provider.request_count() == 1);
}

TEST_CASE("--coalesce-wait shorter than the first request: the duplicate gets 409 once it has waited") {
  LoopbackProvider provider;
  serve_freely(provider, 2s);
  Relay relay("coalesce_short",
              {"--listen", "127.0.0.1:0", "--upstream", provider.base_url(), "--coalesce-wait", "200ms"});
  relay.started();
  std::thread first([&] {
    relay.client().Post("/v1/chat/completions", {{"Idempotency-Key", "k"}}, chat(), "application/json");
  });
  while (provider.request_count() == 0) std::this_thread::sleep_for(1ms);
  const auto duplicate = post(relay, "/v1/chat/completions", chat(), {{"Idempotency-Key", "k"}});
  CHECK(duplicate->status == 409);
  CHECK_THAT(error_of(duplicate->body).at("message").get<std::string>(), llmretry_catch::contains("--coalesce-wait"));
  first.join();
  CHECK(provider.request_count() == 1);
}

TEST_CASE("a give-up on 5xx frees the Idempotency-Key: the client's retry is sent again") {
  LoopbackProvider provider;
  for (int i = 0; i < 3; ++i) provider.then(LoopbackProvider::service_unavailable());
  provider.then(LoopbackProvider::chat_completion("second try"));
  Relay relay("idempotency_release", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url()});
  relay.started();
  CHECK(post(relay, "/v1/chat/completions", chat(), {{"Idempotency-Key", "k"}})->status == 502);
  const auto retry = post(relay, "/v1/chat/completions", chat(), {{"Idempotency-Key", "k"}});
  CHECK(retry->status == 200);
  CHECK_FALSE(retry->has_header("Idempotent-Replayed"));
  CHECK(provider.request_count() == 4);
}

TEST_CASE("a request longer than the idempotency lease keeps its key: a duplicate meanwhile gets 409") {
  LoopbackProvider provider;
  // Renewed every third of it by the relay's timer: scaled (a bound on how late that timer may be).
  const std::chrono::milliseconds lease = llmretry_test::scaled(300ms);
  ScriptedResponse slow = LoopbackProvider::chat_completion("slow");
  slow.delay = 3 * lease + llmretry_test::scaled(1000ms);
  provider.then(slow);
  provider.then(LoopbackProvider::chat_completion("sent twice"));
  Relay relay("lease", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url(), "--idempotency-lease",
                        std::to_string(lease.count()) + "ms"});
  relay.started();
  int first = 0;
  std::thread client([&] {
    auto result =
        relay.client().Post("/v1/chat/completions", {{"Idempotency-Key", "long"}}, chat(), "application/json");
    first = result ? result->status : -1;
  });
  while (provider.request_count() == 0) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(3 * lease);  // only a renewed claim still holds the key
  const auto duplicate = post(relay, "/v1/chat/completions", chat(), {{"Idempotency-Key", "long"}});
  client.join();
  CHECK(first == 200);
  CHECK(duplicate->status == 409);
  CHECK(provider.request_count() == 1);
}

TEST_CASE("a streamed request holds its Idempotency-Key while it streams, and frees it at the end") {
  LoopbackProvider provider;
  ScriptedResponse slow = LoopbackProvider::stream({"a", "b"});
  slow.chunk_interval = llmretry_test::scaled(300ms) + 300ms;  // the duplicate comes while it streams
  provider.then(slow);
  provider.then(LoopbackProvider::stream({"again"}));
  Relay relay("stream_key", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url()});
  relay.started();
  auto body = nlohmann::json::parse(chat());
  body["stream"] = true;
  const httplib::Headers key{{"Idempotency-Key", "streamed"}};
  int first = 0;
  std::thread client([&] {
    auto result = relay.client().Post("/v1/chat/completions", key, body.dump(), "application/json");
    first = result ? result->status : -1;
  });
  while (provider.request_count() == 0) std::this_thread::sleep_for(1ms);
  const auto duplicate = post(relay, "/v1/chat/completions", body.dump(), key);
  client.join();
  CHECK(duplicate->status == 409);
  CHECK(first == 200);
  // Never stored: the retry is sent again.
  const auto retry = post(relay, "/v1/chat/completions", body.dump(), key);
  CHECK(retry->status == 200);
  CHECK_FALSE(retry->has_header("Idempotent-Replayed"));
  CHECK(provider.request_count() == 2);
}

TEST_CASE("a client gone in the middle of a stream ends its upstream call, and frees its Idempotency-Key") {
  LoopbackProvider provider;
  // 8 events 3 s apart: left alone, the upstream call lasts 21 s, longer than the test waits for the key.
  ScriptedResponse slow = LoopbackProvider::stream({"a", "b", "c", "d", "e", "f", "g", "h"});
  slow.chunk_interval = 3000ms;
  provider.then(slow);
  provider.then(LoopbackProvider::stream({"again"}));
  Relay relay("stream_gone", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url()});
  relay.started();
  auto body = nlohmann::json::parse(chat());
  body["stream"] = true;
  const httplib::Headers key{{"Idempotency-Key", "gone"}};

  // The client reads the first event, then goes away; the relay learns it at its next write (3 s).
  httplib::Request request;
  request.method = "POST";
  request.path = "/v1/chat/completions";
  request.body = body.dump();
  request.headers = key;
  request.set_header("Content-Type", "application/json");
  std::string received;
  request.content_receiver = [&](const char* data, std::size_t size, std::uint64_t, std::uint64_t) {
    received.append(data, size);
    return false;
  };
  httplib::Response response;
  httplib::Error error = httplib::Error::Success;
  auto client = relay.client();
  CHECK_FALSE(client.send(request, response, error));
  CHECK_THAT(received, llmretry_catch::contains(R"("content":"a")"));

  // Once the upstream call has ended, the key is free: the retry is sent.
  int status = 409;
  for (int i = 0; i < 200 && status == 409; ++i) {
    std::this_thread::sleep_for(50ms);
    status = post(relay, "/v1/chat/completions", body.dump(), key)->status;
  }
  CHECK(status == 200);
  CHECK(provider.request_count() == 2);
}

TEST_CASE("a number out of range in the body is refused as invalid JSON, with no trace of the exception") {
  LoopbackProvider provider;
  serve_freely(provider);
  Relay relay("out_of_range", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url()});
  relay.started();
  const auto answer = post(relay, "/v1/chat/completions", R"({"model":"m","x":1e400})");
  CHECK(answer->status == 400);
  CHECK(error_of(answer->body).at("code") == "invalid_json");
  CHECK_FALSE(answer->has_header("EXCEPTION_WHAT"));
  CHECK(provider.request_count() == 0);
  CHECK(relay.client().Get("/healthz")->status == 200);
}

TEST_CASE("/metrics stays bounded whatever models clients name") {
  LoopbackProvider provider;
  serve_freely(provider);
  const auto model_labels = [](const std::string& text) {
    std::set<std::string> labels;
    constexpr std::string_view prefix = "model=\"";
    for (auto at = text.find(prefix); at != std::string::npos; at = text.find(prefix, at)) {
      at += prefix.size();
      labels.insert(text.substr(at, text.find('"', at) - at));
    }
    return labels;
  };

  SECTION("without a model table: the first 100 names, cut to 128 bytes, then \"other\"") {
    Relay relay("metrics_bounded", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url()});
    relay.started();
    auto client = relay.client();
    client.set_keep_alive(true);
    CHECK(client.Post("/v1/chat/completions", chat(std::string(1000, 'x')), "application/json")->status == 200);
    for (int i = 0; i < 1000; ++i)
      REQUIRE(client.Post("/v1/chat/completions", chat("model-" + std::to_string(i)), "application/json"));
    const auto labels = model_labels(client.Get("/metrics")->body);
    CHECK(labels.size() <= 101);
    CHECK(labels.count("other") == 1);
    CHECK(labels.count(std::string(128, 'x')) == 1);
    for (const auto& label : labels) CHECK(label.size() <= 128);
  }
  SECTION("with a model table: a model it does not list is \"unknown\"") {
    const auto dir = work_dir("metrics_table_config");
    std::ofstream(dir / "models.json") << R"({"models": {"loopback": {}}})";
    Relay relay("metrics_table", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url(), "--config",
                                  (dir / "models.json").string()});
    relay.started();
    auto client = relay.client();
    for (int i = 0; i < 50; ++i)
      CHECK(client.Post("/v1/chat/completions", chat("nowhere-" + std::to_string(i)), "application/json")->status ==
            404);
    CHECK(client.Post("/v1/chat/completions", chat(), "application/json")->status == 200);
    CHECK(model_labels(client.Get("/metrics")->body) == std::set<std::string>{"loopback", "unknown"});
  }
}

TEST_CASE("backpressure: past --rpm and --max-wait the relay answers 429 with Retry-After and keeps serving") {
  LoopbackProvider provider;
  serve_freely(provider);
  Relay relay("backpressure",
              {"--listen", "127.0.0.1:0", "--upstream", provider.base_url(), "--rpm", "1", "--max-wait", "100ms"});
  relay.started();
  int refused = 0;
  for (int i = 0; i < 4; ++i) {
    const auto answer = post(relay, "/v1/chat/completions", chat());
    if (i == 0) CHECK(answer->status == 200);
    if (answer->status != 429) continue;
    ++refused;
    const auto error = error_of(answer->body);
    CHECK(error.at("code") == "no_capacity");
    CHECK_FALSE(answer->has_header("x-should-retry"));  // the relay's own refusal: come back after Retry-After
    REQUIRE(answer->has_header("Retry-After"));
    CHECK(std::stoi(answer->get_header_value("Retry-After")) >= 1);
  }
  CHECK(refused == 3);  // the next request of the minute is 60 s away, far past --max-wait
  CHECK(provider.request_count() == 1);
  const auto health = relay.client().Get("/healthz");
  REQUIRE(health);
  CHECK(health->status == 200);
  const auto metrics = relay.client().Get("/metrics");
  REQUIRE(metrics);
  CHECK_THAT(metrics->body, llmretry_catch::contains(
                                R"(llm_requests_total{provider="upstream",model="loopback",status="no_capacity"} )"));
  CHECK_THAT(metrics->body,
             llmretry_catch::contains(
                 R"(llm_rate_limit_hits_total{provider="upstream",model="loopback",limit_type="unknown"} )"));
}

TEST_CASE("a request whose cost exceeds a limit is a 400, not a rate-limit hit: it could never be sent") {
  LoopbackProvider provider;
  serve_freely(provider);
  Relay relay("never_fits", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url(), "--tpm", "10000"});
  relay.started();
  auto body = nlohmann::json::parse(chat());
  body["max_tokens"] = 16000;
  const auto answer = post(relay, "/v1/chat/completions", body.dump());
  CHECK(answer->status == 400);
  CHECK(error_of(answer->body).at("code") == "request_too_large_for_limit");
  CHECK_FALSE(answer->has_header("Retry-After"));
  CHECK(provider.request_count() == 0);
  const auto metrics = relay.client().Get("/metrics");
  REQUIRE(metrics);
  CHECK(metrics->body.find("llm_rate_limit_hits_total{") == std::string::npos);
  CHECK(post(relay, "/v1/chat/completions", chat())->status == 200);
}

TEST_CASE("past --max-requests, the relay answers 503 with a computed Retry-After at once, not a queue") {
  std::optional<LoopbackProvider> provider(std::in_place);
  ScriptedResponse held = LoopbackProvider::chat_completion("held");
  held.delay = 60s;
  provider->then(held).then(held);
  Relay relay("busy", {"--listen", "127.0.0.1:0", "--upstream", provider->base_url(), "--max-requests", "2"});
  relay.started();
  std::vector<int> held_statuses(2);
  std::vector<std::thread> clients;
  for (std::size_t i = 0; i < held_statuses.size(); ++i)
    clients.emplace_back([&, i] {
      auto result = relay.client().Post("/v1/chat/completions", chat(), "application/json");
      held_statuses[i] = result ? result->status : -1;
    });
  while (provider->request_count() < 2) std::this_thread::sleep_for(1ms);
  const auto refused = post(relay, "/v1/chat/completions", chat());
  CHECK(refused->status == 503);
  CHECK(refused->get_header_value("Retry-After") == "1");  // no request has ended yet: the initial guess
  CHECK(error_of(refused->body).at("code") == "relay_busy");
  CHECK(relay.client().Get("/healthz")->status == 200);
  provider.reset();  // the held answers go out now
  for (auto& client : clients) client.join();
  CHECK(held_statuses == std::vector<int>{200, 200});
}

TEST_CASE("bad input is refused with a clear error, and the relay keeps serving") {
  LoopbackProvider provider;
  serve_freely(provider);
  Relay relay("bad_input", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url(), "--max-body", "4096"});
  relay.started();

  // A slow client sends half a request and stalls while the others are served.
  const int slow =
      send_raw(relay.port(), "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{");

  const auto huge = post(relay, "/v1/chat/completions", std::string(10'000, ' '));
  CHECK(huge->status == 413);
  CHECK(error_of(huge->body).at("code") == "body_too_large");

  const auto broken = post(relay, "/v1/chat/completions", R"({"model": "loopback", )");
  CHECK(broken->status == 400);
  CHECK(error_of(broken->body).at("code") == "invalid_json");
  CHECK_THAT(error_of(broken->body).at("message").get<std::string>(), llmretry_catch::contains("not valid JSON"));

  const auto array = post(relay, "/v1/chat/completions", "[1, 2]");
  CHECK(array->status == 400);
  CHECK_THAT(error_of(array->body).at("message").get<std::string>(), llmretry_catch::contains("must be a JSON object"));

  const auto deep = post(relay, "/v1/chat/completions", R"({"model": "loopback", "a": )" + std::string(4000, '['),
                         {{"Idempotency-Key", "deep"}});
  CHECK(deep->status == 400);
  CHECK_THAT(error_of(deep->body).at("message").get<std::string>(), llmretry_catch::contains("deeper than 64"));

  const auto no_model = post(relay, "/v1/chat/completions", R"({"messages": []})");
  CHECK(no_model->status == 400);
  CHECK(error_of(no_model->body).at("message") == "model: missing");
  const auto number_model = post(relay, "/v1/chat/completions", R"({"model": 4})");
  CHECK(number_model->status == 400);
  CHECK(error_of(number_model->body).at("code") == "invalid_model");

  const auto unknown = post(relay, "/v1/models/delete", chat());
  CHECK(unknown->status == 404);
  const auto wrong_method = relay.client().Get("/v1/chat/completions");
  REQUIRE(wrong_method);
  CHECK(wrong_method->status == 405);
  CHECK(wrong_method->get_header_value("Allow") == "POST");

  // A CR inside a header value: refused, and nothing of it reaches the upstream.
  const std::string body = chat();
  const int injected = send_raw(relay.port(),
                                "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nIdempotency-Key: a\rX-Injected: 1\r\n"
                                "Content-Type: application/json\r\nContent-Length: " +
                                    std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
  const std::string injected_answer = read_raw(injected);
  ::close(injected);
  CHECK(injected_answer.rfind("HTTP/1.1 400", 0) == 0);
  const auto bad_key = post(relay, "/v1/chat/completions", chat(), {{"Idempotency-Key", "has space"}});
  CHECK(bad_key->status == 400);
  CHECK(error_of(bad_key->body).at("code") == "invalid_idempotency_key");
  for (const auto& request : provider.requests()) {
    CHECK_FALSE(request.header("X-Injected").has_value());
    CHECK_FALSE(request.header("Idempotency-Key").has_value());
  }
  CHECK(provider.request_count() == 0);

  const auto health = relay.client().Get("/healthz");
  REQUIRE(health);
  CHECK(health->status == 200);
  CHECK(post(relay, "/v1/chat/completions", chat())->status == 200);
  ::close(slow);
  CHECK(relay.stop() == 0);
}

TEST_CASE("beyond loopback a client key is required: without it the relay refuses to start, with it clients need it") {
  LoopbackProvider provider;
  serve_freely(provider);
  Relay refused("open_without_key", {"--listen", "0.0.0.0:0", "--upstream", provider.base_url()});
  CHECK(refused.wait() == 2);
  CHECK_THAT(refused.err(), llmretry_catch::contains("LLMRETRY_RELAY_CLIENT_KEY"));

  Relay relay("open_with_key", {"--listen", "0.0.0.0:0", "--upstream", provider.base_url()},
              {"LLMRETRY_RELAY_CLIENT_KEY=client-key-42"});
  relay.started();
  const auto missing = post(relay, "/v1/chat/completions", chat());
  CHECK(missing->status == 401);
  CHECK(error_of(missing->body).at("code") == "invalid_api_key");
  CHECK(post(relay, "/v1/chat/completions", chat(), {{"Authorization", "Bearer client-key-41"}})->status == 401);
  CHECK(post(relay, "/v1/chat/completions", chat(), {{"Authorization", "client-key-42"}})->status == 401);
  CHECK(relay.client().Get("/metrics")->status == 401);
  const auto right = post(relay, "/v1/chat/completions", chat(), {{"Authorization", "Bearer client-key-42"}});
  CHECK(right->status == 200);
  CHECK(provider.request_count() == 1);
  CHECK(provider.requests().back().header("Authorization") == std::string("Bearer ") + upstream_key);
  CHECK(relay.client().Get("/healthz")->status == 200);
  const auto metrics = relay.client().Get("/metrics", {{"Authorization", "Bearer client-key-42"}});
  REQUIRE(metrics);
  CHECK(metrics->status == 200);
  CHECK(metrics->body.find(upstream_key) == std::string::npos);
  CHECK(relay.stop() == 0);
  CHECK(relay.out().find(upstream_key) == std::string::npos);
  CHECK(relay.err().find(upstream_key) == std::string::npos);
}

TEST_CASE("LLMRETRY_RELAY_METRICS_KEY is the only key that reads /metrics, and no client key") {
  LoopbackProvider provider;
  serve_freely(provider);
  Relay same("metrics_key_same", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url()},
             {"LLMRETRY_RELAY_CLIENT_KEY=shared-key", "LLMRETRY_RELAY_METRICS_KEY=shared-key"});
  CHECK(same.wait() == 2);
  CHECK_THAT(same.err(), llmretry_catch::contains("LLMRETRY_RELAY_METRICS_KEY: the same key as"));

  Relay relay("metrics_key", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url()},
              {"LLMRETRY_RELAY_CLIENT_KEY=client-key", "LLMRETRY_RELAY_METRICS_KEY=scrape-key"});
  relay.started();
  const auto metrics = [&](const httplib::Headers& headers) {
    auto result = relay.client().Get("/metrics", headers);
    REQUIRE(result);
    return result;
  };
  const auto refused = metrics({{"Authorization", "Bearer client-key"}});
  CHECK(refused->status == 401);
  CHECK_THAT(error_of(refused->body).at("message").get<std::string>(),
             llmretry_catch::contains("LLMRETRY_RELAY_METRICS_KEY"));
  CHECK(metrics({})->status == 401);
  CHECK(metrics({{"Authorization", "Bearer scrape-key"}, {"x-api-key", "client-key"}})->status == 401);
  const auto scraped = metrics({{"Authorization", "Bearer scrape-key"}});
  CHECK(scraped->status == 200);
  CHECK_THAT(scraped->body, llmretry_catch::contains("llm_relay_connections"));
  CHECK(metrics({{"x-api-key", "scrape-key"}})->status == 200);
  CHECK(post(relay, "/v1/chat/completions", chat(), {{"Authorization", "Bearer scrape-key"}})->status == 401);
  CHECK(post(relay, "/v1/chat/completions", chat(), {{"Authorization", "Bearer client-key"}})->status == 200);
  CHECK(provider.request_count() == 1);
}

TEST_CASE("/metrics counts the traffic with its labels") {
  LoopbackProvider provider;
  provider.then(LoopbackProvider::rate_limit_exceeded("requests", 20ms))
      .then(LoopbackProvider::chat_completion("one", {10, 5}))
      .then(LoopbackProvider::chat_completion("two", {10, 5}));
  Relay relay("metrics", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url()});
  relay.started();
  CHECK(post(relay, "/v1/chat/completions", chat())->status == 200);
  CHECK(post(relay, "/v1/chat/completions", chat(), {{"Idempotency-Key", "m"}})->status == 200);
  CHECK(post(relay, "/v1/chat/completions", chat(), {{"Idempotency-Key", "m"}})->status == 200);
  CHECK(post(relay, "/v1/chat/completions", "{")->status == 400);
  const auto metrics = relay.client().Get("/metrics");
  REQUIRE(metrics);
  CHECK(metrics->status == 200);
  CHECK_THAT(metrics->get_header_value("Content-Type"), llmretry_catch::contains("text/plain; version=0.0.4"));
  const std::string& text = metrics->body;
  INFO(text);
  CHECK_THAT(
      text, llmretry_catch::contains(R"(llm_requests_total{provider="upstream",model="loopback",status="success"} 2)"));
  CHECK_THAT(text,
             llmretry_catch::contains(R"(llm_requests_total{provider="relay",model="loopback",status="replayed"} 1)"));
  CHECK_THAT(text, llmretry_catch::contains(R"(llm_requests_total{provider="relay",model="",status="rejected"} 1)"));
  CHECK_THAT(text, llmretry_catch::contains(
                       R"(llm_retries_total{provider="upstream",model="loopback",error_type="rate_limited"} 1)"));
  CHECK_THAT(text, llmretry_catch::contains(
                       R"(llm_rate_limit_hits_total{provider="upstream",model="loopback",limit_type="unknown"} 1)"));
  CHECK_THAT(text, llmretry_catch::contains(R"(llm_tokens_used_total{provider="upstream",model="loopback"} 30)"));
  CHECK_THAT(text, llmretry_catch::contains(R"(llm_duplicate_suppressed_total{task_type="chat"} 1)"));
  CHECK_THAT(text, llmretry_catch::contains(R"(llm_tokens_reserved_total{provider="upstream",model="loopback"} )"));
}

TEST_CASE("a config file routes each model to its upstream and falls back to the model it names") {
  LoopbackProvider primary;
  LoopbackProvider backup;
  for (int i = 0; i < 3; ++i) primary.then(LoopbackProvider::service_unavailable());
  backup.then(LoopbackProvider::chat_completion("from the backup model"));
  const auto dir = work_dir("config_file");
  const std::string path = (dir / "relay.json").string();
  std::ofstream(path) << nlohmann::json{
      {"models",
       {{"main-model", {{"upstream", primary.base_url() + "/v1"}, {"rpm", 6000}, {"fallback", "backup-model"}}},
        {"backup-model", {{"upstream", backup.base_url()}, {"api_key_env", "BACKUP_KEY"}, {"concurrency", 4}}}}}};
  Relay relay("config_relay", {"--listen", "127.0.0.1:0", "--config", path}, {"BACKUP_KEY=sk-backup-key-1"});
  relay.started();
  const auto answer = post(relay, "/v1/chat/completions", chat("main-model"));
  CHECK(answer->status == 200);
  CHECK_THAT(answer->body, llmretry_catch::contains("from the backup model"));
  REQUIRE(backup.request_count() == 1);
  const auto sent = backup.requests().front();
  CHECK(nlohmann::json::parse(sent.body).at("model") == "backup-model");
  CHECK(sent.header("Authorization") == std::string("Bearer sk-backup-key-1"));
  CHECK(primary.requests().front().header("Authorization") == std::string("Bearer ") + upstream_key);

  const auto unknown = post(relay, "/v1/chat/completions", chat("not-in-table"));
  CHECK(unknown->status == 404);
  CHECK(error_of(unknown->body).at("code") == "model_not_found");
  CHECK(relay.err().find("sk-backup-key-1") == std::string::npos);
}

TEST_CASE("\"stream\": true is passed through as server-sent events, chunk by chunk; retried before the first") {
  LoopbackProvider provider;
  provider.then(LoopbackProvider::service_unavailable());
  ScriptedResponse stream = LoopbackProvider::stream({"Hel", "lo", "!"});
  stream.chunk_interval = llmretry_test::scaled(100ms);  // longer than a slow build's relay takes to pass one on
  stream.headers = {{"x-request-id", "req_stream"}, {"x-ratelimit-remaining-tokens", "900"}, {"set-cookie", "no"}};
  provider.then(stream);
  Relay relay("stream", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url()});
  relay.started();
  auto body = nlohmann::json::parse(chat());
  body["stream"] = true;
  std::vector<std::string> pieces;
  auto client = relay.client();
  const auto result = client.Post("/v1/chat/completions", {}, body.dump(), "application/json");
  REQUIRE(result);
  CHECK(result->status == 200);
  CHECK_THAT(result->get_header_value("Content-Type"), llmretry_catch::contains("text/event-stream"));
  // The upstream's request id and rate-limit headers come on a stream too, and nothing else of its.
  CHECK(result->get_header_value("x-request-id") == "req_stream");
  CHECK(result->get_header_value("x-ratelimit-remaining-tokens") == "900");
  CHECK_FALSE(result->has_header("set-cookie"));
  CHECK_THAT(result->body, llmretry_catch::contains(R"("content":"Hel")"));
  CHECK_THAT(result->body, llmretry_catch::contains("data: [DONE]\n\n"));
  CHECK(provider.request_count() == 2);

  // The events reach the client as they come: one piece each, not the whole answer at the end.
  provider.then(stream);
  httplib::Request request;
  request.method = "POST";
  request.path = "/v1/chat/completions";
  request.body = body.dump();
  request.set_header("Content-Type", "application/json");
  request.content_receiver = [&](const char* data, std::size_t size, std::uint64_t, std::uint64_t) {
    pieces.emplace_back(data, size);
    return true;
  };
  httplib::Response response;
  httplib::Error error = httplib::Error::Success;
  REQUIRE(client.send(request, response, error));
  CHECK(response.status == 200);
  CHECK(pieces.size() >= 2);  // events that arrive together may be written together
  CHECK_THAT(pieces.front(), llmretry_catch::contains(R"("content":"Hel")"));
  CHECK(pieces.front().find("[DONE]") == std::string::npos);
}

TEST_CASE("a stream cut after its first event is not retried: it ends with an in-band error event") {
  LoopbackProvider provider;
  provider.then(LoopbackProvider::stream_cut({"partial"}));
  Relay relay("stream_cut", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url()});
  relay.started();
  auto body = nlohmann::json::parse(chat());
  body["stream"] = true;
  // The client gets the event, then an error event in OpenAI's format, and the end of the stream.
  httplib::Request request;
  request.method = "POST";
  request.path = "/v1/chat/completions";
  request.body = body.dump();
  request.set_header("Content-Type", "application/json");
  std::string received;
  request.content_receiver = [&](const char* data, std::size_t size, std::uint64_t, std::uint64_t) {
    received.append(data, size);
    return true;
  };
  httplib::Response response;
  httplib::Error error = httplib::Error::Success;
  auto client = relay.client();
  REQUIRE(client.send(request, response, error));
  CHECK(response.status == 200);
  CHECK_THAT(received, llmretry_catch::contains(R"("content":"partial")"));
  CHECK(received.find("[DONE]") == std::string::npos);
  const auto last = received.rfind("data: ");
  REQUIRE(last != std::string::npos);
  const auto event = nlohmann::json::parse(received.substr(last + 6));
  CHECK(event.at("error").at("code") == "stream_interrupted");
  CHECK(received.substr(received.size() - 2) == "\n\n");
  CHECK(provider.request_count() == 1);
  CHECK(relay.client().Get("/healthz")->status == 200);
}

#if LLMRETRY_RELAY_REDIS
TEST_CASE("two relays on one Redis: the pressure a relay acts on is the fleet's, as its last reservation saw it") {
  llmretry::testing::RedisServer redis;
  LoopbackProvider provider;
  serve_freely(provider);
  const std::string url = "redis://127.0.0.1:" + std::to_string(redis.port());
  const auto dir = work_dir("shared_pressure");
  const std::string path = (dir / "relay.json").string();
  // 12 a minute, one at once: once a unit is taken, the next waits 5 s, moderate pressure (1 s or more).
  std::ofstream(path) << nlohmann::json{
      {"models",
       {{"main",
         {{"upstream", provider.base_url()}, {"rpm", 12}, {"under_pressure", {{"moderate", {{"hold", "batch"}}}}}}}}}};
  const std::vector<std::string> arguments{"--listen", "127.0.0.1:0", "--config",   path,
                                           "--redis",  url,           "--max-wait", "100ms"};
  Relay a("shared_pressure_a", arguments);
  Relay b("shared_pressure_b", arguments);
  a.started();
  b.started();
  const httplib::Headers batch{{"X-LLMRetry-Priority", "batch"}};
  CHECK(post(a, "/v1/chat/completions", chat("main"))->status == 200);  // the unit: relay b took nothing
  // Relay b's first request finds none left: refused for want of capacity, it learns the wait.
  const auto refused = post(b, "/v1/chat/completions", chat("main"));
  CHECK(refused->status == 429);
  CHECK(error_of(refused->body).at("code") == "no_capacity");
  // Its batch request is held under the fleet's pressure, before asking Redis.
  const auto held = post(b, "/v1/chat/completions", chat("main"), batch);
  CHECK(held->status == 429);
  CHECK(error_of(held->body).at("code") == "held_under_pressure");
  CHECK(held->get_header_value("x-llmretry-degraded") == "hold=batch");
  CHECK(provider.request_count() == 1);
}

TEST_CASE("two relays on one Redis share their Idempotency-Keys: a key used on one is replayed by the other") {
  llmretry::testing::RedisServer redis;
  LoopbackProvider provider;
  serve_freely(provider);
  const std::string url = "redis://127.0.0.1:" + std::to_string(redis.port());
  Relay a("redis_a", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url(), "--redis", url});
  Relay b("redis_b", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url(), "--redis", url});
  a.started();
  b.started();
  const std::string key = "shared-" + std::to_string(::getpid());
  const auto first = post(a, "/v1/chat/completions", chat(), {{"Idempotency-Key", key}});
  CHECK(first->status == 200);
  const auto replay = post(b, "/v1/chat/completions", chat(), {{"Idempotency-Key", key}});
  CHECK(replay->status == 200);
  CHECK(replay->get_header_value("Idempotent-Replayed") == "true");
  CHECK(replay->body == first->body);
  CHECK(post(b, "/v1/chat/completions", chat("loopback", "Other"), {{"Idempotency-Key", key}})->status == 422);
  CHECK(provider.request_count() == 1);
}

namespace {

/// The --redis-timeout of a relay whose Redis a test pauses: 10 s (scaled, within the option's 10 min), so
/// that a slow machine never times out a command the test holds back on purpose.
std::string paused_redis_timeout() {
  const std::chrono::milliseconds timeout = std::min<std::chrono::milliseconds>(llmretry_test::scaled(10s), 10min);
  return std::to_string(timeout.count()) + "ms";
}

/// Resumes a paused Redis when it goes out of scope, so that a failed check leaves none stopped.
class ResumeAtEnd {
 public:
  explicit ResumeAtEnd(const llmretry::testing::RedisServer& redis) : redis_(redis) {}
  ResumeAtEnd(const ResumeAtEnd&) = delete;
  ResumeAtEnd& operator=(const ResumeAtEnd&) = delete;
  ~ResumeAtEnd() { redis_.resume(); }

 private:
  const llmretry::testing::RedisServer& redis_;
};

}  // namespace

TEST_CASE("a client that leaves while its Idempotency-Key is claimed on Redis: never sent, the key freed") {
  llmretry::testing::RedisServer redis;
  LoopbackProvider provider;
  serve_freely(provider);
  Relay relay("left_claiming",
              {"--listen", "127.0.0.1:0", "--upstream", provider.base_url(), "--redis",
               "redis://127.0.0.1:" + std::to_string(redis.port()), "--redis-timeout", paused_redis_timeout()});
  relay.started();
  const std::string key = "claiming-" + std::to_string(::getpid());
  redis.pause();  // the claim waits for Redis
  ::close(send_raw(relay.port(), post_text(chat(), "Idempotency-Key: " + key + "\r\n")));
  const bool left = metrics_hold(relay, "llm_relay_clients_left_total 1");
  redis.resume();  // the key is claimed now, after the client left
  REQUIRE(left);
  CHECK(metrics_hold(relay, R"(llm_requests_total{provider="upstream",model="loopback",status="client_gone"} 1)"));
  CHECK(metrics_hold(relay, "llm_relay_requests_in_flight 0"));
  CHECK(provider.request_count() == 0);
  // The key was freed, not kept claimed: the client's retry is sent.
  const auto retried = post(relay, "/v1/chat/completions", chat(), {{"Idempotency-Key", key}});
  CHECK(retried->status == 200);
  CHECK(retried->get_header_value("Idempotent-Replayed").empty());
  CHECK(provider.request_count() == 1);
}

TEST_CASE("a claim Redis answers after 2.5 s: served within a longer --redis-timeout, 503 within the default 1 s") {
  for (const bool longer : {true, false}) {
    INFO((longer ? "--redis-timeout " + paused_redis_timeout() : std::string("the default --redis-timeout")));
    llmretry::testing::RedisServer redis;
    LoopbackProvider provider;
    serve_freely(provider);
    std::vector<std::string> arguments{"--listen",   "127.0.0.1:0",
                                       "--upstream", provider.base_url(),
                                       "--redis",    "redis://127.0.0.1:" + std::to_string(redis.port())};
    if (longer) arguments.insert(arguments.end(), {"--redis-timeout", paused_redis_timeout()});
    Relay relay(longer ? "redis_timeout_longer" : "redis_timeout_default", arguments);
    relay.started();
    redis.pause();
    auto answer = std::async(std::launch::async, [&relay] {
      return relay.client().Post("/v1/chat/completions", {{"Idempotency-Key", "slow-redis"}}, chat(),
                                 "application/json");
    });
    const ResumeAtEnd resume(redis);  // before `answer` waits for its request, when a check fails
    REQUIRE(metrics_hold(relay, "llm_relay_requests_in_flight 1"));  // its claim waits for Redis
    std::this_thread::sleep_for(2500ms);                             // on purpose: 1.5 s past the default
    redis.resume();
    const auto answered = answer.get();
    REQUIRE(answered);
    INFO(answered->body);
    if (longer) {
      CHECK(answered->status == 200);
      CHECK(provider.request_count() == 1);
    } else {
      CHECK(answered->status == 503);
      CHECK(error_of(answered->body).at("code") == "idempotency_store_unavailable");
      CHECK(provider.request_count() == 0);
    }
  }
}

TEST_CASE("with --redis the relay's threads share a few connections, not one") {
  llmretry::testing::RedisServer redis;
  LoopbackProvider provider;
  serve_freely(provider);
  Relay relay("redis_pool", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url(), "--redis",
                             "redis://127.0.0.1:" + std::to_string(redis.port())});
  relay.started();
  llmretry::redis::Connection connection(redis.connection_options());
  const std::string clients = connection.command("client list", {"CLIENT", "LIST"}).text();
  const auto lines = std::count(clients.begin(), clients.end(), '\n');
  CHECK(lines == 8 + 1);  // the relay's, and this test's
  CHECK(post(relay, "/v1/chat/completions", chat(), {{"Idempotency-Key", "pooled"}})->status == 200);
  CHECK(post(relay, "/v1/chat/completions", chat(), {{"Idempotency-Key", "pooled"}})
            ->get_header_value("Idempotent-Replayed") == "true");
}

TEST_CASE("relays on one Redis with other upstreams do not answer each other's Idempotency-Keys") {
  llmretry::testing::RedisServer redis;
  LoopbackProvider provider_a;
  LoopbackProvider provider_b;
  serve_freely(provider_a);
  serve_freely(provider_b);
  const std::string url = "redis://127.0.0.1:" + std::to_string(redis.port());
  Relay a("redis_scope_a", {"--listen", "127.0.0.1:0", "--upstream", provider_a.base_url(), "--redis", url});
  Relay b("redis_scope_b", {"--listen", "127.0.0.1:0", "--upstream", provider_b.base_url(), "--redis", url});
  a.started();
  b.started();
  CHECK(post(a, "/v1/chat/completions", chat(), {{"Idempotency-Key", "scoped"}})->status == 200);
  const auto other = post(b, "/v1/chat/completions", chat(), {{"Idempotency-Key", "scoped"}});
  CHECK(other->status == 200);
  CHECK_FALSE(other->has_header("Idempotent-Replayed"));
  CHECK(provider_a.request_count() == 1);
  CHECK(provider_b.request_count() == 1);
}

TEST_CASE("a Redis restart under the relay does not kill it: requests get an answer, and it serves on") {
  llmretry::testing::RedisServer redis;
  LoopbackProvider provider;
  // A large answer, stored once the server is gone: its write on the dead connection fails (EPIPE).
  ScriptedResponse large = LoopbackProvider::chat_completion(std::string(500'000, 'a'));
  large.delay = 500ms;
  provider.then(large);
  provider.then(LoopbackProvider::chat_completion("after"));
  const std::string url = "redis://127.0.0.1:" + std::to_string(redis.port());
  Relay relay("redis_restart", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url(), "--redis", url});
  relay.started();
  int first = 0;
  std::thread client([&] {
    auto result =
        relay.client().Post("/v1/chat/completions", {{"Idempotency-Key", "large"}}, chat(), "application/json");
    first = result ? result->status : -1;
  });
  while (provider.request_count() == 0) std::this_thread::sleep_for(1ms);  // claimed, in flight
  redis.kill();
  redis.restart();
  client.join();
  CHECK(first == 200);
  CHECK_FALSE(relay.ended());
  const auto after =
      relay.client().Post("/v1/chat/completions", {{"Idempotency-Key", "after"}}, chat(), "application/json");
  REQUIRE(after);
  CHECK((after->status == 200 || after->status == 503));
  CHECK(relay.client().Get("/healthz")->status == 200);
}

TEST_CASE("two relays on one Redis share their limits: what one used, the other cannot") {
  llmretry::testing::RedisServer redis;
  LoopbackProvider provider;
  serve_freely(provider);
  const std::string url = "redis://127.0.0.1:" + std::to_string(redis.port());
  const std::vector<std::string> arguments{"--listen", "127.0.0.1:0", "--upstream", provider.base_url(), "--rpm",
                                           "1",        "--max-wait",  "100ms",      "--redis",           url};
  Relay a("shared_limit_a", arguments);
  Relay b("shared_limit_b", arguments);
  a.started();
  b.started();
  CHECK(post(a, "/v1/chat/completions", chat())->status == 200);
  // b has used nothing of its own, but the one request a minute is spent: no capacity within --max-wait.
  const auto refused = post(b, "/v1/chat/completions", chat());
  CHECK(refused->status == 429);
  CHECK(error_of(refused->body).at("code") == "no_capacity");
  REQUIRE(refused->has_header("Retry-After"));
  CHECK(std::stoi(refused->get_header_value("Retry-After")) > 8);
  CHECK(provider.request_count() == 1);
}

TEST_CASE("two relays on one Redis share what the upstream's headers taught one of them") {
  llmretry::testing::RedisServer redis;
  LoopbackProvider provider;
  ScriptedResponse limited = LoopbackProvider::chat_completion("first");
  limited.headers = {{"x-ratelimit-limit-requests", "1"}, {"x-ratelimit-remaining-requests", "0"}};
  provider.then(limited);
  provider.then(LoopbackProvider::chat_completion("second"));
  const std::string url = "redis://127.0.0.1:" + std::to_string(redis.port());
  // No limit configured: only what the upstream reports paces them.
  const std::vector<std::string> arguments{"--listen",   "127.0.0.1:0", "--upstream", provider.base_url(),
                                           "--max-wait", "100ms",       "--redis",    url};
  Relay a("learned_limit_a", arguments);
  Relay b("learned_limit_b", arguments);
  a.started();
  b.started();
  CHECK(post(a, "/v1/chat/completions", chat())->status == 200);
  // b never heard the headers, but one request a minute is learned, and it is spent.
  const auto refused = post(b, "/v1/chat/completions", chat());
  CHECK(refused->status == 429);
  CHECK(error_of(refused->body).at("code") == "no_capacity");
  CHECK(provider.request_count() == 1);
}
#endif

TEST_CASE("SIGTERM stops the relay once the requests in flight are answered, with exit status 0") {
  LoopbackProvider provider;
  serve_freely(provider, 500ms);
  Relay relay("sigterm", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url()});
  relay.started();
  int status = 0;
  std::thread client([&] {
    auto result = relay.client().Post("/v1/chat/completions", chat(), "application/json");
    status = result ? result->status : -1;
  });
  while (provider.request_count() == 0) std::this_thread::sleep_for(1ms);  // the request is in flight
  CHECK(relay.stop() == 0);
  client.join();
  CHECK(status == 200);
}

TEST_CASE("--concurrency: a request that finds every slot taken past --max-wait is answered 429") {
  // The first request's answer is held until the provider stops, after the second was answered.
  std::optional<LoopbackProvider> provider(std::in_place);
  ScriptedResponse held = LoopbackProvider::chat_completion("held");
  held.delay = 60s;
  provider->then(held);
  Relay relay("concurrency", {"--listen", "127.0.0.1:0", "--upstream", provider->base_url(), "--concurrency", "1",
                              "--max-wait", "100ms"});
  relay.started();
  int first = 0;
  std::thread client([&] {
    auto result = relay.client().Post("/v1/chat/completions", chat(), "application/json");
    first = result ? result->status : -1;
  });
  while (provider->request_count() == 0) std::this_thread::sleep_for(1ms);  // the one slot is taken
  const auto refused = post(relay, "/v1/chat/completions", chat());
  CHECK(provider->request_count() == 1);
  provider.reset();  // the held answer goes out now
  client.join();
  CHECK(first == 200);
  CHECK(refused->status == 429);
  CHECK(refused->has_header("Retry-After"));
  const auto metrics = relay.client().Get("/metrics");
  REQUIRE(metrics);
  CHECK_THAT(metrics->body,
             llmretry_catch::contains(
                 R"(llm_rate_limit_hits_total{provider="upstream",model="loopback",limit_type="concurrency"} 1)"));
}

TEST_CASE("a client that leaves while its request waits for capacity: it is never sent, and counted client_gone") {
  // Some clients send an empty line after a body: dropped, and the watch goes on, whether it came with the
  // request (read with it) or later (on the socket).
  std::string with_the_request;
  std::string later;
  SECTION("the request alone") {}
  SECTION("an empty line with the request") { with_the_request = "\r\n"; }
  SECTION("an empty line while the request waits") { later = "\r\n"; }
  LoopbackProvider provider;
  ScriptedResponse held = LoopbackProvider::chat_completion("held");
  held.delay = llmretry_test::scaled(3000ms);  // the one slot is taken that long
  provider.then(held);
  provider.then(LoopbackProvider::chat_completion("next"));
  Relay relay("left_waiting", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url(), "--concurrency", "1",
                               "--max-wait", "60s"});
  relay.started();
  int first = 0;
  std::thread client([&] {
    auto result = relay.client().Post("/v1/chat/completions", chat(), "application/json");
    first = result ? result->status : -1;
  });
  await_requests(provider, 1);
  const int waiting = send_raw(relay.port(), post_text(chat("loopback", "left")) + with_the_request);
  REQUIRE(metrics_hold(relay, R"(llm_queue_depth{priority="interactive",task_type="chat"} 1)"));
  if (!later.empty()) {
    REQUIRE(::send(waiting, later.data(), later.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(later.size()));
    std::this_thread::sleep_for(100ms);  // read and dropped by the watch, before the client leaves
  }
  ::close(waiting);  // the client leaves while its request waits for the slot

  CHECK(metrics_hold(relay, R"(llm_requests_total{provider="upstream",model="loopback",status="client_gone"} 1)"));
  CHECK(metrics_hold(relay, "llm_relay_clients_left_total 1"));
  CHECK(metrics_hold(relay, R"(llm_queue_depth{priority="interactive",task_type="chat"} 0)"));
  client.join();  // the slot is free again: the request that left would be sent now
  CHECK(first == 200);
  CHECK(post(relay, "/v1/chat/completions", chat())->status == 200);
  const auto received = provider.requests();
  REQUIRE(received.size() == 2);
  for (const auto& request : received) CHECK(request.body.find("left") == std::string::npos);
}

TEST_CASE("a client that leaves while its request is sent: cancelled, unless an Idempotency-Key keeps its answer") {
  LoopbackProvider provider;
  ScriptedResponse slow = LoopbackProvider::chat_completion("slow");
  slow.delay = 60s;  // cut short when the provider stops
  provider.then(slow);
  ScriptedResponse kept = LoopbackProvider::chat_completion("kept");
  kept.delay = 1s;
  provider.then(kept);
  ScriptedResponse refused = LoopbackProvider::context_length_exceeded();  // final: stored as well
  refused.delay = 1s;
  provider.then(refused);
  Relay relay("left_sent", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url()});
  relay.started();
  // The client's retry under `key`, asked again while the first is in flight (409), up to 10 s.
  const auto retry_once_stored = [&relay](const std::string& key) {
    std::optional<httplib::Response> retry;
    for (int i = 0; i < 200 && (!retry || retry->status == 409); ++i) {
      std::this_thread::sleep_for(50ms);
      retry = *post(relay, "/v1/chat/completions", chat(), {{"Idempotency-Key", key}});
    }
    return retry;
  };

  // Without a key, the answer can reach nobody: the upstream call ends at once.
  const int unkeyed = send_raw(relay.port(), post_text(chat()));
  await_requests(provider, 1);
  ::close(unkeyed);
  CHECK(metrics_hold(relay, R"(llm_requests_total{provider="upstream",model="loopback",status="client_gone"} 1)"));

  // With one, the call goes on and stores its answer: the client's retry under the key gets it, not paid twice.
  const int keyed = send_raw(relay.port(), post_text(chat(), "Idempotency-Key: kept-answer\r\n"));
  await_requests(provider, 2);
  ::close(keyed);
  CHECK(metrics_hold(relay, "llm_relay_clients_left_total 2"));
  auto retry = retry_once_stored("kept-answer");
  REQUIRE(retry->status == 200);
  CHECK(retry->get_header_value("Idempotent-Replayed") == "true");
  CHECK_THAT(retry->body, llmretry_catch::contains("kept"));
  CHECK(provider.request_count() == 2);
  CHECK(metrics_hold(relay, R"(llm_requests_total{provider="upstream",model="loopback",status="client_gone"} 1)"));

  // So is a final refusal of the provider's: the retry gets that 400, not a second call.
  const int refused_keyed = send_raw(relay.port(), post_text(chat(), "Idempotency-Key: kept-refusal\r\n"));
  await_requests(provider, 3);
  ::close(refused_keyed);
  CHECK(metrics_hold(relay, "llm_relay_clients_left_total 3"));
  retry = retry_once_stored("kept-refusal");
  REQUIRE(retry->status == 400);
  CHECK(retry->get_header_value("Idempotent-Replayed") == "true");
  CHECK_THAT(retry->body, llmretry_catch::contains("context_length_exceeded"));
  CHECK(provider.request_count() == 3);
  CHECK(metrics_hold(relay, R"(llm_requests_total{provider="upstream",model="loopback",status="client_gone"} 1)"));
}

TEST_CASE("a client that leaves while its duplicate waits under --coalesce-wait: it is not sent once the first ends") {
  LoopbackProvider provider;
  ScriptedResponse first = LoopbackProvider::stream({"a", "b", "c"});
  first.chunk_interval = llmretry_test::scaled(1000ms);  // a stream is never stored: the duplicate is sent itself
  provider.then(first);
  provider.then(LoopbackProvider::stream({"duplicate"}));
  Relay relay("left_coalescing",
              {"--listen", "127.0.0.1:0", "--upstream", provider.base_url(), "--coalesce-wait", "60s"});
  relay.started();
  auto body = nlohmann::json::parse(chat());
  body["stream"] = true;
  std::atomic<int> first_status{0};
  std::thread client([&] {
    auto result = relay.client().Post("/v1/chat/completions", {{"Idempotency-Key", "coalesced"}}, body.dump(),
                                      "application/json");
    first_status = result ? result->status : -1;
  });
  await_requests(provider, 1);
  const int duplicate = send_raw(relay.port(), post_text(body.dump(), "Idempotency-Key: coalesced\r\n"));
  REQUIRE(metrics_hold(relay, R"(llm_relay_requests_in_flight 2)"));
  ::close(duplicate);  // seen while it waits for the first: before its upstream call listens
  CHECK(metrics_hold(relay, "llm_relay_clients_left_total 1"));
  // It stops waiting at its next look at the key, its place in --max-requests given back: not at the end of
  // the first.
  CHECK(metrics_hold(relay, R"(llm_relay_requests_in_flight 1)"));
  CHECK(first_status == 0);
  client.join();
  CHECK(first_status == 200);
  CHECK(metrics_hold(relay, R"(llm_requests_total{provider="upstream",model="loopback",status="client_gone"} 1)"));
  CHECK(metrics_hold(relay, "llm_relay_requests_in_flight 0"));
  CHECK(provider.request_count() == 1);
}

TEST_CASE("a client that leaves while its keyed duplicate waits, not streamed: it is not sent once the key is free") {
  LoopbackProvider provider;
  ScriptedResponse first = LoopbackProvider::insufficient_quota();  // not retried, not stored: the key is freed
  first.delay = llmretry_test::scaled(1000ms);
  provider.then(first);
  provider.then(LoopbackProvider::chat_completion("duplicate"));
  Relay relay("left_keyed_waiting",
              {"--listen", "127.0.0.1:0", "--upstream", provider.base_url(), "--coalesce-wait", "60s"});
  relay.started();
  int first_status = 0;
  std::thread client([&] {
    auto result =
        relay.client().Post("/v1/chat/completions", {{"Idempotency-Key", "freed"}}, chat(), "application/json");
    first_status = result ? result->status : -1;
  });
  await_requests(provider, 1);
  const int duplicate = send_raw(relay.port(), post_text(chat(), "Idempotency-Key: freed\r\n"));
  REQUIRE(metrics_hold(relay, R"(llm_relay_requests_in_flight 2)"));
  ::close(duplicate);  // seen while it waits: its call, once the key is free, must not send it
  CHECK(metrics_hold(relay, "llm_relay_clients_left_total 1"));
  client.join();
  CHECK(first_status == 429);
  CHECK(metrics_hold(relay, R"(llm_requests_total{provider="upstream",model="loopback",status="client_gone"} 1)"));
  CHECK(metrics_hold(relay, "llm_relay_requests_in_flight 0"));
  CHECK(provider.request_count() == 1);
}

TEST_CASE("a streamed /v1/responses answer, which ends at event: response.completed, reaches the client whole") {
  LoopbackProvider provider;
  ScriptedResponse stream = LoopbackProvider::stream({});
  stream.chunks = {"event: response.output_text.delta\ndata: {\"delta\":\"Hi\"}\n\n",
                   "event: response.completed\ndata: {\"response\":{\"status\":\"completed\"}}\n\n"};
  provider.then(stream);
  Relay relay("responses_stream", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url()});
  relay.started();
  auto body = nlohmann::json::parse(chat());
  body["stream"] = true;
  const auto result = post(relay, "/v1/responses", body.dump());
  CHECK(result->status == 200);
  CHECK(result->body == std::string("event: response.output_text.delta\ndata: {\"delta\":\"Hi\"}\n\n") +
                            "event: response.completed\ndata: {\"response\":{\"status\":\"completed\"}}\n\n");
  CHECK(provider.request_count() == 1);
}

namespace {

/// The Anthropic key the relay is given: it must never come out of the relay.
constexpr const char* anthropic_key = "sk-ant-upstream-secret-51c2";

/// Returns an Anthropic Messages request body for `model`.
std::string message(const std::string& model = "claude-loopback", bool stream = false) {
  return nlohmann::json{{"model", model},
                        {"max_tokens", 10},
                        {"stream", stream},
                        {"messages", {{{"role", "user"}, {"content", "Hello"}}}}}
      .dump();
}

}  // namespace

TEST_CASE("POST /v1/messages goes to --anthropic-upstream with x-api-key and anthropic-version, answers pass back") {
  LoopbackProvider provider;
  ScriptedResponse answer;
  answer.body =
      R"({"id":"msg_1","type":"message","role":"assistant","model":"claude-loopback","content":[)"
      R"({"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":12,"output_tokens":3}})";
  answer.headers = {
      {"anthropic-ratelimit-requests-remaining", "49"}, {"request-id", "req_1"}, {"x-echo", anthropic_key}};
  provider.then(answer);
  Relay relay(
      "anthropic",
      {"--listen", "127.0.0.1:0", "--upstream", provider.base_url(), "--anthropic-upstream", provider.base_url()},
      {std::string("ANTHROPIC_API_KEY=") + anthropic_key});
  relay.started();
  const auto answered = post(relay, "/v1/messages", message(),
                             {{"anthropic-version", "2023-06-01"}, {"anthropic-beta", "tools-2024-04-04"}});
  CHECK(answered->status == 200);
  CHECK(nlohmann::json::parse(answered->body).at("type") == "message");
  CHECK(answered->get_header_value("anthropic-ratelimit-requests-remaining") == "49");
  CHECK(answered->get_header_value("request-id") == "req_1");
  CHECK_FALSE(answered->has_header("x-echo"));
  REQUIRE(provider.request_count() == 1);
  const auto received = provider.requests().back();
  CHECK(received.path == "/v1/messages");
  CHECK(received.header("x-api-key") == std::optional<std::string>(anthropic_key));
  CHECK(received.header("anthropic-version") == std::optional<std::string>("2023-06-01"));
  CHECK(received.header("anthropic-beta") == std::optional<std::string>("tools-2024-04-04"));
  CHECK_FALSE(received.header("Authorization").has_value());

  // Streamed: Anthropic's events, to message_stop, reach the client whole.
  serve_freely(provider);
  auto streamed = post(relay, "/v1/messages", message("claude-loopback", true), {{"anthropic-version", "2023-06-01"}});
  CHECK(streamed->status == 200);
  CHECK_THAT(streamed->get_header_value("Content-Type"), llmretry_catch::contains("text/event-stream"));
  CHECK_THAT(streamed->body, llmretry_catch::contains("event: message_stop"));

  // The relay's own errors on /v1/messages are Anthropic's shape, which its SDK reads.
  const auto broken = post(relay, "/v1/messages", "{", {{"anthropic-version", "2023-06-01"}});
  CHECK(broken->status == 400);
  const auto body = nlohmann::json::parse(broken->body);
  CHECK(body.at("type") == "error");
  CHECK(body.at("error").at("type") == "invalid_request_error");
  CHECK(relay.stop() == 0);
  CHECK(relay.out().find(anthropic_key) == std::string::npos);
  CHECK(relay.err().find(anthropic_key) == std::string::npos);
}

TEST_CASE("without an Anthropic upstream /v1/messages is a 404 that says how to serve it") {
  LoopbackProvider provider;
  serve_freely(provider);
  Relay relay("no_anthropic", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url()});
  relay.started();
  const auto refused = post(relay, "/v1/messages", message());
  CHECK(refused->status == 404);
  CHECK_THAT(refused->body, llmretry_catch::contains("--anthropic-upstream"));
  CHECK(provider.request_count() == 0);
}

TEST_CASE("a model table says which API each model speaks: the other route is refused") {
  LoopbackProvider provider;
  serve_freely(provider);
  const auto dir = work_dir("formats_config");
  const auto config = dir / "models.json";
  std::ofstream(config) << R"({"models": {"gpt-loopback": {}, "claude-loopback": {"format": "anthropic", "upstream": ")"
                        << provider.base_url() << R"("}}})";
  Relay relay("formats", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url(), "--config", config.string()},
              {std::string("ANTHROPIC_API_KEY=") + anthropic_key});
  relay.started();
  CHECK(post(relay, "/v1/messages", message("claude-loopback"))->status == 200);
  CHECK(provider.requests().back().header("x-api-key") == std::optional<std::string>(anthropic_key));
  CHECK(post(relay, "/v1/chat/completions", chat("gpt-loopback"))->status == 200);
  CHECK(provider.requests().back().header("Authorization") ==
        std::optional<std::string>(std::string("Bearer ") + upstream_key));
  const auto crossed = post(relay, "/v1/chat/completions", chat("claude-loopback"));
  CHECK(crossed->status == 404);
  CHECK_THAT(crossed->body, llmretry_catch::contains("/v1/messages"));
  CHECK(provider.request_count() == 2);
}

TEST_CASE("SIGHUP reloads --config: new requests use the new table, requests in flight finish on theirs") {
  LoopbackProvider first;
  serve_freely(first, 1s);
  LoopbackProvider second;
  serve_freely(second);
  const auto dir = work_dir("reload_config");
  const auto config = dir / "models.json";
  std::ofstream(config) << R"({"models": {"a": {"upstream": ")" << first.base_url() << R"("}}})";
  Relay relay("reload", {"--listen", "127.0.0.1:0", "--upstream", first.base_url(), "--config", config.string()});
  relay.started();
  CHECK(post(relay, "/v1/chat/completions", chat("b"))->status == 404);
  int in_flight = 0;
  std::thread client([&] {
    auto result = relay.client().Post("/v1/chat/completions", chat("a"), "application/json");
    in_flight = result ? result->status : -1;
  });
  while (first.request_count() == 0) std::this_thread::sleep_for(1ms);
  std::ofstream(config, std::ios::trunc) << R"({"models": {"a": {"upstream": ")" << second.base_url()
                                         << R"("}, "b": {"upstream": ")" << second.base_url() << R"("}}})";
  const auto said = [&](const std::string& text) {
    for (int i = 0; i < 2000 && relay.err().find(text) == std::string::npos; ++i) std::this_thread::sleep_for(5ms);
    return relay.err().find(text) != std::string::npos;
  };
  relay.signal(SIGHUP);
  REQUIRE(said("reloaded"));
  CHECK(post(relay, "/v1/chat/completions", chat("b"))->status == 200);
  CHECK(post(relay, "/v1/chat/completions", chat("a"))->status == 200);
  CHECK(second.request_count() == 2);
  client.join();
  CHECK(in_flight == 200);
  CHECK(first.request_count() == 1);

  // A bad table is refused whole, says why, and the running one stays.
  std::ofstream(config, std::ios::trunc) << R"({"models": {"a": {"rpm": "many"}}})";
  relay.signal(SIGHUP);
  REQUIRE(said("not reloaded"));
  CHECK_THAT(relay.err(), llmretry_catch::contains("models.a.rpm"));
  CHECK(post(relay, "/v1/chat/completions", chat("b"))->status == 200);
  CHECK(relay.stop() == 0);
}

TEST_CASE("X-LLMRetry-Priority: a batch request leaves half the burst to interactive ones, and is counted by class") {
  LoopbackProvider provider;
  serve_freely(provider);
  // 120 a minute, 2 at once: one unit refills in 500 ms.
  Relay relay("priority",
              {"--listen", "127.0.0.1:0", "--upstream", provider.base_url(), "--rpm", "120", "--max-wait", "100ms"});
  relay.started();
  const httplib::Headers batch{{"X-LLMRetry-Priority", "batch"}, {"X-LLMRetry-Tenant", "nightly"}};
  CHECK(post(relay, "/v1/chat/completions", chat(), batch)->status == 200);
  // The second unit is the half kept for interactive requests: the batch request is held back past --max-wait.
  const auto held = post(relay, "/v1/chat/completions", chat(), batch);
  CHECK(held->status == 429);
  CHECK(error_of(held->body).at("code") == "no_capacity");
  CHECK(post(relay, "/v1/chat/completions", chat())->status == 200);  // interactive: the unit kept for it
  CHECK(provider.request_count() == 2);
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{{"X-LLMRetry-Priority", "urgent"},
                                                        {"X-LLMRetry-Tenant", std::string(65, 't')},
                                                        {"X-LLMRetry-Tenant", "a b"}}) {
    const auto refused = post(relay, "/v1/chat/completions", chat(), {{name, value}});
    CHECK(refused->status == 400);
    CHECK_THAT(error_of(refused->body).at("message").get<std::string>(), llmretry_catch::contains("x-llmretry-"));
  }
  const auto metrics = relay.client().Get("/metrics");
  REQUIRE(metrics);
  INFO(metrics->body);
  CHECK_THAT(metrics->body,
             llmretry_catch::contains(R"(llm_queue_wait_seconds_count{priority="batch",task_type="chat"} 2)"));
  CHECK_THAT(metrics->body,
             llmretry_catch::contains(R"(llm_queue_wait_seconds_count{priority="interactive",task_type="chat"} 1)"));
  CHECK_THAT(metrics->body, llmretry_catch::contains(R"(llm_queue_depth{priority="batch",task_type="chat"} 0)"));
  CHECK_THAT(metrics->body, llmretry_catch::contains(R"(llm_relay_tenant_requests_total{tenant="nightly"} 2)"));
}

TEST_CASE("clients of the config: each key is its tenant, with its class as default and highest, its own keys") {
  LoopbackProvider provider;
  serve_freely(provider);
  const auto dir = work_dir("clients_config_file");
  const std::string path = (dir / "relay.json").string();
  std::ofstream(path) << R"({"clients": {"support": {"key_env": "SUPPORT_KEY"},
                                         "nightly": {"key_env": "NIGHTLY_KEY", "priority": "batch", "weight": 2.5}}})";
  // Beyond loopback without LLMRETRY_RELAY_CLIENT_KEY: the clients' keys are the ones required.
  Relay relay("clients_config", {"--listen", "0.0.0.0:0", "--upstream", provider.base_url(), "--config", path},
              {"SUPPORT_KEY=key-of-support", "NIGHTLY_KEY=key-of-nightly"});
  relay.started();
  const httplib::Headers support{{"Authorization", "Bearer key-of-support"}};
  const httplib::Headers nightly{{"x-api-key", "key-of-nightly"}};
  const auto with = [](httplib::Headers headers, const std::string& name, const std::string& value) {
    headers.emplace(name, value);
    return headers;
  };
  CHECK(post(relay, "/v1/chat/completions", chat())->status == 401);
  CHECK(post(relay, "/v1/chat/completions", chat(), {{"Authorization", "Bearer key-of-nobody"}})->status == 401);
  // Two different keys, or a key header sent twice, identify nobody.
  CHECK(post(relay, "/v1/chat/completions", chat(),
             {{"Authorization", "Bearer key-of-support"}, {"x-api-key", "key-of-nightly"}})
            ->status == 401);
  CHECK(post(relay, "/v1/chat/completions", chat(), {{"x-api-key", "key-of-nightly"}, {"x-api-key", "key-of-nobody"}})
            ->status == 400);
  CHECK(post(relay, "/v1/chat/completions", chat(),
             {{"Authorization", "bearer key-of-support"}, {"x-api-key", "key-of-support"}})
            ->status == 200);  // the scheme in any case; the same key twice is one key
  CHECK(relay.client().Get("/metrics")->status == 401);
  CHECK(post(relay, "/v1/chat/completions", chat(), support)->status == 200);
  CHECK(post(relay, "/v1/chat/completions", chat(), nightly)->status == 200);  // batch, its class
  CHECK(post(relay, "/v1/chat/completions", chat(), with(support, "X-LLMRetry-Priority", "batch"))->status == 200);
  CHECK(post(relay, "/v1/chat/completions", chat(), with(nightly, "X-LLMRetry-Tenant", "nightly"))->status == 200);
  const auto raised = post(relay, "/v1/chat/completions", chat(), with(nightly, "X-LLMRetry-Priority", "interactive"));
  CHECK(raised->status == 403);
  CHECK(error_of(raised->body).at("code") == "priority_not_allowed");
  const auto other = post(relay, "/v1/chat/completions", chat(), with(nightly, "X-LLMRetry-Tenant", "support"));
  CHECK(other->status == 403);
  CHECK(error_of(other->body).at("code") == "tenant_not_allowed");
  CHECK(provider.request_count() == 5);

  // One client's Idempotency-Key is its own: the same key and body from another client is sent again.
  const auto first = post(relay, "/v1/chat/completions", chat(), with(support, "Idempotency-Key", "order-7"));
  CHECK(first->status == 200);
  const auto again = post(relay, "/v1/chat/completions", chat(), with(support, "Idempotency-Key", "order-7"));
  CHECK(again->get_header_value("Idempotent-Replayed") == "true");
  const auto theirs = post(relay, "/v1/chat/completions", chat(), with(nightly, "Idempotency-Key", "order-7"));
  CHECK(theirs->status == 200);
  CHECK_FALSE(theirs->has_header("Idempotent-Replayed"));
  CHECK(provider.request_count() == 7);

  const auto metrics = relay.client().Get("/metrics", support);
  REQUIRE(metrics);
  INFO(metrics->body);
  CHECK_THAT(metrics->body, llmretry_catch::contains(R"(llm_relay_tenant_requests_total{tenant="support"} 5)"));
  CHECK_THAT(metrics->body, llmretry_catch::contains(R"(llm_relay_tenant_requests_total{tenant="nightly"} 3)"));
  CHECK_THAT(metrics->body,
             llmretry_catch::contains(R"(llm_queue_wait_seconds_count{priority="batch",task_type="chat"} 4)"));
  CHECK_THAT(metrics->body,
             llmretry_catch::contains(R"(llm_queue_wait_seconds_count{priority="interactive",task_type="chat"} 3)"));

  // SIGHUP: a config that would leave this relay open is refused; one that renames a client is taken.
  const auto said = [&](const std::string& text) {
    for (int i = 0; i < 2000 && relay.err().find(text) == std::string::npos; ++i) std::this_thread::sleep_for(5ms);
    return relay.err().find(text) != std::string::npos;
  };
  std::ofstream(path, std::ios::trunc) << R"({"models": {"gpt-4o-mini": {}}})";
  relay.signal(SIGHUP);
  REQUIRE(said("not reloaded"));
  CHECK_THAT(relay.err(), llmretry_catch::contains("not a loopback address"));
  CHECK(post(relay, "/v1/chat/completions", chat())->status == 401);
  std::ofstream(path, std::ios::trunc) << R"({"clients": {"helpdesk": {"key_env": "SUPPORT_KEY"}}})";
  relay.signal(SIGHUP);
  REQUIRE(said(" reloaded\n"));
  CHECK(post(relay, "/v1/chat/completions", chat(), support)->status == 200);
  CHECK(post(relay, "/v1/chat/completions", chat(), nightly)->status == 401);
  const auto renamed = relay.client().Get("/metrics", support);
  REQUIRE(renamed);
  CHECK_THAT(renamed->body, llmretry_catch::contains(R"(llm_relay_tenant_requests_total{tenant="helpdesk"} 1)"));
  CHECK(relay.stop() == 0);
}

TEST_CASE("a caller with LLMRETRY_RELAY_CLIENT_KEY names any tenant but a client's of the config") {
  LoopbackProvider provider;
  serve_freely(provider);
  const auto dir = work_dir("clients_and_shared_key_file");
  const std::string path = (dir / "relay.json").string();
  std::ofstream(path) << R"({"clients": {"nightly": {"key_env": "NIGHTLY_KEY", "priority": "batch"}}})";
  Relay relay("clients_and_shared_key",
              {"--listen", "127.0.0.1:0", "--upstream", provider.base_url(), "--config", path},
              {"NIGHTLY_KEY=key-of-nightly", "LLMRETRY_RELAY_CLIENT_KEY=shared-key"});
  relay.started();
  const auto named = [&](const std::string& tenant) {
    return post(relay, "/v1/chat/completions", chat(),
                {{"Authorization", "Bearer shared-key"}, {"X-LLMRetry-Tenant", tenant}});
  };
  CHECK(named("walk-in")->status == 200);
  const auto taken = named("nightly");
  CHECK(taken->status == 403);
  CHECK(error_of(taken->body).at("code") == "tenant_not_allowed");
  CHECK(post(relay, "/v1/chat/completions", chat(), {{"Authorization", "Bearer shared-key"}})->status == 200);
  CHECK(provider.request_count() == 2);
  CHECK(relay.stop() == 0);
}

TEST_CASE("clients of the config: two with one key, or one with LLMRETRY_RELAY_CLIENT_KEY's, are refused") {
  const auto dir = work_dir("clients_same_key_file");
  const std::string path = (dir / "relay.json").string();
  std::ofstream(path) << R"({"clients": {"a": {"key_env": "A_KEY"}, "b": {"key_env": "B_KEY"}}})";
  Relay same("clients_same_key", {"--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:9", "--config", path},
             {"A_KEY=one-key", "B_KEY=one-key"});
  CHECK(same.wait() == 2);
  CHECK_THAT(same.err(), llmretry_catch::contains("clients.b.key_env: the same key as clients.a"));
  Relay shared("clients_shared_key", {"--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:9", "--config", path},
               {"A_KEY=one-key", "B_KEY=another-key", "LLMRETRY_RELAY_CLIENT_KEY=another-key"});
  CHECK(shared.wait() == 2);
  CHECK_THAT(shared.err(), llmretry_catch::contains("clients.b.key_env: the same key as LLMRETRY_RELAY_CLIENT_KEY"));
}

TEST_CASE("--default-priority batch: requests without the header are batch") {
  LoopbackProvider provider;
  serve_freely(provider);
  Relay relay("default_priority", {"--listen", "127.0.0.1:0", "--upstream", provider.base_url(), "--rpm", "120",
                                   "--max-wait", "100ms", "--default-priority", "batch"});
  relay.started();
  CHECK(post(relay, "/v1/chat/completions", chat())->status == 200);
  CHECK(post(relay, "/v1/chat/completions", chat())->status == 429);
  CHECK(post(relay, "/v1/chat/completions", chat(), {{"X-LLMRetry-Priority", "interactive"}})->status == 200);
}

TEST_CASE("a model's under_pressure rules act and say what they changed: another model, fewer tokens, held, fallback") {
  LoopbackProvider main_provider;
  LoopbackProvider small_provider;
  serve_freely(main_provider);
  serve_freely(small_provider);
  const auto dir = work_dir("degrade");
  const std::string path = (dir / "relay.json").string();
  // 12 a minute, one at once: after one request the next waits 5 s, moderate pressure (a wait of 1 s or more).
  std::ofstream(path) << nlohmann::json{
      {"models",
       {{"main",
         {{"upstream", main_provider.base_url()},
          {"rpm", 12},
          {"under_pressure", {{"light", {{"max_tokens", 8}}}, {"moderate", {{"model", "small"}, {"max_tokens", 5}}}}}}},
        {"small", {{"upstream", small_provider.base_url()}}},
        {"held",
         {{"upstream", main_provider.base_url()},
          {"rpm", 12},
          {"under_pressure", {{"moderate", {{"hold", "batch"}}}}}}},
        {"fallen",
         {{"upstream", main_provider.base_url()},
          {"rpm", 12},
          {"fallback", "small"},
          {"under_pressure", {{"moderate", {{"fallback", true}}}}}}},
        {"guarded",
         {{"upstream", main_provider.base_url()},
          {"rpm", 12},
          {"under_pressure", {{"moderate", {{"hold", "batch"}}}}}}},
        {"mover",
         {{"upstream", main_provider.base_url()},
          {"rpm", 12},
          {"under_pressure", {{"moderate", {{"model", "guarded"}}}}}}},
        {"lonely",
         {{"upstream", main_provider.base_url()},
          {"rpm", 12},
          {"fallback", "guarded"},
          {"under_pressure", {{"moderate", {{"fallback", true}}}}}}}}}};
  Relay relay("degrade_relay", {"--listen", "127.0.0.1:0", "--config", path});
  relay.started();
  const auto first = post(relay, "/v1/chat/completions", chat("main"));
  CHECK(first->status == 200);
  CHECK_FALSE(first->has_header("x-llmretry-degraded"));
  const auto second = post(relay, "/v1/chat/completions", chat("main"));
  CHECK(second->status == 200);
  CHECK(second->get_header_value("x-llmretry-degraded") == "model=small, max_tokens=5");
  REQUIRE(small_provider.request_count() == 1);
  const auto sent = nlohmann::json::parse(small_provider.requests().front().body);
  CHECK(sent.at("model") == "small");
  CHECK(sent.at("max_tokens") == 5);
  CHECK(nlohmann::json::parse(main_provider.requests().front().body).at("max_tokens") == 10);  // untouched
  // Any number is cut, one out of int64's range too; a bound that is no number is left to the upstream.
  const auto huge =
      post(relay, "/v1/chat/completions", R"({"model": "main", "max_tokens": 18446744073709551615, "messages": []})");
  CHECK(huge->get_header_value("x-llmretry-degraded") == "model=small, max_tokens=5");
  CHECK(nlohmann::json::parse(small_provider.requests().back().body).at("max_tokens") == 5);
  const auto text = post(relay, "/v1/chat/completions", R"({"model": "main", "max_tokens": "500", "messages": []})");
  CHECK(text->get_header_value("x-llmretry-degraded") == "model=small");
  CHECK(nlohmann::json::parse(small_provider.requests().back().body).at("max_tokens") == "500");
  CHECK_FALSE(nlohmann::json::parse(small_provider.requests().back().body).contains("max_completion_tokens"));

  CHECK(post(relay, "/v1/chat/completions", chat("held"))->status == 200);
  const auto held = post(relay, "/v1/chat/completions", chat("held"), {{"X-LLMRetry-Priority", "batch"}});
  CHECK(held->status == 429);
  CHECK(error_of(held->body).at("code") == "held_under_pressure");
  CHECK(held->has_header("Retry-After"));
  CHECK(held->get_header_value("x-llmretry-degraded") == "hold=batch");
  const auto keyed = post(relay, "/v1/chat/completions", chat("held"),
                          {{"X-LLMRetry-Priority", "batch"}, {"Idempotency-Key", "held-1"}});
  CHECK(keyed->status == 429);  // a key does not pass a hold
  // An interactive request is not held: it waits for capacity (5 s) and is served.
  CHECK(post(relay, "/v1/chat/completions", chat("held"))->status == 200);

  // Answered from the fallback at once, instead of waiting for the pressed primary.
  CHECK_FALSE(post(relay, "/v1/chat/completions", chat("fallen"))->has_header("x-llmretry-degraded"));
  const std::size_t small_before = small_provider.request_count();
  const auto fallen = post(relay, "/v1/chat/completions", chat("fallen"));
  CHECK(fallen->status == 200);
  CHECK(fallen->get_header_value("x-llmretry-degraded") == "fallback=small");
  REQUIRE(small_provider.request_count() == small_before + 1);
  CHECK(nlohmann::json::parse(small_provider.requests().back().body).at("model") == "small");

  // A request moved to another model is held by that model's own rules too; a fallback as pressed as the
  // model is not moved to.
  CHECK(post(relay, "/v1/chat/completions", chat("guarded"))->status == 200);
  CHECK(post(relay, "/v1/chat/completions", chat("mover"))->status == 200);
  const auto moved_held = post(relay, "/v1/chat/completions", chat("mover"), {{"X-LLMRetry-Priority", "batch"}});
  CHECK(moved_held->status == 429);
  CHECK(error_of(moved_held->body).at("code") == "held_under_pressure");
  CHECK(moved_held->get_header_value("x-llmretry-degraded") == "model=guarded, hold=batch");
  CHECK(post(relay, "/v1/chat/completions", chat("lonely"))->status == 200);
  const auto stayed = post(relay, "/v1/chat/completions", chat("lonely"));  // waits for its own capacity
  CHECK(stayed->status == 200);
  CHECK_FALSE(stayed->has_header("x-llmretry-degraded"));

  const auto metrics = relay.client().Get("/metrics");
  REQUIRE(metrics);
  INFO(metrics->body);
  CHECK_THAT(metrics->body,
             llmretry_catch::contains(R"(llm_relay_degraded_total{action="model",pressure="moderate"} 4)"));
  CHECK_THAT(metrics->body,
             llmretry_catch::contains(R"(llm_relay_degraded_total{action="max_tokens",pressure="moderate"} 2)"));
  CHECK_THAT(metrics->body,
             llmretry_catch::contains(R"(llm_relay_degraded_total{action="hold",pressure="moderate"} 3)"));
  CHECK_THAT(metrics->body,
             llmretry_catch::contains(R"(llm_relay_degraded_total{action="fallback",pressure="moderate"} 1)"));
}
