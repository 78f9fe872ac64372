// Includes every simulator header a second time in another translation unit: a function defined in a
// header without `inline` is then defined twice and the link fails.
#include <llmretry/sim.hpp>

namespace llmretry_sim_second_tu {
int touch() { return llmretry::sim::scenarios::explorer().clients; }
}  // namespace llmretry_sim_second_tu
