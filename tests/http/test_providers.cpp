#include <llmretry/http/providers.hpp>

#include <chrono>
#include <map>
#include <string>

#include <llmretry_catch.hpp>

using namespace std::chrono_literals;
using llmretry::ErrorFields;
using llmretry::FailureKind;
using llmretry::Provider;
using llmretry::Sent;

namespace {
const auto now = std::chrono::system_clock::time_point{} + 1'700'000'000s;
const std::map<std::string, std::string> no_headers;

ErrorFields code(std::string c, std::string type = {}) {
  ErrorFields fields;
  fields.code = std::move(c);
  fields.type = std::move(type);
  return fields;
}
ErrorFields type(std::string t) {
  ErrorFields fields;
  fields.type = std::move(t);
  return fields;
}
ErrorFields gemini(std::string status, std::string delay = {}) {
  ErrorFields fields;
  fields.status = std::move(status);
  fields.retry_delay = std::move(delay);
  return fields;
}
}  // namespace

TEST_CASE("OpenAI and Azure: the code, then the type, refine the status") {
  for (auto provider : {Provider::openai, Provider::azure_openai}) {
    SECTION(std::string("429 rate_limit_exceeded is a rate limit: ") + to_string(provider)) {
      const auto failure = classify_provider_error(provider, 429, code("rate_limit_exceeded", "too_many_requests"));
      CHECK(failure.kind == FailureKind::rate_limited);
      CHECK(failure.sent == Sent::refused);
    }
    SECTION(std::string("429 insufficient_quota is not waited out: ") + to_string(provider)) {
      CHECK(classify_provider_error(provider, 429, code("insufficient_quota")).kind == FailureKind::quota_exhausted);
      CHECK(classify_provider_error(provider, 429, type("insufficient_quota")).kind == FailureKind::quota_exhausted);
    }
    SECTION(std::string("400 context_length_exceeded and content_filter: ") + to_string(provider)) {
      CHECK(classify_provider_error(provider, 400, code("context_length_exceeded", "invalid_request_error")).kind ==
            FailureKind::context_length);
      CHECK(classify_provider_error(provider, 400, code("content_filter")).kind == FailureKind::content_filter);
    }
    SECTION(std::string("unknown strings fall back on the status: ") + to_string(provider)) {
      CHECK(classify_provider_error(provider, 503, code("whatever")).kind == FailureKind::server_error);
      CHECK(classify_provider_error(provider, 400, ErrorFields{}).kind == FailureKind::invalid_request);
    }
  }
}

TEST_CASE("Anthropic: error types") {
  SECTION("529 overloaded_error is a server error refused before any work") {
    const auto failure = classify_provider_error(Provider::anthropic, 529, type("overloaded_error"));
    CHECK(failure.kind == FailureKind::server_error);
    CHECK(failure.sent == Sent::refused);
    CHECK(classify_provider_error(Provider::anthropic, 529, ErrorFields{}).sent == Sent::refused);
  }
  SECTION("an SSE error event (status 200) takes the status of its type") {
    const auto failure = classify_provider_error(Provider::anthropic, 200, type("overloaded_error"));
    CHECK(failure.kind == FailureKind::server_error);
    CHECK(failure.status == 529);
    CHECK(classify_provider_error(Provider::anthropic, 200, type("rate_limit_error")).kind ==
          FailureKind::rate_limited);
    CHECK(classify_provider_error(Provider::anthropic, 200, type("something_new")).kind == FailureKind::unknown);
  }
  SECTION("rate_limit_error, invalid_request_error, billing_error, api_error") {
    CHECK(classify_provider_error(Provider::anthropic, 429, type("rate_limit_error")).kind ==
          FailureKind::rate_limited);
    CHECK(classify_provider_error(Provider::anthropic, 400, type("invalid_request_error")).kind ==
          FailureKind::invalid_request);
    CHECK(classify_provider_error(Provider::anthropic, 402, type("billing_error")).kind ==
          FailureKind::quota_exhausted);
    const auto api_error = classify_provider_error(Provider::anthropic, 500, type("api_error"));
    CHECK(api_error.kind == FailureKind::server_error);
    CHECK(api_error.sent == Sent::maybe_processed);
  }
}

TEST_CASE("overloaded_error is Anthropic's failure under every provider: transient, refused before any work") {
  const auto anthropic_sse = classify_provider_error(Provider::anthropic, 200, type("overloaded_error"));
  const auto anthropic_body = classify_provider_error(Provider::anthropic, 529, type("overloaded_error"));
  for (auto provider : {Provider::openai, Provider::azure_openai, Provider::anthropic, Provider::gemini}) {
    INFO(to_string(provider));
    SECTION(std::string("in an SSE event: error of a 200 stream: ").append(to_string(provider))) {
      const auto failure = classify_provider_error(provider, 200, type("overloaded_error"));
      CHECK(failure == anthropic_sse);
      CHECK(failure.kind == FailureKind::server_error);
      CHECK(failure.status == 529);
      CHECK(failure.sent == Sent::refused);
      CHECK(llmretry::is_transient(failure.kind));
      CHECK(classify_provider_error(provider, 0, type("overloaded_error")) == anthropic_sse);
    }
    SECTION(std::string("in an error body: ").append(to_string(provider))) {
      CHECK(classify_provider_error(provider, 529, type("overloaded_error")) == anthropic_body);
      const auto with_503 = classify_provider_response(provider, 503, no_headers, now, type("overloaded_error"));
      CHECK(with_503.kind == FailureKind::server_error);
      CHECK(with_503.status == 503);
      CHECK(with_503.sent == Sent::refused);
    }
  }
}

