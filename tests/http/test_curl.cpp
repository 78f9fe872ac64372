// End to end over real sockets: libcurl attempts against the loopback provider on 127.0.0.1, driven by
// call_with_retry with a FakeSleep (the waits are recorded, never slept).
#include <llmretry/curl/curl.hpp>
#include <llmretry/json/error_fields.hpp>
#include <llmretry/testing/loopback/provider.hpp>

#include <llmretry/rate_limits.hpp>
#include <llmretry/retry.hpp>
#include <llmretry/testing/fake_sleep.hpp>

#include <chrono>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <llmretry_catch.hpp>

using namespace std::chrono_literals;
using llmretry::FailureKind;
using llmretry::Provider;
using llmretry::Sent;
using llmretry::StopReason;
using llmretry::curl::Call;
using llmretry::testing::LoopbackProvider;

namespace {

const std::string secret = "sk-test-never-shown";

llmretry::curl::Request chat_request(const LoopbackProvider& server) {
  llmretry::curl::Request request;
  request.url = server.base_url() + "/v1/chat/completions";
  request.headers = {{"Authorization", "Bearer " + secret}, {"Content-Type", "application/json"}};
  request.body = R"({"model":"chat-small","messages":[{"role":"user","content":"hello"}]})";
  return request;
}

llmretry::curl::Options options_for(Provider provider) {
  llmretry::curl::Options options;
  options.provider = provider;
  options.connect_timeout = 1000ms;
  options.timeout = 2000ms;
  options.read_error = [](std::string_view body) { return llmretry::json::error_fields(body); };
  return options;
}

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

TEST_CASE("the seed's Azure 429, then success: waits at least retry-after-ms, same key on every attempt") {
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

TEST_CASE("the seed's Azure 429 as an HttpError: the failure, the response and its rate-limit state") {
  LoopbackProvider server;
  server.then(LoopbackProvider::azure_rate_limited());
  Call call(chat_request(server), options_for(Provider::azure_openai));
  try {
    call();
    FAIL("no error");
  } catch (const llmretry::curl::HttpError& error) {
    CHECK(error.failure().kind == FailureKind::rate_limited);
    CHECK(error.failure().provider_wait == std::chrono::milliseconds{511});
    CHECK(error.response().status == 429);
    CHECK(error.response().header("Retry-After") == std::string_view("30"));
    CHECK(std::string(error.what()).find("rate_limit_exceeded") != std::string::npos);
    const auto limits = llmretry::parse_rate_limits(error.response().headers, std::chrono::system_clock::now());
    CHECK(limits.tokens.limit == 100000);
    CHECK(limits.tokens.remaining == -853);
    CHECK(limits.requests.remaining == 65);
  }
}

TEST_CASE("retry-after: 30 alone is above max_provider_wait: stop at once") {
  LoopbackProvider server;
  auto only_seconds = LoopbackProvider::azure_rate_limited();
  only_seconds.headers.erase(only_seconds.headers.begin() + 1);  // retry-after-ms
  server.then(only_seconds);
  Call call(chat_request(server), options_for(Provider::azure_openai));
  Run run;
  expect_throw<llmretry::curl::HttpError>(run, call);
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
  const auto error = expect_throw<llmretry::curl::HttpError>(run, call);
  CHECK(error.status() == 503);
  REQUIRE(run.gave_up);
  CHECK(run.gave_up->reason == StopReason::not_safe_to_repeat);
  CHECK(server.request_count() == 2);
}

TEST_CASE("400 context_length_exceeded and 429 insufficient_quota are not retried") {
  LoopbackProvider server;
  Run run;
  SECTION("context length") {
    server.then(LoopbackProvider::context_length_exceeded());
    Call call(chat_request(server), options_for(Provider::openai));
    CHECK(expect_throw<llmretry::curl::HttpError>(run, call).failure().kind == FailureKind::context_length);
  }
  SECTION("quota") {
    server.then(LoopbackProvider::insufficient_quota());
    Call call(chat_request(server), options_for(Provider::openai));
    CHECK(expect_throw<llmretry::curl::HttpError>(run, call).failure().kind == FailureKind::quota_exhausted);
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
    const auto error = expect_throw<llmretry::curl::HttpError>(run, call);
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
  CHECK(std::chrono::steady_clock::now() - started < 1500ms);
}

TEST_CASE("the deadline bounds each attempt and the whole call") {
  LoopbackProvider server;
  server.then(LoopbackProvider::hang(5000ms)).then(LoopbackProvider::hang(5000ms));
  const auto started = std::chrono::steady_clock::now();
  auto options = options_for(Provider::openai);
  options.timeout = 10'000ms;
  options.deadline = started + 400ms;
  Call call(chat_request(server), options);
  Run run;
  run.call_options.deadline = options.deadline;
  const auto error = expect_throw<llmretry::ProviderTimeout>(run, call);
  CHECK(error.failure().kind == FailureKind::timeout);
  CHECK(std::chrono::steady_clock::now() - started < 1500ms);
  REQUIRE(run.gave_up);
  CHECK(run.gave_up->reason == StopReason::deadline);
}

TEST_CASE("an attempt after the deadline is not sent") {
  LoopbackProvider server;
  auto options = options_for(Provider::openai);
  options.deadline = std::chrono::steady_clock::now() - 1ms;
  Call call(chat_request(server), options);
  try {
    call();
    FAIL("no error");
  } catch (const llmretry::ProviderTimeout& error) {
    CHECK(error.failure().sent == Sent::not_sent);
  }
  CHECK(server.request_count() == 0);
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

namespace {
struct Collected {
  std::vector<std::string> data;
  std::function<void(const llmretry::SseEvent&)> handler() {
    return [this](const llmretry::SseEvent& event) { data.push_back(event.data); };
  }
};
}  // namespace

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
    server.then(LoopbackProvider::overloaded()).then(LoopbackProvider::stream({"a", "b"}));
  }
  SECTION("an SSE error event before any content") {
    server.then(LoopbackProvider::stream_error({})).then(LoopbackProvider::stream({"a", "b"}));
  }
  Call call(chat_request(server), options_for(Provider::anthropic));
  call.on_event(collected.handler());
  Run run;
  CHECK(run(call).status == 200);
  CHECK(collected.data.size() == 3);  // delivered once, not replayed
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

TEST_CASE("a timeout that is not positive is refused before anything is sent") {
  LoopbackProvider server;
  auto options = options_for(Provider::openai);
  SECTION("total") { options.timeout = 0ms; }
  SECTION("connect") { options.connect_timeout = -1ms; }
  Call call(chat_request(server), options);
  CHECK_THROWS_AS(call(), std::invalid_argument);
  CHECK(server.request_count() == 0);
}
