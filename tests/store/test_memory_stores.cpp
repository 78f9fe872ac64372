// The in-memory stores against the conformance suite, on a manual clock.
#include <llmretry/store/idempotency_store.hpp>
#include <llmretry/store/job_queue.hpp>
#include <llmretry/store/operations.hpp>
#include <llmretry/testing/manual_clock.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace {

struct MemoryStores {
  llmretry::testing::ManualSystemClock clock{std::chrono::system_clock::now()};

  std::unique_ptr<llmretry::store::IdempotencyStore> idempotency(llmretry::store::IdempotencyOptions options) {
    return std::make_unique<llmretry::store::MemoryIdempotencyStore>(options, std::ref(clock));
  }
  std::unique_ptr<llmretry::store::OperationsTable> operations(llmretry::store::OperationsOptions options) {
    return std::make_unique<llmretry::store::MemoryOperationsTable>(options, std::ref(clock));
  }
  std::unique_ptr<llmretry::store::JobQueue> queue(llmretry::store::JobQueueOptions options) {
    return std::make_unique<llmretry::store::MemoryJobQueue>(options, std::ref(clock));
  }
  void advance(std::chrono::milliseconds step) { clock.advance(step); }
  std::chrono::system_clock::time_point now() const { return clock.now(); }
};

}  // namespace

#define LLMRETRY_STORE_FIXTURES MemoryStores
#include "conformance.hpp"

TEST_CASE("MemoryIdempotencyStore: past max_stored_bytes the responses completed first are forgotten first",
          "[store][idempotency]") {
  using llmretry::store::ClaimStatus;
  using llmretry::store::StoredResponse;
  llmretry::testing::ManualSystemClock clock{std::chrono::system_clock::now()};
  llmretry::store::IdempotencyOptions options;
  options.max_stored_bytes = 100;
  llmretry::store::MemoryIdempotencyStore keys(options, std::ref(clock));
  const auto complete = [&](const std::string& key, std::size_t bytes) {
    REQUIRE(keys.claim(key, "fp", "t").status == ClaimStatus::claimed);
    REQUIRE(keys.complete(key, "t", StoredResponse{200, std::string(bytes - 6, 'x'), {{"id", "1234"}}}));
  };
  complete("a", 40);
  complete("b", 40);
  CHECK(keys.claim("a", "fp", "u").status == ClaimStatus::completed);
  complete("c", 40);  // 120 bytes: "a", completed first, goes
  CHECK(keys.claim("a", "fp", "u").status == ClaimStatus::claimed);
  CHECK(keys.release("a", "u"));
  CHECK(keys.claim("b", "fp", "u").status == ClaimStatus::completed);
  CHECK(keys.claim("c", "fp", "u").status == ClaimStatus::completed);
  // A key in flight is never forgotten for room; a response larger than the bound is not kept.
  REQUIRE(keys.claim("d", "fp", "t").status == ClaimStatus::claimed);
  complete("e", 200);
  CHECK(keys.claim("e", "fp", "u").status == ClaimStatus::claimed);
  CHECK(keys.claim("d", "fp", "u").status == ClaimStatus::in_flight);
  CHECK(keys.claim("b", "fp", "u").status == ClaimStatus::completed);  // kept: "e" took no room
  CHECK(keys.claim("c", "fp", "u").status == ClaimStatus::completed);
  // Room comes back once responses expire.
  clock.advance(options.retention + std::chrono::seconds{1});
  complete("f", 90);
  CHECK(keys.claim("f", "fp", "u").status == ClaimStatus::completed);
}
