// End to end over real sockets: curl::AsyncClient (a libcurl multi handle on an io_context) against the
// loopback provider on 127.0.0.1, alone and as the attempt of asio::async_call_with_retry.
#include <llmretry/admission/hedging.hpp>
#include <llmretry/asio/call.hpp>
#include <llmretry/curl/async.hpp>
#include <llmretry/json/error_fields.hpp>
#include <llmretry/loopback/provider.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
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

namespace {

/// One hedged AsyncCall against `server`, a hedge after `delay`, with the events of its stream when streamed.
struct HedgedAsyncCall {
  HedgedAsyncCall(LoopbackProvider& server, std::chrono::milliseconds delay, bool streamed)
      : hedging(options_after(delay)), call(client, chat_request(server), options_for(Provider::openai)) {
    options.hedging = &hedging;
    options.stats = &stats;
    if (streamed) call.on_event([this](const llmretry::SseEvent& event) { events.push_back(event.data); });
  }

  /// Makes the call and runs the io_context until nothing is left.
  void run() {
    llmretry::asio::async_call_with_retry<Response>(io.get_executor(), std::ref(call), policy, options,
                                                    received.handler());
    io.run();
  }

  static llmretry::HedgingOptions options_after(std::chrono::milliseconds delay) {
    llmretry::HedgingOptions hedging_options;
    hedging_options.delay = delay;
    hedging_options.min_per_second = 10;  // a floor: these few calls may hedge
    return hedging_options;
  }

  boost::asio::io_context io;
  AsyncClient client{io.get_executor()};
  llmretry::Hedging hedging;
  AsyncCall call;
  llmretry::RetryPolicy policy = no_jitter(1ms);
  llmretry::CallStats stats;
  llmretry::CallOptions options;
  std::vector<std::string> events;
  Received received;
};

}  // namespace

TEST_CASE("Hedging on loopback: a request that hangs is hedged, the hedge answers, the first is cancelled",
          "[curl_async][hedging]") {
  LoopbackProvider server;
  server.then(LoopbackProvider::hang(30s)).then(LoopbackProvider::chat_completion("from the hedge"));
  HedgedAsyncCall hedged(server, 50ms, false);
  hedged.run();  // returns once both requests ended: the hanging one was cancelled, not waited for 30 s
  REQUIRE_FALSE(hedged.received.error);
  CHECK(hedged.received.answer.body.find("from the hedge") != std::string::npos);
  CHECK(hedged.stats.attempts == 1);
  CHECK(hedged.stats.hedges == 1);
  CHECK(hedged.hedging.stats().wins == 1);
  const auto requests = server.requests();
  REQUIRE(requests.size() == 2);
  CHECK(requests[0].header("Idempotency-Key") == hedged.call.idempotency_key());
  CHECK(requests[1].header("Idempotency-Key") == hedged.call.idempotency_key());  // the provider may dedupe it
}

TEST_CASE("Hedging a streamed AsyncCall: the request that streams first wins, the other never reaches the handler",
          "[curl_async][hedging]") {
  LoopbackProvider server;
  auto slow_stream = LoopbackProvider::stream({"slow", "first"});
  slow_stream.delay = 30s;
  server.then(slow_stream).then(LoopbackProvider::stream({"fast", "hedge"}));
  HedgedAsyncCall hedged(server, 50ms, true);
  hedged.run();
  REQUIRE_FALSE(hedged.received.error);
  const auto& events = hedged.events;
  REQUIRE(events.size() == 3);  // one stream, the hedge's, never two interleaved
  CHECK(events[0].find("fast") != std::string::npos);
  CHECK(events[1].find("hedge") != std::string::npos);
  CHECK(hedged.call.stream().started());
  CHECK(hedged.call.stream().delivered_events() == 3);
  CHECK(server.requests().size() == 2);
  CHECK(hedged.hedging.stats().wins == 1);
}

