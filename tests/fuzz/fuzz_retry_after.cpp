// The Retry-After family and the HTTP-date parser on untrusted text: the whole input as one header value,
// and the input read as header lines for retry_after() and should_retry(). Nothing may crash, throw, leak or
// overflow, and the results must keep their documented bounds.
#include <chrono>

#include <llmretry/http/headers.hpp>

#include "fuzz_support.hpp"

using llmretry_fuzz::now;
using llmretry_fuzz::require;
using std::chrono::milliseconds;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto text = llmretry_fuzz::as_text(data, size);

  const auto date = llmretry::parse_http_date(text, now);
  const auto wait = llmretry::parse_retry_after(text, now);
  if (date) require(wait.has_value());  // a date is a valid Retry-After
  if (wait) require(*wait >= milliseconds::zero());
  if (const auto ms = llmretry::detail::parse_decimal_ms(text, 1)) require(*ms >= milliseconds::zero());

  const auto headers = llmretry_fuzz::header_lines(text);
  if (const auto asked = llmretry::requested_wait(headers, now)) require(*asked >= milliseconds::zero());
  (void)llmretry::should_retry(headers);
  return 0;
}
