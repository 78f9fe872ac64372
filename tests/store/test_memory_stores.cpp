// The in-memory stores against the conformance suite, on a manual clock.
#include <llmretry/store/idempotency_store.hpp>
#include <llmretry/store/job_queue.hpp>
#include <llmretry/store/operations.hpp>
#include <llmretry/testing/manual_clock.hpp>

#include <chrono>
#include <functional>
#include <memory>

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
