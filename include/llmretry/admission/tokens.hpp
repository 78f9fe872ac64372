#ifndef LLMRETRY_ADMISSION_TOKENS_HPP
#define LLMRETRY_ADMISSION_TOKENS_HPP

#include <cstdint>
#include <string_view>

#include "../version.hpp"
#include "limits.hpp"

LLMRETRY_BEGIN_NAMESPACE

/// Returns an estimate of the tokens in `text`: its characters (UTF-8 code points) divided by 4, rounded
/// up; about right for English prose with OpenAI's and Anthropic's tokenizers, low for code and for
/// languages with longer words per token. Use a tokenizer's count when you have one.
[[nodiscard]] constexpr std::int64_t estimate_tokens(std::string_view text) noexcept {
  std::int64_t characters = 0;
  for (const char c : text)
    if ((static_cast<unsigned char>(c) & 0xC0U) != 0x80U) ++characters;  // not a continuation byte
  return (characters + 3) / 4;
}

/// Returns the cost to reserve for one request: `prompt_tokens` in, and the most it may produce out,
/// `max_tokens` for each of `n` choices (the upper bound: what is not used is refunded when settled).
[[nodiscard]] constexpr Cost estimate_cost(std::int64_t prompt_tokens, std::int64_t max_tokens,
                                           std::int64_t n = 1) noexcept {
  return Cost{1, prompt_tokens, max_tokens * n};
}

/// Returns estimate_cost(estimate_tokens(prompt), max_tokens, n).
[[nodiscard]] constexpr Cost estimate_cost(std::string_view prompt, std::int64_t max_tokens,
                                           std::int64_t n = 1) noexcept {
  return estimate_cost(estimate_tokens(prompt), max_tokens, n);
}

LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_ADMISSION_TOKENS_HPP
