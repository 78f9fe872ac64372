// The values of the metrics' labels that come from outside (models, tenants, request paths): bounded, so that
// the metrics cannot be made to grow without end by a new name with each request.
#ifndef LLMRETRY_TOOLS_COMMON_LABELS_HPP
#define LLMRETRY_TOOLS_COMMON_LABELS_HPP

#include <cstddef>
#include <mutex>
#include <set>
#include <string>
#include <string_view>

namespace llmretry_tools {

/// Gives each name sent by clients (or read from an input) its label value: the name itself (cut to max_length
/// bytes) for the first `max_distinct` names seen, "other" for every later one. Thread-safe.
class BoundedLabels {
 public:
  static constexpr std::size_t max_length = 128;  ///< the longest label value, in bytes

  /// Labels as themselves the first `max_distinct` names.
  explicit BoundedLabels(std::size_t max_distinct) : max_distinct_(max_distinct) {}

  /// Returns the label value of `name`.
  std::string of(std::string_view name) {
    std::string label(name.substr(0, max_length));
    const std::lock_guard<std::mutex> lock(mutex_);
    if (seen_.count(label) != 0) return label;
    if (seen_.size() >= max_distinct_) return "other";
    seen_.insert(label);
    return label;
  }

 private:
  std::size_t max_distinct_;
  std::mutex mutex_;
  std::set<std::string, std::less<>> seen_;
};

/// Returns the label task_type of a request's path: "chat", "responses", "embeddings", "messages" (or "other").
inline const char* task_type(std::string_view path) noexcept {
  if (path == "/v1/chat/completions") return "chat";
  if (path == "/v1/responses") return "responses";
  if (path == "/v1/embeddings") return "embeddings";
  if (path == "/v1/messages") return "messages";
  return "other";
}

}  // namespace llmretry_tools

#endif  // LLMRETRY_TOOLS_COMMON_LABELS_HPP
