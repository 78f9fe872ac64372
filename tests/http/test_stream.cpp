#include <llmretry/http/stream.hpp>

#include <llmretry/decision.hpp>
#include <llmretry/http/classify.hpp>

#include <random>

#include <llmretry_catch.hpp>

using llmretry::Failure;
using llmretry::FailureKind;
using llmretry::Sent;
using llmretry::StreamGuard;

TEST_CASE("StreamGuard: retried like any failure before content, never after") {
  StreamGuard guard;
  const Failure reset{FailureKind::connection, 0, std::nullopt, Sent::maybe_processed, std::nullopt};
  CHECK_FALSE(guard.started());
  CHECK(guard.failure_for(reset) == reset);

  guard.deliver(5);
  guard.deliver(7);
  CHECK(guard.started());
  CHECK(guard.delivered_bytes() == 12);
  CHECK(guard.delivered_events() == 2);

  Failure overloaded = llmretry::classify_status(529);
  overloaded.should_retry = true;
  overloaded.provider_wait = std::chrono::milliseconds{100};
  const auto guarded = guard.failure_for(overloaded);
  CHECK(guarded.kind == FailureKind::stream_interrupted);
  CHECK(guarded.status == 529);
  CHECK_FALSE(guarded.should_retry);  // x-should-retry: true must not revive it
  CHECK_FALSE(guarded.provider_wait);

  std::mt19937_64 rng(1);
  llmretry::RetryState state{llmretry::RetryPolicy{}};
  CHECK_FALSE(state.next(guarded, rng).retry);
}

TEST_CASE("StreamInterrupted carries what was delivered and the cause") {
  StreamGuard guard;
  guard.deliver(3);
  const Failure cause{FailureKind::timeout, 0, std::nullopt, Sent::maybe_processed, std::nullopt};
  const llmretry::StreamInterrupted error("cut", guard, cause);
  CHECK(error.failure().kind == FailureKind::stream_interrupted);
  CHECK(error.cause() == cause);
  CHECK(error.delivered_bytes() == 3);
  CHECK(error.delivered_events() == 1);
  CHECK(llmretry::failure_of(error) == error.failure());
}
