// The rate-limit headers of every response (OpenAI, Azure, Anthropic): the input read as header lines for
// parse_rate_limits, and as one value for each of its parsers (integers, durations, RFC 3339 times).
// Nothing may crash, throw, leak or overflow, and no wait may be negative.
#include <chrono>

#include <llmretry/http/rate_limits.hpp>

#include "fuzz_support.hpp"

using llmretry_fuzz::now;
using llmretry_fuzz::require;
using std::chrono::milliseconds;

namespace {

void require_valid(const llmretry::RateLimitWindow& window) {
  require(!window.reset_after || *window.reset_after >= milliseconds::zero());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto text = llmretry_fuzz::as_text(data, size);
  (void)llmretry::detail::parse_integer(text);
  (void)llmretry::detail::parse_rfc3339_ms(text);
  if (const auto duration = llmretry::detail::parse_duration_ms(text)) require(*duration >= milliseconds::zero());
  if (const auto wait = llmretry::detail::until_rfc3339(text, now)) require(*wait >= milliseconds::zero());

  const auto limits = llmretry::parse_rate_limits(llmretry_fuzz::header_lines(text), now);
  for (const auto* window : {&limits.requests, &limits.tokens, &limits.input_tokens, &limits.output_tokens})
    require_valid(*window);
  return 0;
}
