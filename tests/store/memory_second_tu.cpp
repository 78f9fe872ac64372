// Includes the stores' headers a second time in another translation unit: a missing `inline` fails to link.
#include <llmretry/store/fingerprint.hpp>
#include <llmretry/store/idempotency_store.hpp>
#include <llmretry/store/job_queue.hpp>
#include <llmretry/store/operations.hpp>

namespace llmretry_store_second_tu {
const char* touch() { return llmretry::store::to_string(llmretry::store::ClaimStatus::in_flight); }
}  // namespace llmretry_store_second_tu
