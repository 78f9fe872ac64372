// The C++ snippets of README.md and docs/, compiled and run as written: tests/CMakeLists.txt extracts each
// block marked `<!-- compiled: NAME -->` into readme/NAME.inc, included below after the stand-ins it names.
// The snippets that speak HTTP (LLMRETRY_README_HTTP: curl and the loopback provider are built) run against
// the loopback provider.
#include <llmretry/fallback.hpp>
#include <llmretry/json/estimate.hpp>
#include <llmretry/json/routing_policy.hpp>
#include <llmretry/json/usage.hpp>
#include <llmretry/llmretry.hpp>
#include <llmretry/metrics.hpp>
#include <llmretry/testing.hpp>
#if defined(LLMRETRY_README_HTTP)
#include <llmretry/curl/curl.hpp>
#include <llmretry/json/error_fields.hpp>
#include <llmretry/loopback/provider.hpp>
#endif

#include <nlohmann/json.hpp>

#if defined(LLMRETRY_README_PROMETHEUS_CPP)
#include <llmretry/prometheus_cpp.hpp>

#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#endif

#if defined(LLMRETRY_README_ASYNC)
#include <llmretry/asio.hpp>
#include <llmretry/curl/async.hpp>

#include <boost/asio/io_context.hpp>
#if defined(BOOST_ASIO_HAS_CO_AWAIT)
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#endif
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 at -O1 (the ThreadSanitizer build), inlining an Asio coroutine frame's own operator new and
// delete, pairs the frame's allocation with another delete and warns; the frame class allocates and frees it.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
#endif

#include <chrono>
#include <functional>
#include <initializer_list>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "llmretry_catch.hpp"

namespace quick_start {

// Stand-ins for the application's HTTP client: it refuses one connection, then answers a 429 with
// `retry-after-ms: 1`, then 200.
struct ConnectRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct ReadTimeout : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct HttpResponse {
  int status;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};
int posts = 0;
HttpResponse http_post(const std::string& /*path*/, const std::string& body) {
  ++posts;
  if (posts == 1) throw ConnectRefused("connection refused");
  if (posts == 2) return {429, {{"retry-after-ms", "1"}}, R"({"error": {"code": "rate_limit_exceeded"}})"};
  return {200, {}, "answer to " + body};
}
std::string error_code_of(std::string_view body) {
  return body.find("insufficient_quota") != std::string_view::npos ? "insufficient_quota" : "";
}

#include "readme/quick_start.inc"

}  // namespace quick_start

TEST_CASE("README: quick start", "[readme]") {
  CHECK(quick_start::ask("hello") == "answer to hello");
  CHECK(quick_start::posts == 3);
}

namespace on_retry_hook {

#include "readme/on_retry_hook.inc"

}  // namespace on_retry_hook

TEST_CASE("docs/calling.md: an on-retry hook that logs", "[readme]") {
  using llmretry_catch::contains;
  std::ostringstream log;
  struct Capture {  // std::clog writes to `log` while it lives, whatever the call throws
    std::streambuf* kept;
    ~Capture() { std::clog.rdbuf(kept); }
  } capture{std::clog.rdbuf(log.rdbuf())};
  int calls = 0;
  const std::string answer = on_retry_hook::ask_logged([&]() -> std::string {
    if (++calls == 1) throw llmretry::ProviderError("overloaded", 503);
    return "answer";
  });
  CHECK(answer == "answer");
  CHECK(calls == 2);
  CHECK_THAT(log.str(), contains("attempt 1 failed ("));
}

namespace engine {

#include "readme/engine.inc"

}  // namespace engine

TEST_CASE("README: driving a call with CallEngine", "[readme]") {
  using namespace std::chrono_literals;
  std::vector<int> attempts;
  const auto took = engine::drive([&](int number) -> std::optional<llmretry::Failure> {
    attempts.push_back(number);
    if (number < 3) return llmretry::classify_status(503);
    return std::nullopt;
  });
  CHECK(attempts == std::vector<int>{1, 2, 3});
  CHECK(took <= 1500ms);  // two full-jitter waits of at most 0.5 s and 1 s, in virtual time
  CHECK(engine::drive([](int) { return std::optional<llmretry::Failure>(llmretry::classify_status(400)); }) == 0ms);
}

namespace testing_your_code {

// Stand-in for the application's client wrapper, scripted with SimulatedProvider.
struct Provider {
  Provider(std::initializer_list<std::string> script) : scripted(script) {}
  std::string complete(const std::string& /*prompt*/) {
    return scripted.call([] { return std::string("summary"); });
  }
  llmretry::testing::SimulatedProvider scripted;
};

#include "readme/testing_your_code.inc"

}  // namespace testing_your_code

namespace pacing {

// Stand-in for the application's client: returns the answer to `prompt`.
int completions = 0;
std::string complete(const std::string& prompt, int /*max_tokens*/) {
  ++completions;
  return "summary of " + prompt;
}

#include "readme/pacing.inc"

}  // namespace pacing

