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
#include <utility>
#include <vector>

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

namespace detail {

/// Builds the document of a JSON text as nlohmann::json's parser does, but keeps an integer beyond 64 bits
/// exactly: as a binary value holding its digits (no JSON text makes a binary value), where the parser
/// would round it to a double and two different integers could read the same.
class ExactDocument final : public nlohmann::json_sax<nlohmann::json> {
 public:
  using json = nlohmann::json;

  /// Builds the document into `root`, which must outlive it.
  explicit ExactDocument(json& root) noexcept : root_(root) {}

  bool null() override { return place(nullptr); }
  bool boolean(bool value) override { return place(value); }
  bool number_integer(json::number_integer_t value) override { return place(value); }
  bool number_unsigned(json::number_unsigned_t value) override { return place(value); }
  bool number_float(json::number_float_t value, const json::string_t& text) override {
    // Only digits and a sign: an integer (the text of a fraction holds the locale's decimal point).
    if (text.find_first_not_of("-0123456789") != json::string_t::npos) return place(value);
    return place(json::binary(json::binary_t::container_type(text.begin(), text.end())));
  }
  bool string(json::string_t& value) override { return place(std::move(value)); }
  bool binary(json::binary_t& value) override { return place(std::move(value)); }
  bool start_object(std::size_t /*elements*/) override { return open(json::object()); }
  bool key(json::string_t& name) override {
    slot_ = &(*open_.back())[name];  // a key given twice: its last value stays
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t /*elements*/) override { return open(json::array()); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t /*position*/, const std::string& /*token*/,
                   const nlohmann::detail::exception& /*error*/) override {
    return false;
  }

 private:
  /// Puts `value` where the text is: the whole document, the next element of an array, a member's value.
  /// Returns where it went.
  json* put(json value) {
    if (open_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    json& container = *open_.back();
    if (container.is_array()) {
      container.push_back(std::move(value));
      return &container.back();
    }
    *slot_ = std::move(value);
    return slot_;
  }
  bool place(json value) {
    put(std::move(value));
    return true;
  }
  bool open(json container) {
    open_.push_back(put(std::move(container)));
    return true;
  }
  bool close() {
    open_.pop_back();
    return true;
  }

  json& root_;
  std::vector<json*> open_;  ///< the arrays and objects not closed yet, the innermost last
  json* slot_ = nullptr;     ///< the value of the member whose key came last
};

/// Appends the canonical text of `value` (an ExactDocument's) to `out`.
inline void append_canonical(const nlohmann::json& value, std::string& out) {
  if (value.is_object()) {
    out += '{';
    for (auto member = value.begin(); member != value.end(); ++member) {  // sorted by key
      if (member != value.begin()) out += ',';
      out += nlohmann::json(member.key()).dump();
      out += ':';
      append_canonical(member.value(), out);
    }
    out += '}';
  } else if (value.is_array()) {
    out += '[';
    for (std::size_t i = 0; i < value.size(); ++i) {
      if (i > 0) out += ',';
      append_canonical(value[i], out);
    }
    out += ']';
  } else if (value.is_binary()) {  // an integer beyond 64 bits, as written
    out.append(value.get_binary().begin(), value.get_binary().end());
  } else {
    out += value.dump();
  }
}

}  // namespace detail

/// Returns `body` re-serialised with the keys of every object sorted (by bytes), no insignificant white
/// space, strings in UTF-8 with the shortest escapes, numbers as nlohmann::json writes them (integers
/// exactly, those beyond 64 bits too, other numbers in the shortest form that reads back the same). A key that
/// occurs twice keeps its last value. Throws std::invalid_argument when `body` is not JSON (an integer of
/// more than about 300 digits included: the parser takes it for a number out of range), or nests arrays and
/// objects deeper than max_canonical_depth.
[[nodiscard]] inline std::string canonical(std::string_view body) {
  if (nested_deeper_than(body, max_canonical_depth))
    throw std::invalid_argument("canonical: the body nests deeper than " + std::to_string(max_canonical_depth) +
                                " levels");
  nlohmann::json document;
  detail::ExactDocument builder(document);
  if (!nlohmann::json::sax_parse(body.begin(), body.end(), &builder))
    throw std::invalid_argument("canonical: the body is not JSON");
  std::string out;
  detail::append_canonical(document, out);
  return out;
}

}  // namespace json
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_JSON_CANONICAL_HPP
