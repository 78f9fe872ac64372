#ifndef LLMRETRY_JSON_CANONICAL_HPP
#define LLMRETRY_JSON_CANONICAL_HPP

/// The canonical form of a JSON request body (target llmretry::json), for store::fingerprint: two bodies
/// that differ only in key order or white space have the same canonical form.

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>
#include <string_view>

namespace llmretry::json {

/// Returns `body` re-serialised with the keys of every object sorted (by bytes), no insignificant white
/// space, strings in UTF-8 with the shortest escapes, numbers as nlohmann::json writes them (integers
/// exactly, other numbers in the shortest form that reads back the same). A key that occurs twice keeps its
/// last value. Throws std::invalid_argument when `body` is not JSON.
[[nodiscard]] inline std::string canonical(std::string_view body) {
  const auto parsed = nlohmann::json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) throw std::invalid_argument("canonical: the body is not JSON");
  return parsed.dump();
}

}  // namespace llmretry::json

#endif  // LLMRETRY_JSON_CANONICAL_HPP
