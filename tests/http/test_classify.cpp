#include <llmretry/http/classify.hpp>

#include <map>
#include <string>

#include "llmretry_catch.hpp"

using llmretry::classify_response;
using llmretry::classify_status;
using llmretry::FailureKind;
using llmretry::Sent;
using namespace std::chrono_literals;

TEST_CASE("classify_status maps statuses to kinds", "[classify]") {
  CHECK(classify_status(429).kind == FailureKind::rate_limited);
  CHECK(classify_status(408).kind == FailureKind::request_timeout);
  CHECK(classify_status(400).kind == FailureKind::invalid_request);
  CHECK(classify_status(422).kind == FailureKind::invalid_request);
  CHECK(classify_status(401).kind == FailureKind::authentication);
  CHECK(classify_status(403).kind == FailureKind::authentication);
  CHECK(classify_status(404).kind == FailureKind::not_found);
  CHECK(classify_status(409).kind == FailureKind::client_error);
  CHECK(classify_status(413).kind == FailureKind::client_error);
  for (int status : {500, 502, 503, 504, 529, 599}) CHECK(classify_status(status).kind == FailureKind::server_error);
  for (int status : {0, 200, 302, 600, -1}) CHECK(classify_status(status).kind == FailureKind::unknown);
  CHECK(classify_status(503).status == 503);
}

TEST_CASE("classify_status says whether the work may have been done", "[classify]") {
  CHECK(classify_status(429).sent == Sent::refused);  // refused: no work done
  CHECK(classify_status(408).sent == Sent::refused);
  CHECK(classify_status(503).sent == Sent::maybe_processed);
  CHECK(classify_status(529).sent == Sent::refused);  // overloaded: turned away before any work
}

TEST_CASE("Error codes refine the status, never the message", "[classify]") {
  CHECK(classify_status(429, "insufficient_quota").kind == FailureKind::quota_exhausted);
  CHECK(classify_status(429, "billing_hard_limit_reached").kind == FailureKind::quota_exhausted);
  CHECK(classify_status(429, "rate_limit_exceeded").kind == FailureKind::rate_limited);
  CHECK(classify_status(400, "context_length_exceeded").kind == FailureKind::context_length);
  CHECK(classify_status(400, "content_filter").kind == FailureKind::content_filter);
  CHECK(classify_status(400, "content_policy_violation").kind == FailureKind::content_filter);
  CHECK(classify_status(400, "Insufficient_Quota").kind == FailureKind::quota_exhausted);
  CHECK(classify_status(400, "something else").kind == FailureKind::invalid_request);
}

TEST_CASE("classify_status is constexpr", "[classify]") {
  static_assert(classify_status(429).kind == FailureKind::rate_limited);
  SUCCEED();
}

TEST_CASE("classify_response reads the wait and x-should-retry from the headers", "[classify]") {
  const auto now = std::chrono::system_clock::time_point{} + std::chrono::hours{24 * 365 * 56};
  SECTION("a real Azure 429") {
    const std::map<std::string, std::string> headers{{"retry-after", "30"},
                                                     {"retry-after-ms", "511"},
                                                     {"x-ratelimit-limit-tokens", "100000"},
                                                     {"x-ratelimit-remaining-tokens", "-853"}};
    const auto failure = classify_response(429, headers, now, "rate_limit_exceeded");
    CHECK(failure.kind == FailureKind::rate_limited);
    CHECK(failure.provider_wait == 511ms);
    CHECK_FALSE(failure.should_retry);
  }
  SECTION("a 500 that the provider says not to retry") {
    const std::map<std::string, std::string> headers{{"X-Should-Retry", "false"}};
    const auto failure = classify_response(500, headers, now);
    CHECK(failure.kind == FailureKind::server_error);
    CHECK(failure.should_retry == false);
  }
  SECTION("malformed headers are ignored") {
    const std::map<std::string, std::string> headers{{"retry-after", "soon"}, {"x-should-retry", "maybe"}};
    const auto failure = classify_response(503, headers, now);
    CHECK_FALSE(failure.provider_wait);
    CHECK_FALSE(failure.should_retry);
  }
}
