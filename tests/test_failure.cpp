#include <llmretry/failure.hpp>

#include <string>

#include "llmretry_catch.hpp"

using llmretry::Failure;
using llmretry::FailureKind;
using llmretry::Sent;
using namespace std::chrono_literals;

TEST_CASE("Transient kinds are the ones another attempt can fix", "[failure]") {
  for (auto kind : {FailureKind::rate_limited, FailureKind::server_error, FailureKind::request_timeout,
                    FailureKind::timeout, FailureKind::connection})
    CHECK(llmretry::is_transient(kind));
  for (auto kind : {FailureKind::quota_exhausted, FailureKind::stream_interrupted, FailureKind::invalid_request,
                    FailureKind::context_length, FailureKind::content_filter, FailureKind::authentication,
                    FailureKind::not_found, FailureKind::client_error, FailureKind::too_large, FailureKind::unknown})
    CHECK_FALSE(llmretry::is_transient(kind));
}

TEST_CASE("A default Failure is unknown and may have been processed", "[failure]") {
  const Failure failure;
  CHECK(failure.kind == FailureKind::unknown);
  CHECK(failure.status == 0);
  CHECK(failure.sent == Sent::maybe_processed);
  CHECK_FALSE(failure.provider_wait);
  CHECK_FALSE(failure.should_retry);
}

TEST_CASE("Failures compare by every field", "[failure]") {
  Failure a{FailureKind::rate_limited, 429, 511ms, Sent::refused, std::nullopt};
  Failure b = a;
  CHECK(a == b);
  b.provider_wait = 512ms;
  CHECK(a != b);
  b = a;
  b.should_retry = true;
  CHECK(a != b);
}

TEST_CASE("Kind names and descriptions", "[failure]") {
  CHECK(std::string(llmretry::to_string(FailureKind::context_length)) == "context_length");
  CHECK(std::string(llmretry::to_string(static_cast<FailureKind>(99))) == "unknown");
  CHECK(llmretry::describe(Failure{FailureKind::rate_limited, 429, 511ms, Sent::refused, std::nullopt}) ==
        "HTTP 429 rate_limited, retry after 511 ms");
  CHECK(llmretry::describe(Failure::timed_out(Sent::maybe_processed)) == "timeout (may have been processed)");
  CHECK(llmretry::describe(Failure::connection_failed(Sent::not_sent)) == "connection (not sent)");
  CHECK(llmretry::describe(Failure{FailureKind::server_error, 503, std::nullopt, Sent::maybe_processed,
                                   std::nullopt}) == "HTTP 503 server_error");
}
