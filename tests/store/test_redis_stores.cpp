// The Redis stores against the conformance suite, on a redis-server started for the runner. Time passes
// for real: the stores read the server's clock.
#include <llmretry/redis/idempotency_store.hpp>
#include <llmretry/redis/job_queue.hpp>
#include <llmretry/redis/operations.hpp>

#include <chrono>
#include <memory>
#include <thread>

#include "redis_fixture.hpp"

namespace {

struct RedisStores {
  llmretry::redis::Connection connection{redis_fixture::unique_options()};

  std::unique_ptr<llmretry::store::IdempotencyStore> idempotency(llmretry::store::IdempotencyOptions options) {
    return std::make_unique<llmretry::redis::IdempotencyStore>(connection, options);
  }
  std::unique_ptr<llmretry::store::OperationsTable> operations(llmretry::store::OperationsOptions options) {
    return std::make_unique<llmretry::redis::OperationsTable>(connection, options);
  }
  std::unique_ptr<llmretry::store::JobQueue> queue(llmretry::store::JobQueueOptions options) {
    return std::make_unique<llmretry::redis::JobQueue>(connection, "conformance", options);
  }
  static void advance(std::chrono::milliseconds step) { std::this_thread::sleep_for(step); }
  static std::chrono::system_clock::time_point now() { return std::chrono::system_clock::now(); }
};

}  // namespace

#define LLMRETRY_STORE_FIXTURES RedisStores
#include "conformance.hpp"