TEST_CASE("README: pacing", "[readme]") {
  CHECK(pacing::summarise("ticket 1") == "summary of ticket 1");
  CHECK(pacing::summarise("ticket 2") == "summary of ticket 2");
  CHECK(pacing::completions == 2);
  const auto stats = pacing::gpt4o_mini().limiter().stats();
  CHECK(stats.granted == 2);
  CHECK(stats.tokens_reserved == 2 * (2 + 300));
  CHECK(pacing::gpt4o_mini().limiter().limit(llmretry::Dimension::requests_per_minute)->burst == 10);
}

namespace pacing_json {

// Stand-in for the application's client: posts the body, returns the answer.
std::string post(const std::string& text) { return "answer to " + text; }

#include "readme/pacing_json.inc"

}  // namespace pacing_json

TEST_CASE("README: pacing, estimated from the request body", "[readme]") {
  llmretry::DeploymentOptions options;
  options.name = "openai/gpt-4o-mini";
  options.limits[llmretry::Dimension::tokens_per_minute] = llmretry::Limit::per_minute_paced(300'000);
  llmretry::Deployment deployment(options);
  const std::string text = R"({"model": "gpt-4o-mini", "max_tokens": 300, "n": 2})";  // 51 characters: 13 tokens
  CHECK(pacing_json::complete_body(deployment, text) == "answer to " + text);
  CHECK(deployment.limiter().stats().tokens_reserved == 13 + 2 * 300);
}

namespace fleet {

// Stand-ins for the application: options by name, limits, the routing policy file, and one attempt on a
// route (the primary answers 503, the first fallback answers).
llmretry::CircuitBreakerOptions breaker_named(const char* name) {
  llmretry::CircuitBreakerOptions options;
  options.name = name;
  return options;
}
llmretry::DeploymentOptions deployment_named(const char* name, const llmretry::Limits& limits) {
  llmretry::DeploymentOptions options;
  options.name = name;
  options.limits = limits;
  return options;
}
const llmretry::Limits anthropic_limits = llmretry::Limits::per_minute(50, 40'000);
const llmretry::Limits openai_limits = llmretry::Limits::per_minute(500, 200'000);
std::string read_file(const std::string& /*path*/) {
  return R"({"task": "support_ticket_summary",
             "primary": {"provider": "anthropic", "model": "claude-sonnet-4.6"},
             "fallbacks": [{"provider": "openai", "model": "gpt-5.5", "when": ["provider_5xx"]}]})";
}
std::vector<std::string> sent;
std::string send(const llmretry::Route& route, const std::string& body) {
  sent.push_back(route.name);
  if (route.provider == "anthropic") throw llmretry::ProviderError("overloaded", 503);
  return route.name + " answers " + body;
}

#include "readme/fleet.inc"

}  // namespace fleet

TEST_CASE("README: many calls at once", "[readme]") {
  fleet::Fleet shared;
  CHECK(fleet::ask(shared, "Summarise", "the ticket") == "openai/gpt-5.5 answers the ticket");
  CHECK(fleet::sent.front() == "anthropic/claude-sonnet-4.6");
  CHECK(fleet::sent.back() == "openai/gpt-5.5");
}

namespace metrics {

// Stand-ins for the application: its policy (short waits), and its client, which answers 503 once, then
// an answer whose body reports the usage.
llmretry::RetryPolicy policy() {
  llmretry::RetryPolicy policy;
  policy.base = std::chrono::milliseconds{1};
  return policy;
}
struct Answer {
  std::string body;
};
int completions = 0;
Answer complete(const std::string& /*prompt*/) {
  if (++completions == 1) throw llmretry::ProviderError("overloaded", 503);
  return {R"({"usage": {"prompt_tokens": 12, "completion_tokens": 30}})"};
}

#include "readme/metrics.inc"

}  // namespace metrics

TEST_CASE("README: metrics", "[readme]") {
  using llmretry_catch::contains;
  CHECK(metrics::answer("hello") == R"({"usage": {"prompt_tokens": 12, "completion_tokens": 30}})");
  llmretry::DeploymentOptions options;
  options.name = "openai/gpt-4o-mini";
  llmretry::Deployment deployment(options);
  CHECK(metrics::summarise(deployment, "Summarise the ticket").body.size() > 0);
  const std::string text = metrics::metrics().prometheus_text();
  CHECK_THAT(text, contains("llm_requests_total{provider=\"openai\",model=\"gpt-5.5\",status=\"success\"} 1\n"));
  CHECK_THAT(text,
             contains("llm_retries_total{provider=\"openai\",model=\"gpt-5.5\",error_type=\"server_error\"} 1\n"));
  CHECK_THAT(text, contains("llm_requests_total{provider=\"openai\",model=\"gpt-4o-mini\",status=\"success\"} 1\n"));
  CHECK_THAT(text, contains("llm_tokens_reserved_total{provider=\"openai\",model=\"gpt-4o-mini\"} 305\n"));
  CHECK_THAT(text, contains("llm_tokens_used_total{provider=\"openai\",model=\"gpt-4o-mini\"} 42\n"));
}

#if defined(LLMRETRY_README_PROMETHEUS_CPP)
namespace metrics_prometheus_cpp {

// Stand-ins for the application: its policy (short waits), and its client, which answers 503 once.
using metrics::policy;
int completions = 0;
metrics::Answer complete(const std::string& /*prompt*/) {
  if (++completions == 1) throw llmretry::ProviderError("overloaded", 503);
  return {"hello"};
}

#include "readme/metrics_prometheus_cpp.inc"

}  // namespace metrics_prometheus_cpp

TEST_CASE("docs/metrics.md: the metrics in an application's prometheus-cpp registry", "[readme]") {
  using llmretry_catch::contains;
  CHECK(metrics_prometheus_cpp::answer("hi") == "hello");
  const std::string text = prometheus::TextSerializer().Serialize(metrics_prometheus_cpp::registry->Collect());
  CHECK_THAT(text, contains("llm_requests_total{model=\"gpt-5.5\",provider=\"openai\",status=\"success\"} 1\n"));
  CHECK_THAT(text,
             contains("llm_retries_total{error_type=\"server_error\",model=\"gpt-5.5\",provider=\"openai\"} 1\n"));
}
#endif

#if defined(LLMRETRY_README_HTTP)
namespace front_door {

#include "readme/front_door.inc"

}  // namespace front_door

TEST_CASE("README: the front door's chat over libcurl", "[readme]") {
  llmretry::testing::LoopbackProvider provider;
  provider.then(llmretry::testing::LoopbackProvider::service_unavailable())
      .then(llmretry::testing::LoopbackProvider::chat_completion("hello back"));
  const std::string answer = front_door::chat(provider.base_url() + "/v1", "test-key", R"({"model": "m"})");
  CHECK(nlohmann::json::parse(answer).at("choices").at(0).at("message").at("content") == "hello back");
  const auto requests = provider.requests();
  REQUIRE(requests.size() == 2);
  CHECK(requests[0].path == "/v1/chat/completions");
  CHECK(requests[0].header("Authorization") == "Bearer test-key");
  CHECK(requests[0].header("Idempotency-Key") == requests[1].header("Idempotency-Key"));
}

namespace real_http {

#include "readme/real_http.inc"

}  // namespace real_http

TEST_CASE("docs/real-http.md: a chat completion over libcurl", "[readme]") {
  llmretry::testing::LoopbackProvider provider;
  provider.then(llmretry::testing::LoopbackProvider::service_unavailable())
      .then(llmretry::testing::LoopbackProvider::chat_completion("hello back"));
  CHECK(real_http::ask(provider.base_url() + "/v1", "test-key", "Hello") == "hello back");
  const auto requests = provider.requests();
  REQUIRE(requests.size() == 2);
  const auto body = nlohmann::json::parse(requests[0].body);
  CHECK(body.at("messages").at(0).at("content") == "Hello");
  CHECK(requests[1].header("X-Attempt") == "2");
}
#endif

#if defined(LLMRETRY_README_ASYNC)
namespace async_callback {

#include "readme/async_callback.inc"

}  // namespace async_callback

TEST_CASE("docs/async.md: a call with a callback, retried on one io_context thread", "[readme]") {
  llmretry::testing::LoopbackProvider provider;
  provider.then(llmretry::testing::LoopbackProvider::service_unavailable())
      .then(llmretry::testing::LoopbackProvider::chat_completion("hello back"));
  boost::asio::io_context io;
  llmretry::curl::AsyncClient client(io.get_executor());
  std::string answer;
  async_callback::ask(client, provider.base_url() + "/v1", "test-key",
                      [&](std::string body) { answer = std::move(body); });
  io.run();
  CHECK(nlohmann::json::parse(answer).at("choices").at(0).at("message").at("content") == "hello back");
  CHECK(provider.request_count() == 2);
}

#if defined(BOOST_ASIO_HAS_CO_AWAIT)
namespace async_coroutine {

#include "readme/async_coroutine.inc"

}  // namespace async_coroutine

TEST_CASE("docs/async.md: a call awaited in a coroutine", "[readme]") {
  llmretry::testing::LoopbackProvider provider;
  provider.then(llmretry::testing::LoopbackProvider::azure_rate_limited())
      .then(llmretry::testing::LoopbackProvider::chat_completion("hello back"));
  boost::asio::io_context io;
  llmretry::curl::AsyncClient client(io.get_executor());
  std::string answer;
  boost::asio::co_spawn(
      io,
      [&]() -> boost::asio::awaitable<void> {
        answer = co_await async_coroutine::ask(client, provider.base_url() + "/v1", "test-key");
      },
      boost::asio::detached);
  io.run();
  CHECK(nlohmann::json::parse(answer).at("choices").at(0).at("message").at("content") == "hello back");
}
#endif
#endif
