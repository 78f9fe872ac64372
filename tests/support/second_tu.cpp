// Includes every public header a second time in another translation unit: a function defined in a
// header without `inline` (or a non-inline variable) is then defined twice and the link fails.
#include <llmretry/llmretry.hpp>
#include <llmretry/sim.hpp>
#include <llmretry/testing.hpp>

namespace llmretry_second_tu {
int touch() { return llmretry::backoff(1, llmretry::RetryPolicy{}).count() > 0 ? 1 : 0; }
}  // namespace llmretry_second_tu
