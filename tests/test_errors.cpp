#include <llmretry/errors.hpp>

#include <stdexcept>
#include <string>

#include "llmretry_catch.hpp"

using namespace llmretry;
using namespace std::chrono_literals;

TEST_CASE("ProviderError carries its status and classified failure", "[errors]") {
  const ProviderError error("HTTP 503: service unavailable.", 503);
  CHECK(std::string(error.what()) == "HTTP 503: service unavailable.");
  CHECK(error.status() == 503);
  CHECK(error.failure().kind == FailureKind::server_error);
  const std::runtime_error& base = error;
  CHECK(std::string(base.what()) == "HTTP 503: service unavailable.");
  CHECK(ProviderError("no response", 0).failure().kind == FailureKind::unknown);
}

TEST_CASE("ProviderError accepts a failure classified by the caller", "[errors]") {
  const ProviderError error("quota", classify_status(429, "insufficient_quota"));
  CHECK(error.status() == 429);
  CHECK(error.failure().kind == FailureKind::quota_exhausted);
}

TEST_CASE("RateLimited is a 429 with an optional wait", "[errors]") {
  const RateLimited plain("HTTP 429");
  CHECK(plain.status() == 429);
  CHECK_FALSE(plain.provider_wait());
  const RateLimited with_wait("HTTP 429", 511ms);
  CHECK(with_wait.provider_wait() == 511ms);
  CHECK(with_wait.failure().kind == FailureKind::rate_limited);
  CHECK(with_wait.failure().sent == Sent::refused);
}

TEST_CASE("ProviderTimeout and ConnectionError say whether the request can have been sent", "[errors]") {
  CHECK(ProviderTimeout("read timeout").failure().sent == Sent::maybe_processed);
  CHECK(ProviderTimeout("connect timeout", Sent::not_sent).failure().sent == Sent::not_sent);
  CHECK(ProviderTimeout("t").status() == 0);
  CHECK(ProviderTimeout("t").failure().kind == FailureKind::timeout);
  CHECK(ConnectionError("refused").failure().sent == Sent::not_sent);
  CHECK(ConnectionError("reset", Sent::maybe_processed).failure().sent == Sent::maybe_processed);
  CHECK(ConnectionError("refused").failure().kind == FailureKind::connection);
}

TEST_CASE("failure_of recognises ProviderError and its subclasses only", "[errors]") {
  CHECK(failure_of(RateLimited("x", 2s))->provider_wait == 2s);
  CHECK(failure_of(ProviderTimeout("x"))->kind == FailureKind::timeout);
  CHECK_FALSE(failure_of(std::runtime_error("not the provider's")));
  CHECK_FALSE(failure_of(std::invalid_argument("bad")));
}

TEST_CASE("throw_provider_error throws the class the failure calls for", "[errors]") {
  const auto thrown = [](const Failure& failure) -> std::exception_ptr {
    try {
      throw_provider_error("message", failure);
    } catch (...) {
      return std::current_exception();
    }
  };
  Failure rate_limited = classify_status(429);
  rate_limited.provider_wait = 3s;
  try {
    std::rethrow_exception(thrown(rate_limited));
  } catch (const RateLimited& error) {
    CHECK(error.provider_wait() == 3s);
    CHECK(std::string(error.what()) == "message");
  }
  CHECK_THROWS_AS(std::rethrow_exception(thrown(Failure::timed_out(Sent::not_sent))), ProviderTimeout);
  try {
    std::rethrow_exception(thrown(Failure::connection_failed(Sent::maybe_processed)));
  } catch (const ConnectionError& error) {
    CHECK(error.failure().sent == Sent::maybe_processed);
  }
  const Failure quota = classify_status(429, "insufficient_quota");
  try {
    std::rethrow_exception(thrown(quota));
  } catch (const RateLimited&) {
    FAIL("quota exhaustion is not a rate limit");
  } catch (const ProviderError& error) {
    CHECK(error.failure() == quota);
  }
}
