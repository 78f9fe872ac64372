#ifndef LLMRETRY_METRICS_PROMETHEUS_HPP
#define LLMRETRY_METRICS_PROMETHEUS_HPP

#include <array>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <initializer_list>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>

#include "../version.hpp"

/// The Prometheus text exposition format, version 0.0.4: the pieces of one scrape's text (escaping,
/// numbers, sample and metadata lines), for metrics::Registry and for an application's own series.

LLMRETRY_BEGIN_NAMESPACE
namespace metrics {

/// The Content-Type of the Prometheus text exposition format 0.0.4 (such as Registry::prometheus_text()).
inline constexpr std::string_view prometheus_content_type = "text/plain; version=0.0.4; charset=utf-8";

namespace detail {

/// Returns the length of the well-formed UTF-8 sequence at the front of `text` (1 to 4), or 0 when its
/// first bytes are not one (a stray continuation byte, an overlong form, a surrogate, past U+10FFFF, cut).
/// Requires `text` not empty.
[[nodiscard]] constexpr std::size_t utf8_sequence_length(std::string_view text) noexcept {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80U) return 1;
  std::size_t length = 0;
  unsigned char low = 0x80U;  // the range of the second byte, narrower after some leads
  unsigned char high = 0xBFU;
  if (lead >= 0xC2U && lead <= 0xDFU) {
    length = 2;
  } else if (lead >= 0xE0U && lead <= 0xEFU) {
    length = 3;
    if (lead == 0xE0U) low = 0xA0U;   // no overlong form
    if (lead == 0xEDU) high = 0x9FU;  // no surrogate
  } else if (lead >= 0xF0U && lead <= 0xF4U) {
    length = 4;
    if (lead == 0xF0U) low = 0x90U;   // no overlong form
    if (lead == 0xF4U) high = 0x8FU;  // nothing past U+10FFFF
  } else {
    return 0;
  }
  if (text.size() < length || byte(1) < low || byte(1) > high) return 0;
  for (std::size_t i = 2; i < length; ++i)
    if (byte(i) < 0x80U || byte(i) > 0xBFU) return 0;
  return length;
}

/// Calls `append(piece)` for each piece of `text` in order: a well-formed UTF-8 sequence as it is, or
/// U+FFFD in place of a byte that does not start one.
template <class Append>
void each_utf8_sequence(std::string_view text, Append&& append) {
  while (!text.empty()) {
    const std::size_t length = utf8_sequence_length(text);
    append(length == 0 ? std::string_view("\xEF\xBF\xBD") : text.substr(0, length));
    text.remove_prefix(length == 0 ? 1 : length);
  }
}

/// Returns `text` as well-formed UTF-8: each byte that is not part of it replaced by U+FFFD.
[[nodiscard]] inline std::string valid_utf8(std::string_view text) {
  std::string valid;
  valid.reserve(text.size());
  each_utf8_sequence(text, [&](std::string_view piece) { valid += piece; });
  return valid;
}

}  // namespace detail

/// Returns `value` escaped for a label value between double quotes: backslash, double quote and line feed
/// become `\\`, `\"` and `\n`; a byte that is not part of well-formed UTF-8 becomes U+FFFD (Prometheus
/// refuses a whole scrape over one invalid label value, and label values may come from the network).
[[nodiscard]] inline std::string escape_label_value(std::string_view value) {
  std::string escaped;
  escaped.reserve(value.size());
  detail::each_utf8_sequence(value, [&](std::string_view piece) {
    if (piece == "\\") escaped += "\\\\";
    else if (piece == "\"") escaped += "\\\"";
    else if (piece == "\n") escaped += "\\n";
    else escaped += piece;
  });
  return escaped;
}

/// Returns `text` escaped for a `# HELP` line: backslash and line feed become `\\` and `\n`.
[[nodiscard]] inline std::string escape_help(std::string_view text) {
  std::string escaped;
  escaped.reserve(text.size());
  for (const char c : text) {
    if (c == '\\') escaped += "\\\\";
    else if (c == '\n') escaped += "\\n";
    else escaped += c;
  }
  return escaped;
}

/// Returns `value` as Prometheus reads a sample value or a bucket bound: the shortest text that reads
/// back as the same double ("0.25", "1", "1e+21"), or "+Inf", "-Inf", "NaN". Needs floating-point
/// std::to_chars (libstdc++ 11, MSVC 19.24).
[[nodiscard]] inline std::string format_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  std::array<char, 32> text{};  // the shortest form of a double takes at most 24 characters
  const auto written =
      std::to_chars(text.data(), std::next(text.data(), static_cast<std::ptrdiff_t>(text.size())), value);
  return {text.data(), written.ptr};
}

/// One label of a sample line: its name (a valid Prometheus label name) and its value (escaped on writing).
using Label = std::pair<std::string_view, std::string_view>;

/// Appends the `# HELP` and `# TYPE` lines of the family `name` (a valid metric name); `type` is "counter",
/// "gauge", "histogram", "summary" or "untyped".
inline void append_family(std::string& out, std::string_view name, std::string_view help, std::string_view type) {
  out.append("# HELP ").append(name).append(" ").append(escape_help(help)).append("\n");
  out.append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

/// Appends one sample line: `name{label="value",...} value`, with `labels` (a range of Label, such as a
/// std::array) in their order, each value escaped (no labels: no braces); `value` as format_value or an
/// integer writes it.
template <class Labels>
void append_sample(std::string& out, std::string_view name, const Labels& labels, std::string_view value) {
  out.append(name);
  char separator = '{';
  for (const Label& label : labels) {
    out.append(1, separator).append(label.first).append("=\"").append(escape_label_value(label.second)).append("\"");
    separator = ',';
  }
  if (separator == ',') out.append("}");
  out.append(" ").append(value).append("\n");
}

/// Appends one sample line with the labels listed: append_sample(out, name, {{"provider", "openai"}}, "1").
inline void append_sample(std::string& out, std::string_view name, std::initializer_list<Label> labels,
                          std::string_view value) {
  append_sample<std::initializer_list<Label>>(out, name, labels, value);
}

}  // namespace metrics
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_METRICS_PROMETHEUS_HPP