TEST_CASE("Gemini and Vertex: google.rpc status and RetryInfo") {
  SECTION("429 RESOURCE_EXHAUSTED waits for retryDelay") {
    const auto failure =
        classify_provider_response(Provider::gemini, 429, no_headers, now, gemini("RESOURCE_EXHAUSTED", "1.5s"));
    CHECK(failure.kind == FailureKind::rate_limited);
    REQUIRE(failure.provider_wait);
    CHECK(*failure.provider_wait == 1500ms);
  }
  SECTION("a header wait wins over the body's") {
    const std::map<std::string, std::string> headers{{"Retry-After", "2"}};
    const auto failure =
        classify_provider_response(Provider::gemini, 429, headers, now, gemini("RESOURCE_EXHAUSTED", "30s"));
    CHECK(failure.provider_wait == std::chrono::milliseconds{2000});
  }
  SECTION("a malformed retryDelay is ignored") {
    const auto failure =
        classify_provider_response(Provider::gemini, 429, no_headers, now, gemini("RESOURCE_EXHAUSTED", "soon"));
    CHECK_FALSE(failure.provider_wait);
  }
  SECTION("the status name stands in for a missing HTTP status") {
    CHECK(classify_provider_error(Provider::gemini, 0, gemini("UNAVAILABLE")).kind == FailureKind::server_error);
    CHECK(classify_provider_error(Provider::gemini, 0, gemini("INVALID_ARGUMENT")).kind ==
          FailureKind::invalid_request);
    CHECK(classify_provider_error(Provider::gemini, 0, gemini("PERMISSION_DENIED")).kind ==
          FailureKind::authentication);
    CHECK(classify_provider_error(Provider::gemini, 400, gemini("FAILED_PRECONDITION")).kind ==
          FailureKind::invalid_request);
  }
}

TEST_CASE("classify_provider_response reads a real Azure 429's headers") {
  const std::map<std::string, std::string> headers{{"retry-after", "30"}, {"retry-after-ms", "511"}};
  const auto failure =
      classify_provider_response(Provider::azure_openai, 429, headers, now, code("rate_limit_exceeded"));
  CHECK(failure.kind == FailureKind::rate_limited);
  CHECK(failure.provider_wait == std::chrono::milliseconds{511});
  SECTION("x-should-retry is kept") {
    const std::map<std::string, std::string> declined{{"x-should-retry", "false"}};
    CHECK(classify_provider_response(Provider::openai, 503, declined, now).should_retry == false);
  }
}

TEST_CASE("to_string(Provider)") {
  CHECK(std::string(to_string(Provider::openai)) == "openai");
  CHECK(std::string(to_string(Provider::azure_openai)) == "azure_openai");
  CHECK(std::string(to_string(Provider::anthropic)) == "anthropic");
  CHECK(std::string(to_string(Provider::gemini)) == "gemini");
}

TEST_CASE("finish_reason_failure: a filtered 2xx answer is content_filter, billed") {
  using llmretry::finish_reason_failure;
  for (const auto& [provider, reason] :
       {std::pair{Provider::openai, "content_filter"}, std::pair{Provider::azure_openai, "content_filter"},
        std::pair{Provider::anthropic, "refusal"}, std::pair{Provider::gemini, "SAFETY"}}) {
    const auto failure = finish_reason_failure(provider, reason);
    REQUIRE(failure);
    CHECK(failure->kind == FailureKind::content_filter);
    CHECK(failure->sent == Sent::maybe_processed);
  }
  CHECK_FALSE(finish_reason_failure(Provider::openai, "stop"));
  CHECK_FALSE(finish_reason_failure(Provider::anthropic, "content_filter"));
}

TEST_CASE("OpenAI and Azure codes stand for a status where the HTTP status says nothing") {
  CHECK(classify_provider_error(Provider::openai, 200, code("rate_limit_exceeded")).kind == FailureKind::rate_limited);
  CHECK(classify_provider_error(Provider::azure_openai, 200, type("server_error")).kind == FailureKind::server_error);
  CHECK(classify_provider_error(Provider::openai, 0, code("insufficient_quota")).kind == FailureKind::quota_exhausted);
  CHECK(classify_provider_error(Provider::openai, 200, code("something_new")).kind == FailureKind::unknown);
}
