#ifndef LLMRETRY_REDIS_HPP
#define LLMRETRY_REDIS_HPP

/// The stores and the rate limiter shared through Redis (target llmretry::redis, hiredis): the connection,
/// the idempotency store, the operations table, the job queue and the rate limiter with its guard.
/// Namespace llmretry::redis. The throwaway server for tests, testing::RedisServer, is apart:
/// <llmretry/redis/testing_server.hpp>.

#include "redis/connection.hpp"
#include "redis/idempotency_store.hpp"
#include "redis/job_queue.hpp"
#include "redis/operations.hpp"
#include "redis/rate_limiter.hpp"

#endif  // LLMRETRY_REDIS_HPP
