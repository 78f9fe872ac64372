// What the fuzz targets share: the input as text or as response headers, a fixed "now", and checks.
#ifndef LLMRETRY_FUZZ_SUPPORT_HPP
#define LLMRETRY_FUZZ_SUPPORT_HPP

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <utility>
#include <vector>

namespace llmretry_fuzz {

using Headers = std::vector<std::pair<std::string_view, std::string_view>>;

/// 2026-11-29 00:00:00 UTC: a fixed "now" keeps every run reproducible.
inline const std::chrono::system_clock::time_point now{std::chrono::seconds{1'795'910'400}};

/// Stops the run, which libFuzzer reports as a crash with the input, when `condition` is false.
inline void require(bool condition) {
  if (!condition) std::abort();
}

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

/// Returns the lines of `text` that contain a colon, split at the first one into name and value (the value
/// keeps its white space: the parsers must trim it).
inline Headers header_lines(std::string_view text) {
  Headers headers;
  while (!text.empty()) {
    const auto end = text.find('\n');
    const auto line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    const auto colon = line.find(':');
    if (colon != std::string_view::npos) headers.emplace_back(line.substr(0, colon), line.substr(colon + 1));
  }
  return headers;
}

}  // namespace llmretry_fuzz

#endif  // LLMRETRY_FUZZ_SUPPORT_HPP
