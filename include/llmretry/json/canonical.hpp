#ifndef LLMRETRY_JSON_CANONICAL_HPP
#define LLMRETRY_JSON_CANONICAL_HPP

#include "../version.hpp"

/// The canonical form of a JSON request body (target llmretry::json), for store::fingerprint: two bodies
/// that differ only in key order or white space have the same canonical form.

#include <nlohmann/json.hpp>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

LLMRETRY_BEGIN_NAMESPACE
namespace json {

/// Returns true when the JSON text `text` nests arrays and objects deeper than `limit` (brackets inside
/// strings do not count). Reads a malformed text as far as it goes, without judging it: a closing bracket
/// with nothing open counts for nothing. Never throws.
[[nodiscard]] constexpr bool nested_deeper_than(std::string_view text, int limit) noexcept {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

/// The deepest nesting of arrays and objects canonical accepts: writing the canonical form takes a stack
/// frame per level, and a body of untrusted origin must not exhaust the stack.
inline constexpr int max_canonical_depth = 512;

/// Returns `body` re-serialised with the keys of every object sorted (by bytes), no insignificant white
/// space, strings in UTF-8 with the shortest escapes, numbers as nlohmann::json writes them (integers
/// exactly, other numbers in the shortest form that reads back the same). A key that occurs twice keeps its
/// last value. Throws std::invalid_argument when `body` is not JSON, or nests arrays and objects deeper
/// than max_canonical_depth.
[[nodiscard]] inline std::string canonical(std::string_view body) {
  if (nested_deeper_than(body, max_canonical_depth))
    throw std::invalid_argument("canonical: the body nests deeper than " + std::to_string(max_canonical_depth) +
                                " levels");
  const auto parsed = nlohmann::json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) throw std::invalid_argument("canonical: the body is not JSON");
  return parsed.dump();
}

}  // namespace json
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_JSON_CANONICAL_HPP
