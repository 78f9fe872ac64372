// Every Redis failure is a redis::RedisError naming the operation and the server: not running, killed, hung,
// wrong type, script error. The connection comes back by itself once the server does.
#include <llmretry/redis/idempotency_store.hpp>
#include <llmretry/redis/job_queue.hpp>
#include <llmretry/redis/operations.hpp>
#include <llmretry/redis/rate_limiter.hpp>

#include <chrono>
#include <stdexcept>
#include <string>

#include "llmretry_catch.hpp"
#include "redis_fixture.hpp"

using namespace std::chrono_literals;
using llmretry::redis::ErrorKind;
using llmretry::redis::RedisError;

namespace {

/// Runs `call`, which must throw a redis::RedisError of `kind` for `operation`; returns its message.
template <class Call>
std::string error_of(Call call, ErrorKind kind, const std::string& operation) {
  try {
    call();
  } catch (const RedisError& error) {
    CHECK(error.kind() == kind);
    CHECK(error.operation() == operation);
    return error.what();
  }
  FAIL("no redis::RedisError");
  return {};
}

}  // namespace

TEST_CASE("redis: a server that is not running is a connection error naming the server", "[redis][errors]") {
  int port = 0;
  {
    llmretry::testing::RedisServer server;
    port = server.port();
  }  // stopped: nothing listens there now
  llmretry::redis::Options options;
  options.port = port;
  const std::string message =
      error_of([&] { llmretry::redis::Connection connection(options); }, ErrorKind::connection, "connect");
  CHECK(message.find("redis connect on 127.0.0.1:" + std::to_string(port) + ": connection: ") == 0);
}

TEST_CASE("redis: a server killed, hung, then back", "[redis][errors]") {
  llmretry::testing::RedisServer server;
  auto options = server.connection_options();
  options.command_timeout = 200ms;
  llmretry::redis::Connection connection(options);
  llmretry::redis::IdempotencyStore keys(connection);
  REQUIRE(keys.claim("k", "fp", "t").status == llmretry::store::ClaimStatus::claimed);

  SECTION("killed: the operation fails with a connection error, and works again after a restart") {
    server.kill();
    const std::string message =
        error_of([&] { (void)keys.claim("k", "fp", "t"); }, ErrorKind::connection, "idempotency claim");
    CHECK(message.find("redis idempotency claim on 127.0.0.1:") == 0);
    error_of([&] { (void)keys.release("k", "t"); }, ErrorKind::connection, "idempotency release");
    server.restart();  // not append-only: the claim is gone, and the scripts too
    CHECK(keys.claim("k", "fp", "t2").status == llmretry::store::ClaimStatus::claimed);
  }
  SECTION("hung: a timeout, within the command timeout") {
    server.pause();
    const auto start = std::chrono::steady_clock::now();
    error_of([&] { (void)keys.claim("k", "fp", "t"); }, ErrorKind::timeout, "idempotency claim");
    CHECK(std::chrono::steady_clock::now() - start < 2s);
    server.resume();
    CHECK(keys.claim("k", "fp", "t").status == llmretry::store::ClaimStatus::claimed);
  }
}

TEST_CASE("redis: wrong types and script errors are reply errors naming the operation", "[redis][errors]") {
  auto options = redis_fixture::unique_options();
  llmretry::redis::Connection connection(options);

  SECTION("a key of another type") {
    (void)connection.command("set up", {"SET", options.prefix + "idem:k", "a string"});
    llmretry::redis::IdempotencyStore keys(connection);
    const std::string message =
        error_of([&] { (void)keys.claim("k", "fp", "t"); }, ErrorKind::reply, "idempotency claim");
    CHECK(message.find("WRONGTYPE") != std::string::npos);
  }
  SECTION("a script that fails on the data it finds") {
    llmretry::redis::JobQueue queue(connection, "broken");
    REQUIRE(queue.enqueue({"job", "p", 0, 0ms}));
    (void)connection.command("set up", {"HSET", options.prefix + "queue:{broken}:job:job", "attempts", "many"});
    const std::string message = error_of([&] { (void)queue.take(); }, ErrorKind::reply, "queue take");
    CHECK(message.find("script") != std::string::npos);
  }
  SECTION("an unexpected reply type") {
    const auto reply = connection.command("ping", {"PING"});
    error_of([&] { (void)reply.integer(); }, ErrorKind::reply, "ping");
    error_of([&] { (void)reply[0]; }, ErrorKind::reply, "ping");
  }
  SECTION("scripts flushed by the server are loaded again") {
    llmretry::redis::IdempotencyStore keys(connection);
    REQUIRE(keys.claim("k", "fp", "t").status == llmretry::store::ClaimStatus::claimed);
    (void)connection.command("flush scripts", {"SCRIPT", "FLUSH"});
    CHECK(keys.claim("k", "fp", "t2").status == llmretry::store::ClaimStatus::in_flight);
  }
}

TEST_CASE("redis: an operation recorded before its requests were stored reads as one request", "[redis]") {
  auto options = redis_fixture::unique_options();
  llmretry::redis::Connection connection(options);
  llmretry::redis::OperationsTable table(connection);
  REQUIRE(table.begin("old", "openai", "gpt").started);
  REQUIRE(table.complete("old", "req_1", llmretry::Cost{1, 10, 20}));
  (void)connection.command("set up", {"HDEL", options.prefix + "op:old", "requests"});  // as an older version wrote it
  const auto found = table.find("old");
  REQUIRE(found);
  CHECK(found->status == llmretry::store::OperationStatus::completed);
  CHECK(found->usage == llmretry::Cost{1, 10, 20});
}