TEST_CASE("Hedging a streamed AsyncCall: the first request streams first, its hedge in flight is cancelled",
          "[curl_async][hedging]") {
  LoopbackProvider server;
  auto first = LoopbackProvider::stream({"from", "first"});
  first.delay = 300ms;
  auto hedge = LoopbackProvider::stream({"never", "seen"});
  hedge.delay = 30s;
  server.then(first).then(hedge);
  HedgedAsyncCall hedged(server, 20ms, true);
  hedged.run();  // returns without waiting 30 s for the hedge: it was cancelled when the first one streamed
  REQUIRE_FALSE(hedged.received.error);
  REQUIRE(hedged.events.size() == 3);
  CHECK(hedged.events[0].find("from") != std::string::npos);
  CHECK(server.requests().size() == 2);
  CHECK(hedged.stats.hedges == 1);
  CHECK(hedged.hedging.stats().wins == 0);
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

namespace {

/// Sends `requests` chat completions at once on `client`, each answered "ok" by `server`. Returns how many
/// were answered 200.
int answered_at_once(AsyncClient& client, boost::asio::io_context& io, LoopbackProvider& server, int requests) {
  for (int i = 0; i < requests; ++i) server.then(LoopbackProvider::chat_completion("ok"));
  const auto request = chat_request(server);
  const auto options = options_for(Provider::openai);
  int ok = 0;
  for (int i = 0; i < requests; ++i)
    client.async_perform(request, options, [&](std::exception_ptr error, Response response) {
      if (!error && response.status == 200) ++ok;
    });
  io.run();
  return ok;
}

}  // namespace

TEST_CASE("Many requests at once on one thread", "[curl_async]") {
  LoopbackProvider server(0, 64);
  boost::asio::io_context io;
  AsyncClient client(io.get_executor());
  CHECK(answered_at_once(client, io, server, 50) == 50);
  CHECK(client.connections_opened() <= 50);
}

TEST_CASE("A limit of connections per host: the requests beyond it wait for one, all are answered", "[curl_async]") {
  LoopbackProvider server(0, 16);
  boost::asio::io_context io;
  llmretry::curl::ClientOptions held;
  held.max_host_connections = 2;
  AsyncClient client(io.get_executor(), held);
  CHECK(answered_at_once(client, io, server, 12) == 12);
  CHECK(client.connections_opened() == 2);
  CHECK(server.request_count() == 12);
}

TEST_CASE("A request that waits for a connection times out as not sent, before the one holding it ends",
          "[curl_async]") {
  LoopbackProvider server(0, 4);
  server.then(LoopbackProvider::hang(3000ms));  // answered after 3 s: holds the only connection meanwhile
  boost::asio::io_context io;
  llmretry::curl::ClientOptions held;
  held.max_host_connections = 1;
  AsyncClient client(io.get_executor(), held);
  const auto request = chat_request(server);
  auto patient = options_for(Provider::openai);
  patient.timeout = 10s;
  auto hurried = patient;
  hurried.timeout = 300ms;
  std::vector<std::string> ended;
  std::exception_ptr hurried_error;
  client.async_perform(request, patient, [&](std::exception_ptr error, Response) {
    ended.push_back(error ? "patient failed" : "patient");
  });
  client.async_perform(request, hurried, [&](std::exception_ptr error, Response) {
    hurried_error = error;
    ended.push_back("hurried");
  });
  io.run();
  REQUIRE(ended == std::vector<std::string>{"hurried", "patient"});
  const auto failure = failure_in(hurried_error);
  REQUIRE(failure);
  CHECK(failure->kind == FailureKind::timeout);
  CHECK(failure->sent == llmretry::Sent::not_sent);
  CHECK(server.request_count() == 1);
}

TEST_CASE("A limit of no connection, or above what libcurl takes, is refused", "[curl_async]") {
  boost::asio::io_context io;
  llmretry::curl::ClientOptions held;
  SECTION("none") { held.max_host_connections = 0; }
  SECTION("more than a long") { held.max_host_connections = std::numeric_limits<std::size_t>::max(); }
  CHECK_THROWS_WITH(AsyncClient(io.get_executor(), held),
                    llmretry_catch::contains("max_host_connections must be at least 1"));
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

// ---- Attacks: lifetimes, cancellation races, descriptors, callbacks that throw or re-enter. ----

namespace {

/// Returns how many descriptors the process has open (the entries of /proc/self/fd, less the one that
/// lists them); -1 where /proc is missing.
int open_descriptors() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int count = 0;
  while (const dirent* entry = ::readdir(dir))
    if (entry->d_name[0] != '.') ++count;
  ::closedir(dir);
  return count - 1;
}

/// A listening socket on 127.0.0.1 that never accepts, its backlog filled by connections of its own: a
/// client's SYN is dropped and its connect never completes.
class NeverAccepts {
 public:
  NeverAccepts() {
    listening_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listening_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(::listen(listening_, 0) == 0);
    socklen_t length = sizeof address;
    REQUIRE(::getsockname(listening_, reinterpret_cast<sockaddr*>(&address), &length) == 0);
    port_ = ntohs(address.sin_port);
    for (int i = 0; i < 4; ++i) {  // the accept queue (backlog 0 holds one) and the SYN queue
      const int filler = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
      (void)::connect(filler, reinterpret_cast<sockaddr*>(&address), sizeof address);
      fillers_.push_back(filler);
    }
  }
  NeverAccepts(const NeverAccepts&) = delete;
  NeverAccepts& operator=(const NeverAccepts&) = delete;
  ~NeverAccepts() {
    for (const int fd : fillers_) ::close(fd);
    ::close(listening_);
  }
  std::string base_url() const { return std::string("http://127.0.0.1:").append(std::to_string(port_)); }

 private:
  int listening_ = -1;
  int port_ = 0;
  std::vector<int> fillers_;
};

llmretry::testing::ScriptedResponse stalled_stream() {
  auto stalled = LoopbackProvider::stream({"Hel", "lo"});
  stalled.chunk_interval = 3000ms;  // the first event, then silence
  return stalled;
}

}  // namespace

TEST_CASE("A server that closes mid-body: a failure that may have been processed; the client goes on", "[curl_async]") {
  LoopbackProvider server;
  server.then(LoopbackProvider::closed_mid_body()).then(LoopbackProvider::chat_completion("after"));
  boost::asio::io_context io;
  AsyncClient client(io.get_executor());
  const auto request = chat_request(server);
  const auto options = options_for(Provider::openai);
  Received cut;
  client.async_perform(request, options, cut.handler());
  io.run();
  const auto failure = failure_in(cut.error);
  REQUIRE(failure);
  CHECK(failure->kind == FailureKind::connection);
  CHECK(failure->sent == llmretry::Sent::maybe_processed);
  io.restart();
  Received next;
  client.async_perform(request, options, next.handler());
  io.run();
  CHECK_FALSE(next.error);
  CHECK(next.answer.body.find("after") != std::string::npos);
}

TEST_CASE("A server that never accepts: the connect timeout fires, not sent", "[curl_async]") {
  NeverAccepts server;
  boost::asio::io_context io;
  AsyncClient client(io.get_executor());
  llmretry::curl::Request request;
  request.url = server.base_url() + "/v1/chat/completions";
  request.body = "{}";
  auto options = options_for(Provider::openai);
  options.connect_timeout = 200ms;
  options.timeout = 60'000ms;
  Received received;
  client.async_perform(request, options, received.handler());
  io.run();
  REQUIRE(received.called);
  const auto failure = failure_in(received.error);
  REQUIRE(failure);
  CHECK(failure->kind == FailureKind::timeout);
  CHECK(failure->sent == llmretry::Sent::not_sent);
}

TEST_CASE("Idle timeout: a stream that stalls, and a server that says nothing, end the attempt", "[curl_async]") {
  LoopbackProvider server;
  boost::asio::io_context io;
  AsyncClient client(io.get_executor());
  auto options = options_for(Provider::openai);
  options.timeout = 60'000ms;  // only the idle timeout can end these attempts soon
  options.idle_timeout = 300ms;
  std::string text;

  SECTION("silent before the first byte") {
    server.then(LoopbackProvider::hang(30'000ms));
    const auto request = chat_request(server);
    Received received;
    client.async_perform(request, options, received.handler());
    io.run();
    const auto failure = failure_in(received.error);
    REQUIRE(failure);
    CHECK(failure->kind == FailureKind::timeout);
    try {
      std::rethrow_exception(received.error);
    } catch (const std::exception& e) {
      text = e.what();
    }
  }
  SECTION("a stream that stalls after its first event") {
    server.then(stalled_stream());
    AsyncCall call(client, chat_request(server), options);
    int events = 0;
    call.on_event([&](const llmretry::SseEvent&) { ++events; });
    const llmretry::RetryPolicy policy = no_jitter(1ms);
    Received received;
    llmretry::asio::async_call_with_retry<Response>(io.get_executor(), std::ref(call), policy, received.handler());
    io.run();
    CHECK(events == 1);
    CHECK_THROWS_AS(std::rethrow_exception(received.error), llmretry::StreamInterrupted);
    try {
      std::rethrow_exception(received.error);
    } catch (const std::exception& e) {
      text = e.what();
    }
    CHECK(call.attempts() == 1);
  }
  CHECK(text.find("idle_timeout") != std::string::npos);
}

TEST_CASE("A streaming handler that throws: the call ends with its exception, unchanged, never retried",
          "[curl_async]") {
  LoopbackProvider server;
  server.then(LoopbackProvider::stream({"Hel", "lo"})).then(LoopbackProvider::chat_completion("after"));
  boost::asio::io_context io;
  AsyncClient client(io.get_executor());
  AsyncCall call(client, chat_request(server), options_for(Provider::openai));
  call.on_event([](const llmretry::SseEvent&) { throw std::domain_error("the handler's own"); });
  const llmretry::RetryPolicy policy = no_jitter(1ms);
  Received received;
  llmretry::asio::async_call_with_retry<Response>(io.get_executor(), std::ref(call), policy, received.handler());
  io.run();
  CHECK_THROWS_AS(std::rethrow_exception(received.error), std::domain_error);
  CHECK(call.attempts() == 1);
  io.restart();
  Received next;
  const auto request = chat_request(server);
  const auto options = options_for(Provider::openai);
  client.async_perform(request, options, next.handler());
  io.run();
  CHECK_FALSE(next.error);
}

TEST_CASE("A completion handler that throws leaves the client and the other requests sound", "[curl_async]") {
  LoopbackProvider server(0, 16);
  constexpr int requests = 10;
  for (int i = 0; i < requests; ++i) server.then(LoopbackProvider::chat_completion("ok"));
  boost::asio::io_context io;
  AsyncClient client(io.get_executor());
  const auto request = chat_request(server);
  const auto options = options_for(Provider::openai);
  int answered = 0;
  for (int i = 0; i < requests; ++i)
    client.async_perform(request, options, [&, i](std::exception_ptr error, Response) {
      if (!error) ++answered;
      if (i % 3 == 0) throw std::runtime_error("the user's handler");
    });
  int thrown = 0;
  for (;;) {
    try {
      io.run();
      break;
    } catch (const std::runtime_error&) {
      ++thrown;
      io.restart();
    }
  }
  CHECK(thrown == 4);
  CHECK(answered == requests);
}

TEST_CASE("A cancel from the streaming handler stops the transfer once libcurl has returned", "[curl_async]") {
  LoopbackProvider server;
  auto slow = LoopbackProvider::stream({"a", "b", "c", "d"});
  slow.chunk_interval = 50ms;
  server.then(slow).then(LoopbackProvider::chat_completion("after"));
  boost::asio::io_context io;
  AsyncClient client(io.get_executor());
  AsyncCall call(client, chat_request(server), options_for(Provider::openai));
  boost::asio::cancellation_signal cancel;
  int events = 0;
  call.on_event([&](const llmretry::SseEvent&) {
    if (++events == 1) cancel.emit(boost::asio::cancellation_type::terminal);  // inside libcurl's write callback
  });
  const llmretry::RetryPolicy policy = no_jitter(1ms);
  llmretry::CallStats stats;
  llmretry::CallOptions call_options;
  call_options.stats = &stats;
  Received received;
  llmretry::asio::async_call_with_retry<Response>(
      io.get_executor(), std::ref(call), policy, call_options,
      boost::asio::bind_cancellation_slot(cancel.slot(), received.handler()));
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

TEST_CASE("A request started from a streaming handler is made", "[curl_async]") {
  LoopbackProvider server;
  server.then(LoopbackProvider::stream({"a", "b"})).then(LoopbackProvider::chat_completion("nested"));
  boost::asio::io_context io;
  AsyncClient client(io.get_executor());
  const auto request = chat_request(server);
  const auto options = options_for(Provider::openai);
  AsyncCall call(client, chat_request(server), options_for(Provider::openai));
  Received nested;
  bool started = false;
  call.on_event([&](const llmretry::SseEvent&) {
    if (std::exchange(started, true)) return;
    client.async_perform(request, options, nested.handler());  // inside libcurl's write callback
  });
  const llmretry::RetryPolicy policy = no_jitter(1ms);
  Received received;
  llmretry::asio::async_call_with_retry<Response>(io.get_executor(), std::ref(call), policy, received.handler());
  io.run();
  CHECK_FALSE(received.error);
  REQUIRE(nested.called);
  CHECK_FALSE(nested.error);
  CHECK(nested.answer.body.find("nested") != std::string::npos);
}

TEST_CASE("A cancel at any moment, completion included: one outcome, no crash", "[curl_async]") {
  LoopbackProvider server;
  constexpr int rounds = 40;
  for (int i = 0; i < rounds; ++i) server.then(LoopbackProvider::chat_completion("ok"));
  boost::asio::io_context io;
  AsyncClient client(io.get_executor());
  const auto request = chat_request(server);
  const auto options = options_for(Provider::openai);
  int ok = 0;
  int aborted = 0;
  for (int round = 0; round < rounds; ++round) {
    boost::asio::cancellation_signal cancel;
    int calls = 0;
    std::exception_ptr error;
    client.async_perform(request, options,
                         boost::asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr e, Response) {
                           ++calls;
                           error = std::move(e);
                         }));
    // Let the request go `round` steps, then cancel it, whatever it is doing; and again after completion.
    io.restart();
    for (int step = 0; step < round && calls == 0 && io.run_one() > 0; ++step) {}
    cancel.emit(boost::asio::cancellation_type::terminal);
    io.run();
    cancel.emit(boost::asio::cancellation_type::terminal);
    io.restart();
    io.run();
    REQUIRE(calls == 1);
    if (!error) ++ok;
    else if (is_cancelled(error)) ++aborted;
  }
  CHECK(ok + aborted == rounds);
}

TEST_CASE("Many requests one after another leak no descriptor", "[curl_async]") {
  const int before = open_descriptors();
  {
    LoopbackProvider server;
    constexpr int rounds = 60;
    for (int i = 0; i < rounds; ++i)
      server.then(i % 3 == 0   ? LoopbackProvider::closed_mid_body()
                  : i % 3 == 1 ? LoopbackProvider::chat_completion("ok")
                               : LoopbackProvider::hang(300ms));
    boost::asio::io_context io;
    AsyncClient client(io.get_executor());
    const auto request = chat_request(server);
    auto options = options_for(Provider::openai);
    options.timeout = 100ms;  // the hangs time out: their connections are closed
    int during = -1;
    for (int i = 0; i < rounds; ++i) {
      Received received;
      client.async_perform(request, options, received.handler());
      io.restart();
      io.run();
      REQUIRE(received.called);
      if (i == 10) during = open_descriptors();
    }
    CHECK(open_descriptors() <= during + 4);  // no growth with the rounds: at most one connection kept
  }
  CHECK(open_descriptors() == before);
}

TEST_CASE("A thousand requests at once, the client destroyed with some in flight", "[curl_async]") {
  const int before = open_descriptors();
  {
    LoopbackProvider server(0, 64);
    constexpr int requests = 1000;
    for (int i = 0; i < requests; ++i)
      server.then(i < 200 ? LoopbackProvider::chat_completion("ok") : LoopbackProvider::hang(30'000ms));
    boost::asio::io_context io;
    std::optional<AsyncClient> client(std::in_place, io.get_executor());
    const auto request = chat_request(server);
    const auto options = options_for(Provider::openai);
    int ok = 0;
    int aborted = 0;
    int other = 0;
    for (int i = 0; i < requests; ++i)
      client->async_perform(request, options, [&](std::exception_ptr error, Response) {
        if (!error) ++ok;
        else if (is_cancelled(error)) ++aborted;
        else ++other;
        if (ok == 50 && client) client.reset();  // from a completion handler, with hundreds in flight
      });
    io.run();  // returns: nothing is left to wait for once the client is gone
    CHECK(ok + aborted + other == requests);
    CHECK(ok >= 50);
    CHECK(aborted > 0);
    CHECK_FALSE(client);
  }
  CHECK(open_descriptors() == before);
}

TEST_CASE("A streaming handler that destroys the client: its request ends aborted, nothing leaks", "[curl_async]") {
  const int before = open_descriptors();
  {
    LoopbackProvider server;
    auto slow = LoopbackProvider::stream({"a", "b", "c", "d", "e", "f"});
    slow.chunk_interval = 100ms;
    server.then(slow).then(LoopbackProvider::hang(30'000ms));
    boost::asio::io_context io;
    std::optional<AsyncClient> client(std::in_place, io.get_executor());
    const auto request = chat_request(server);
    const auto options = options_for(Provider::openai);
    AsyncCall call(*client, chat_request(server), options_for(Provider::openai));
    Received other;
    call.on_event([&](const llmretry::SseEvent&) {  // inside libcurl's write callback
      if (!client) return;
      if (call.stream().delivered_events() == 1) client->async_perform(request, options, other.handler());  // the hang
      else if (server.request_count() == 2) client.reset();
    });
    const llmretry::RetryPolicy policy = no_jitter(1ms);
    Received received;
    llmretry::asio::async_call_with_retry<Response>(io.get_executor(), std::ref(call), policy, received.handler());
    io.run();
    REQUIRE(received.called);
    REQUIRE(other.called);
    CHECK_FALSE(client);
    CHECK(is_cancelled(received.error));
    CHECK(is_cancelled(other.error));
  }
  CHECK(open_descriptors() == before);
}

TEST_CASE("A host name to resolve: its resolver's descriptors are watched and let go", "[curl_async]") {
  const int before = open_descriptors();
  {
    LoopbackProvider server;
    constexpr int rounds = 20;
    for (int i = 0; i < rounds; ++i)
      server.then(i % 2 == 0 ? LoopbackProvider::closed_mid_body() : LoopbackProvider::chat_completion("ok"));
    boost::asio::io_context io;
    AsyncClient client(io.get_executor());
    auto request = chat_request(server);
    request.url.replace(request.url.find("127.0.0.1"), 9, "localhost");
    const auto options = options_for(Provider::openai);
    int ok = 0;
    for (int i = 0; i < rounds; ++i) {
      Received received;
      client.async_perform(request, options, received.handler());
      io.restart();
      io.run();
      REQUIRE(received.called);
      if (!received.error) ++ok;
    }
    CHECK(ok == rounds / 2);
  }
  CHECK(open_descriptors() == before);
}
