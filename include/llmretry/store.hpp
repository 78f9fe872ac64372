#ifndef LLMRETRY_STORE_HPP
#define LLMRETRY_STORE_HPP

/// The state several processes may share, behind one interface each, and their in-memory implementations:
/// idempotency claims and stored answers, the operations table, the job queue; the stores' injectable
/// clock and the request fingerprint. Namespace llmretry::store; the Redis implementations are in
/// <llmretry/redis.hpp> (target llmretry::redis).

#include "store/clock.hpp"
#include "store/fingerprint.hpp"
#include "store/idempotency_store.hpp"
#include "store/job_queue.hpp"
#include "store/operations.hpp"

#endif  // LLMRETRY_STORE_HPP