TEST_CASE("redis: a shared rate limiter fails closed when the server is gone or hung", "[redis][errors]") {
  llmretry::testing::RedisServer server;
  auto options = server.connection_options();
  options.command_timeout = 200ms;
  llmretry::redis::Connection connection(options);
  llmretry::Limits limits;
  limits[llmretry::Dimension::requests_per_minute] = llmretry::Limit::per_minute(60, 1);
  limits[llmretry::Dimension::tokens_per_minute] = llmretry::Limit::per_minute(6000);
  llmretry::redis::RateLimiter limiter(connection, "deployment", limits);
  const auto now = std::chrono::steady_clock::now();
  auto open = limiter.reserve(llmretry::Cost{1, 100, 0}, now);
  REQUIRE(open.granted());

  SECTION("killed: every operation throws naming it, a reservation is closed with its capacity charged") {
    server.kill();
    const std::string message =
        error_of([&] { (void)limiter.reserve(llmretry::Cost{}, now); }, ErrorKind::connection, "rate limiter reserve");
    CHECK(message.find("redis rate limiter reserve on 127.0.0.1:") == 0);
    CHECK(limiter.reserve(llmretry::Cost{1, 7000, 0}, now).status() == llmretry::ReservationStatus::too_large);
    error_of(
        [&] {
          limiter.settle(open, llmretry::Cost{1, 10, 0}, now);
        },
        ErrorKind::connection, "rate limiter settle");
    CHECK_FALSE(open.open());  // a repeated settle or cancel cannot give capacity back twice
    limiter.cancel(open);      // nothing left to do: no call, no throw
    server.restart();          // not append-only: every limit is full again
    CHECK(limiter.reserve(llmretry::Cost{}, now).wait_after(now) == 0ms);
    auto next = limiter.reserve(llmretry::Cost{}, now);
    CHECK(next.wait_after(now) > 500ms);  // a second, less the server time between the two
    server.kill();
    error_of([&] { limiter.cancel(next); }, ErrorKind::connection, "rate limiter cancel");
    CHECK_FALSE(next.open());
    server.restart();
  }
  SECTION("hung: a timeout, within the command timeout") {
    server.pause();
    const auto start = std::chrono::steady_clock::now();
    error_of([&] { (void)limiter.reserve(llmretry::Cost{}, now); }, ErrorKind::timeout, "rate limiter reserve");
    CHECK(std::chrono::steady_clock::now() - start < 2s);
    server.resume();
    CHECK(limiter.reserve(llmretry::Cost{}, now).granted());
  }
}

TEST_CASE("options_from_url reads redis://HOST[:PORT] and names what is wrong, never quoting the URL") {
  using llmretry::redis::options_from_url;
  const auto options = options_from_url("redis://10.0.0.5:6380");
  CHECK(options.host == "10.0.0.5");
  CHECK(options.port == 6380);
  CHECK(options_from_url("redis://cache").port == 6379);
  SECTION("an IPv6 address loses its brackets") {
    const auto ipv6 = options_from_url("redis://[::1]:6380");
    CHECK(ipv6.host == "::1");
    CHECK(ipv6.port == 6380);
    CHECK(options_from_url("redis://[fe80::1]").host == "fe80::1");
    CHECK(options_from_url("redis://[fe80::1]").port == 6379);
  }
  const auto message = [](const char* url) {
    try {
      (void)options_from_url(url);
    } catch (const std::invalid_argument& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  SECTION("a user or password is refused, and the message does not show it") {
    for (const char* url :
         {"redis://:hunter22@cache:6379", "redis://default:hunter22@cache", "redis://hunter22@cache"}) {
      CAPTURE(url);
      const std::string text = message(url);
      CHECK_THAT(text, llmretry_catch::contains("has a user or password"));
      CHECK_THAT(text, !llmretry_catch::contains("hunter22"));
    }
  }
  SECTION("each malformed URL gets its reason, without the URL") {
    CHECK(message("http://cache:6379") == "the Redis URL does not begin with redis:// (expected redis://HOST[:PORT])");
    CHECK_THAT(message("redis://:6379"), llmretry_catch::contains("has no host"));
    CHECK_THAT(message("redis://"), llmretry_catch::contains("has no host"));
    CHECK_THAT(message("redis://[]:6379"), llmretry_catch::contains("has no host"));
    CHECK_THAT(message("redis://cache:0"), llmretry_catch::contains("has a port that is not a number from 1 to 65535"));
    CHECK_THAT(message("redis://cache:99999"), llmretry_catch::contains("not a number from 1 to 65535"));
    CHECK_THAT(message("redis://cache:x1"), llmretry_catch::contains("not a number from 1 to 65535"));
    CHECK_THAT(message("redis://cache:"), llmretry_catch::contains("not a number from 1 to 65535"));
    CHECK_THAT(message("redis://cache:6379/0"), llmretry_catch::contains("has a path"));
    CHECK_THAT(message("redis://cache?db=1"), llmretry_catch::contains("has a path"));
    CHECK_THAT(message("redis://[::1:6379"), llmretry_catch::contains("without its closing ']'"));
    CHECK_THAT(message("redis://[::1]6379"), llmretry_catch::contains("text after its IPv6 address"));
    CHECK_THAT(message("redis://::1:6379"), llmretry_catch::contains("outside brackets"));
    for (const char* url : {"redis://secret-host:65536", "redis://secret-host/x", "redis://[secret-host"}) {
      CAPTURE(url);
      CHECK_THAT(message(url), !llmretry_catch::contains("secret-host"));
    }
  }
}
