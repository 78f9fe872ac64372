// The values of the metrics' model label for the models clients name: bounded, so that /metrics cannot
// be made to grow without end by a client sending a new model name with each request.
#ifndef LLMRETRY_RELAY_MODEL_LABELS_HPP
#define LLMRETRY_RELAY_MODEL_LABELS_HPP

#include <cstddef>
#include <mutex>
#include <set>
#include <string>
#include <string_view>

namespace relay {

/// Gives each model named by clients its label value: the name itself (cut to max_length bytes) for the
/// first max_distinct names seen, "other" for every later one. Thread-safe.
class ModelLabels {
 public:
  static constexpr std::size_t max_distinct = 100;  ///< distinct names labelled as themselves
  static constexpr std::size_t max_length = 128;    ///< the longest label value, in bytes

  /// Returns the label value of `model`.
  std::string of(std::string_view model) {
    std::string label(model.substr(0, max_length));
    const std::lock_guard<std::mutex> lock(mutex_);
    if (seen_.count(label) != 0) return label;
    if (seen_.size() >= max_distinct) return "other";
    seen_.insert(label);
    return label;
  }

 private:
  std::mutex mutex_;
  std::set<std::string, std::less<>> seen_;
};

}  // namespace relay

#endif  // LLMRETRY_RELAY_MODEL_LABELS_HPP
