// A whole response from outside, classified and fed to the retry decision: the first line is the status
// and the provider's error code ("429 insufficient_quota"), the other lines are headers. Nothing may crash,
// throw or leak, and every decision must keep the policy's bounds.
#include <algorithm>
#include <chrono>
#include <random>

#include <llmretry/decision.hpp>
#include <llmretry/failure.hpp>
#include <llmretry/http/classify.hpp>

#include "fuzz_support.hpp"

using llmretry_fuzz::require;
using std::chrono::milliseconds;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto text = llmretry_fuzz::as_text(data, size);
  const auto first_line = text.substr(0, text.find('\n'));
  const auto space = first_line.find(' ');
  const auto error_code = space == std::string_view::npos ? std::string_view{} : first_line.substr(space + 1);
  int status = 0;
  for (const char c : first_line.substr(0, std::min<std::size_t>(space, 3))) {
    if (c < '0' || c > '9') break;
    status = status * 10 + (c - '0');
  }
  const auto headers = llmretry_fuzz::header_lines(text.substr(first_line.size()));

  const auto failure = llmretry::classify_response(status, headers, llmretry_fuzz::now, error_code);
  require(!llmretry::describe(failure).empty());

  const llmretry::RetryPolicy policy;
  llmretry::RetryState state{policy};
  std::mt19937_64 rng{size};
  for (int attempt = 1; attempt <= policy.max_attempts; ++attempt) {
    const auto decision = state.next(failure, rng);
    if (!decision.retry) break;
    require(decision.wait >= milliseconds::zero());
    require(!failure.provider_wait || decision.wait >= *failure.provider_wait);
    require(state.waited() <= policy.max_total_wait);
  }
  return 0;
}
