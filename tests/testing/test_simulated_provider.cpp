#include <llmretry/testing/simulated_provider.hpp>

#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "llmretry_catch.hpp"

using namespace llmretry;
using llmretry::testing::parse_script_item;
using llmretry::testing::SimulatedProvider;
using namespace std::chrono_literals;

namespace {
std::string error_message(const std::vector<std::string>& script) {
  try {
    SimulatedProvider provider{script};
  } catch (const std::invalid_argument& error) {
    return error.what();
  }
  return "";
}

// Returns the exception of type E that f throws, or nullopt when it throws nothing.
template <class E, class F>
std::optional<E> thrown_by(F&& f) {
  try {
    f();
  } catch (const E& error) {
    return error;
  }
  return std::nullopt;
}
}  // namespace

TEST_CASE("rate_limit, rate_limit:SECONDS, timeout, server_error, ok: the exceptions and messages of a real adapter",
          "[simulated_provider]") {
  SimulatedProvider provider{"rate_limit", "rate_limit:2.5", "timeout", "server_error", "ok"};
  const auto plain = thrown_by<RateLimited>([&] { provider.call(); });
  REQUIRE(plain);
  CHECK_FALSE(plain->provider_wait());
  CHECK(std::string(plain->what()) == "HTTP 429: rate limited (simulated).");
  const auto with_wait = thrown_by<RateLimited>([&] { provider.call(); });
  REQUIRE(with_wait);
  CHECK(with_wait->provider_wait() == 2500ms);
  const auto timeout = thrown_by<ProviderTimeout>([&] { provider.call(); });
  REQUIRE(timeout);
  CHECK(timeout->failure().sent == Sent::maybe_processed);
  CHECK(std::string(timeout->what()) == "The provider did not answer within the timeout (simulated).");
  const auto server = thrown_by<ProviderError>([&] { provider.call(); });
  REQUIRE(server);
  CHECK(server->status() == 503);
  CHECK(std::string(server->what()) == "HTTP 503: service unavailable (simulated).");
  CHECK_NOTHROW(provider.call());
  CHECK(provider.call([] { return 5; }) == 5);  // after the script: always ok
  CHECK(provider.calls() == 6);
}

TEST_CASE("The extended vocabulary", "[simulated_provider]") {
  const auto failure = [](const char* item) { return *parse_script_item(item).failure; };
  CHECK(failure("rate_limit_ms:511").provider_wait == 511ms);
  CHECK(failure("rate_limit_ms:0.5").provider_wait == 1ms);
  CHECK(failure("connect_timeout").kind == FailureKind::timeout);
  CHECK(failure("connect_timeout").sent == Sent::not_sent);
  CHECK(failure("connection_refused").kind == FailureKind::connection);
  CHECK(failure("connection_refused").sent == Sent::not_sent);
  CHECK(failure("connection_reset").sent == Sent::maybe_processed);
  CHECK(failure("overloaded").status == 529);
  CHECK(failure("overloaded").kind == FailureKind::server_error);
  CHECK(failure("quota_exhausted").kind == FailureKind::quota_exhausted);
  CHECK(failure("quota_exhausted").status == 429);
  CHECK(failure("context_length").kind == FailureKind::context_length);
  CHECK(failure("content_filter").kind == FailureKind::content_filter);
  CHECK(failure("status:401").kind == FailureKind::authentication);
  CHECK(failure("status:503:4").provider_wait == 4s);
  CHECK(failure("status:429:0.25").kind == FailureKind::rate_limited);
  CHECK(failure("status:429:0.25").provider_wait == 250ms);
  CHECK(failure("status:599").status == 599);
  CHECK_FALSE(failure("status:400").provider_wait);
  CHECK_FALSE(parse_script_item("ok").failure);
}

TEST_CASE("Repeats", "[simulated_provider]") {
  CHECK(parse_script_item("server_error*3").repeat == 3);
  CHECK(parse_script_item("ok*1000000").repeat == 1'000'000);  // the largest count
  CHECK(parse_script_item("ok*0001").repeat == 1);
  SimulatedProvider provider{"server_error*2", "ok*1", "timeout"};
  CHECK_THROWS_AS(provider.call(), ProviderError);
  CHECK_THROWS_AS(provider.call(), ProviderError);
  CHECK_NOTHROW(provider.call());
  CHECK_THROWS_AS(provider.call(), ProviderTimeout);
  CHECK_NOTHROW(provider.call());
}

TEST_CASE("A malformed script item is rejected, naming it and its position", "[simulated_provider]") {
  CHECK(error_message({"ok", "rate_limt"}).find("\"rate_limt\" (expected") != std::string::npos);
  CHECK(error_message({"ok", "rate_limt"}).find("at position 1") != std::string::npos);
  for (const char* bad : {"",
                          "OK",
                          "rate_limit:",
                          "rate_limit:-1",
                          "rate_limit:x",
                          "rate_limit_ms",
                          "status:200",
                          "status:600",
                          "status:4000",
                          "status:40",
                          "status:503:",
                          "server_error*0",
                          "server_error*",
                          "server_error*x",
                          "server_error*1000001",
                          "server_error*99999999999999999999",
                          "server_error*+3",
                          "server_error* 3",
                          "status:4x9",
                          "status:+42",
                          "status: 429",
                          "timeout ",
                          "*3"}) {
    CAPTURE(bad);
    CHECK(error_message({bad}).find(std::string("\"") + bad + "\"") != std::string::npos);
  }
}

TEST_CASE("try_call reports failures as values", "[simulated_provider]") {
  SimulatedProvider provider{"rate_limit:1", "status:404"};
  const auto first = provider.try_call([] { return 1; });
  REQUIRE_FALSE(first.has_value());
  CHECK(first.error().failure.provider_wait == 1s);
  CHECK(first.error().message == "HTTP 429: rate limited (simulated).");
  CHECK(provider.try_call().error().failure.kind == FailureKind::not_found);
  CHECK(*provider.try_call([] { return 3; }) == 3);
  CHECK(provider.calls() == 3);
}

TEST_CASE("Calls from several threads each take one item", "[simulated_provider][threads]") {
  SimulatedProvider provider{"server_error*400"};
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (std::size_t t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i)
        if (provider.next()) ++failures[t];
    });
  for (auto& thread : threads) thread.join();
  CHECK(failures[0] + failures[1] + failures[2] + failures[3] == 400);
  CHECK(provider.calls() == 800);
}
