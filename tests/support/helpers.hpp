#ifndef LLMRETRY_TESTS_HELPERS_HPP
#define LLMRETRY_TESTS_HELPERS_HPP

// What many test files use: a policy without jitter, a cost in tokens.

#include <llmretry/admission/limits.hpp>
#include <llmretry/policy.hpp>

#include <chrono>
#include <cstdint>

namespace llmretry_test {

/// Returns the default RetryPolicy without jitter (every wait exact), its first wait `base`.
inline llmretry::RetryPolicy no_jitter(std::chrono::milliseconds base = llmretry::RetryPolicy{}.base) {
  llmretry::RetryPolicy policy;
  policy.base = base;
  policy.jitter = llmretry::Jitter::none;
  return policy;
}

/// Returns the Cost of one request of `input` tokens in and `output` out.
inline llmretry::Cost tokens(std::int64_t input, std::int64_t output = 0) { return llmretry::Cost{1, input, output}; }

}  // namespace llmretry_test

#endif  // LLMRETRY_TESTS_HELPERS_HPP
