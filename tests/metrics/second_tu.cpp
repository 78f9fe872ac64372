// Includes every metrics header a second time in another translation unit: a function defined in a
// header without `inline` is then defined twice and the link fails.
#include <llmretry/metrics.hpp>

namespace llmretry_metrics_second_tu {
int touch() { return llmretry::metrics::format_value(1.0) == "1" ? 1 : 0; }
}  // namespace llmretry_metrics_second_tu
