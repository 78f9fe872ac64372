// Includes the Redis component's headers a second time in another translation unit: a missing `inline`
// fails to link.
#include <llmretry/redis/connection.hpp>
#include <llmretry/redis/idempotency_store.hpp>
#include <llmretry/redis/job_queue.hpp>
#include <llmretry/redis/operations.hpp>
#include <llmretry/redis/rate_limiter.hpp>
#include <llmretry/redis/testing_server.hpp>

namespace llmretry_redis_second_tu {
const char* touch() { return llmretry::redis::to_string(llmretry::redis::ErrorKind::timeout); }
}  // namespace llmretry_redis_second_tu
