// End to end over real sockets: curl::AsyncClient (a libcurl multi handle on an io_context) against the
// loopback provider on 127.0.0.1, alone and as the attempt of asio::async_call_with_retry.
#include <llmretry/asio/call.hpp>
#include <llmretry/curl/async.hpp>
#include <llmretry/json/error_fields.hpp>
#include <llmretry/loopback/provider.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <chrono>
#include <exception>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "asio_helpers.hpp"
#include "chat.hpp"
#include "helpers.hpp"
#include "llmretry_catch.hpp"

using namespace std::chrono_literals;
using llmretry::FailureKind;
using llmretry::Provider;
using llmretry::StopReason;
using llmretry::curl::AsyncCall;
using llmretry::curl::AsyncClient;
using llmretry::curl::Response;
using llmretry::testing::LoopbackProvider;
using llmretry_test::chat_request;
using Received = llmretry_test::Received<Response>;
using llmretry_test::is_cancelled;
using llmretry_test::no_jitter;
using llmretry_test::options_for;

namespace {

/// Returns the failure of the ProviderError `error` holds, or nullopt for any other exception.
std::optional<llmretry::Failure> failure_in(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const llmretry::ProviderError& e) {
    return e.failure();
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace

TEST_CASE("An asynchronous request returns the answer, and its connection serves the next ones", "[curl_async]") {
  LoopbackProvider server;
  for (int i = 0; i < 20; ++i)
    server.then(LoopbackProvider::chat_completion(std::string("answer ").append(std::to_string(i))));
  boost::asio::io_context io;
  AsyncClient client(io.get_executor());
  const auto request = chat_request(server);
  const auto options = options_for(Provider::openai);
  int answered = 0;
  std::function<void()> next = [&] {
    client.async_perform(request, options, [&](std::exception_ptr error, Response response) {
      if (error) std::rethrow_exception(error);
      CHECK(response.status == 200);
      CHECK(response.body.find(std::string("answer ").append(std::to_string(answered))) != std::string::npos);
      if (++answered < 20) next();
    });
  };
  next();
  io.run();
  CHECK(answered == 20);
  CHECK(client.connections_opened() == 1);
}

TEST_CASE("A failed response means what it means to the blocking request", "[curl_async]") {
  LoopbackProvider server;
  boost::asio::io_context io;
  AsyncClient client(io.get_executor());
  const auto request = chat_request(server);
  const auto options = options_for(Provider::openai);
  Received received;

  SECTION("a 429 with Retry-After") {
    server.then(LoopbackProvider::azure_rate_limited());
    client.async_perform(request, options, received.handler());
    io.run();
    const auto failure = failure_in(received.error);
    REQUIRE(failure);
    CHECK(failure->kind == FailureKind::rate_limited);
    CHECK(failure->provider_wait == std::chrono::milliseconds{511});
    try {
      std::rethrow_exception(received.error);
    } catch (const llmretry::curl::WithResponse& with) {
      CHECK(with.response().status == 429);
    }
  }
  SECTION("the total timeout") {
    server.then(LoopbackProvider::hang(3000ms));
    auto short_options = options;
    short_options.timeout = 200ms;
    client.async_perform(request, short_options, received.handler());
    io.run();
    const auto failure = failure_in(received.error);
    REQUIRE(failure);
    CHECK(failure->kind == FailureKind::timeout);
  }
  SECTION("nothing listening: not sent") {
    auto nowhere = request;
    nowhere.url = "http://127.0.0.1:1/v1/chat/completions";
    client.async_perform(nowhere, options, received.handler());
    io.run();
    const auto failure = failure_in(received.error);
    REQUIRE(failure);
    CHECK(failure->kind == FailureKind::connection);
    CHECK(failure->sent == llmretry::Sent::not_sent);
  }
  SECTION("bad options complete with std::invalid_argument, through the executor") {
    auto bad = options;
    bad.timeout = 0ms;
    client.async_perform(request, bad, received.handler());
    CHECK_FALSE(received.called);
    io.run();
    REQUIRE(received.called);
    REQUIRE(received.error);
    CHECK_THROWS_AS(std::rethrow_exception(received.error), std::invalid_argument);
  }
}

TEST_CASE("A streamed answer reaches the handler event by event", "[curl_async]") {
  LoopbackProvider server;
  server.then(LoopbackProvider::stream({"Hel", "lo"}));
  boost::asio::io_context io;
  AsyncClient client(io.get_executor());
  AsyncCall call(client, chat_request(server), options_for(Provider::openai));
  std::vector<std::string> events;
  call.on_event([&](const llmretry::SseEvent& event) { events.push_back(event.data); });
  const llmretry::RetryPolicy policy = no_jitter(1ms);
  Received received;
  llmretry::asio::async_call_with_retry<Response>(io.get_executor(), std::ref(call), policy, received.handler());
  io.run();
  CHECK_FALSE(received.error);
  REQUIRE(events.size() == 3);
  CHECK(events.back() == "[DONE]");
  CHECK(call.stream().started());
}

TEST_CASE("async_call_with_retry with AsyncCall: retries on the same key, one connection", "[curl_async]") {
  LoopbackProvider server;
  server.then(LoopbackProvider::azure_rate_limited())
      .then(LoopbackProvider::service_unavailable())
      .then(LoopbackProvider::chat_completion("bonjour"));
  boost::asio::io_context io;
  AsyncClient client(io.get_executor());
  AsyncCall call(client, chat_request(server), options_for(Provider::openai));
  llmretry::RetryPolicy policy = no_jitter(1ms);
  policy.max_provider_wait = 60s;
  llmretry::CallStats stats;
  llmretry::CallOptions call_options;
  call_options.stats = &stats;
  Received received;
  llmretry::asio::async_call_with_retry<Response>(io.get_executor(), std::ref(call), policy, call_options,
                                                  received.handler());
  io.run();
  REQUIRE_FALSE(received.error);
  CHECK(received.answer.body.find("bonjour") != std::string::npos);
  CHECK(stats.attempts == 3);
  const auto requests = server.requests();
  REQUIRE(requests.size() == 3);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    CHECK(requests[i].header("Idempotency-Key") == call.idempotency_key());
    CHECK(requests[i].header("X-Attempt") == std::to_string(i + 1));
  }
  CHECK(client.connections_opened() == 1);
}

TEST_CASE("A cancel stops the request in flight; the client serves the next one", "[curl_async]") {
  LoopbackProvider server;
  server.then(LoopbackProvider::hang(3000ms)).then(LoopbackProvider::chat_completion("after"));
  boost::asio::io_context io;
  AsyncClient client(io.get_executor());
  AsyncCall call(client, chat_request(server), options_for(Provider::openai));
  const llmretry::RetryPolicy policy = no_jitter(1ms);
  llmretry::CallStats stats;
  llmretry::CallOptions call_options;
  call_options.stats = &stats;
  boost::asio::cancellation_signal cancel;
  Received received;
  llmretry::asio::async_call_with_retry<Response>(
      io.get_executor(), std::ref(call), policy, call_options,
      boost::asio::bind_cancellation_slot(cancel.slot(), received.handler()));
  // Once the request has reached the server, cancel it.
  std::function<void()> when_sent = [&] {
    if (server.request_count() == 0) {
      boost::asio::post(io, when_sent);
      return;
    }
    cancel.emit(boost::asio::cancellation_type::terminal);
  };
  boost::asio::post(io, when_sent);
  io.run();
  REQUIRE(received.called);
  CHECK(is_cancelled(received.error));
  CHECK(stats.stopped == StopReason::cancelled);
  CHECK(call.attempts() == 1);

  io.restart();
  Received next;
  const auto request = chat_request(server);
  const auto options = options_for(Provider::openai);
  client.async_perform(request, options, next.handler());
  io.run();
  CHECK_FALSE(next.error);
  CHECK(next.answer.body.find("after") != std::string::npos);
}

TEST_CASE("Many requests at once on one thread", "[curl_async]") {
  LoopbackProvider server(0, 64);
  constexpr int requests = 50;
  for (int i = 0; i < requests; ++i) server.then(LoopbackProvider::chat_completion("ok"));
  boost::asio::io_context io;
  AsyncClient client(io.get_executor());
  const auto request = chat_request(server);
  const auto options = options_for(Provider::openai);
  int ok = 0;
  for (int i = 0; i < requests; ++i)
    client.async_perform(request, options, [&](std::exception_ptr error, Response response) {
      if (!error && response.status == 200) ++ok;
    });
  io.run();
  CHECK(ok == requests);
  CHECK(client.connections_opened() <= requests);
}

TEST_CASE("A stream cut after its first event is never replayed", "[curl_async]") {
  LoopbackProvider server;
  server.then(LoopbackProvider::stream_cut({"Hel", "lo"})).then(LoopbackProvider::stream({"again"}));
  boost::asio::io_context io;
  AsyncClient client(io.get_executor());
  AsyncCall call(client, chat_request(server), options_for(Provider::openai));
  int events = 0;
  call.on_event([&](const llmretry::SseEvent&) { ++events; });
  const llmretry::RetryPolicy policy = no_jitter(1ms);
  Received received;
  llmretry::asio::async_call_with_retry<Response>(io.get_executor(), std::ref(call), policy, received.handler());
  io.run();
  CHECK_THROWS_AS(std::rethrow_exception(received.error), llmretry::StreamInterrupted);
  CHECK(events == 2);
  CHECK(call.attempts() == 1);
  CHECK(server.request_count() == 1);
}

TEST_CASE("The deadline bounds the waits and each attempt's timeout", "[curl_async]") {
  LoopbackProvider server;
  server.then(LoopbackProvider::hang(3000ms)).then(LoopbackProvider::chat_completion("late"));
  boost::asio::io_context io;
  AsyncClient client(io.get_executor());
  AsyncCall call(client, chat_request(server), options_for(Provider::openai));
  llmretry::RetryPolicy policy = no_jitter(1ms);
  llmretry::CallStats stats;
  llmretry::CallOptions call_options;
  call_options.stats = &stats;
  call_options.deadline = std::chrono::steady_clock::now() + 300ms;  // the first attempt's timeout is cut to it
  Received received;
  llmretry::asio::async_call_with_retry<Response>(io.get_executor(), std::ref(call), policy, call_options,
                                                  received.handler());
  io.run();
  const auto failure = failure_in(received.error);
  REQUIRE(failure);
  CHECK(failure->kind == FailureKind::timeout);
  CHECK(stats.stopped == StopReason::deadline);
  CHECK(call.attempts() == 1);
}
