// llmretry-batch --metrics-file: the Prometheus text of the run's metrics, written to a file every few
// seconds and at exit (the textfile collector's way: beside the file, then renamed over it).
#ifndef LLMRETRY_BATCH_METRICS_FILE_HPP
#define LLMRETRY_BATCH_METRICS_FILE_HPP

#include <llmretry/admission/priority.hpp>
#include <llmretry/metrics/prometheus.hpp>

#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/periodic_thread.hpp"
#include "files.hpp"
#include "replacement.hpp"
#include "report.hpp"

namespace batch {

/// The labels every family of the batch's own carries: the requests' class and tenant (one of each per process).
struct RunLabels {
  llmretry::Priority priority = llmretry::Priority::interactive;
  std::string tenant;  ///< empty: nobody named (the label's value is then empty)
};

/// Returns the Prometheus text of the batch's own families, with `labels`:
///   llm_batch_lines_total{outcome,priority,tenant}   counter  lines this process recorded: outcome "answered"
///                                                             (an answer) or "failed" (an errors line)
///   llm_batch_lines_remaining{priority,tenant}       gauge    lines still without theirs; `remaining`: the
///                                                             run's lines not yet done before this run (none:
///                                                             no series, as in a fleet worker)
inline std::string progress_metrics(const Stats& stats, const RunLabels& labels,
                                    std::optional<std::int64_t> remaining) {
  using llmretry::metrics::append_family;
  using llmretry::metrics::append_sample;
  const char* priority = llmretry::to_string(labels.priority);
  std::string text;
  append_family(
      text, "llm_batch_lines_total",
      "Lines this process recorded, by outcome: answered (an answer) or failed (a request given up: an errors line).",
      "counter");
  for (const auto& [outcome, count] :
       {std::pair{"answered", stats.answered.load()}, std::pair{"failed", stats.failed.load()}})
    append_sample(text, "llm_batch_lines_total",
                  {{"outcome", outcome}, {"priority", priority}, {"tenant", labels.tenant}}, std::to_string(count));
  append_family(text, "llm_batch_lines_remaining",
                "Lines of this run's input still without their answer or errors line.", "gauge");
  if (remaining) {
    const std::int64_t left = *remaining - stats.answered - stats.failed;
    append_sample(text, "llm_batch_lines_remaining", {{"priority", priority}, {"tenant", labels.tenant}},
                  std::to_string(left > 0 ? left : 0));
  }
  return text;
}

/// Throws FileProblem unless `path` is a regular file (not a symbolic link) or a new path, and is none of
/// the files `others` name: a metrics file replaces only a file that may be an earlier one of its own, never
/// a directory, a device, a pipe, a link or a file the run reads or writes.
inline void check_metrics_file(const std::string& path, const std::vector<std::string>& others = {}) {
  for (const std::string& other : others)  // by name too: a file of the run may not exist yet
    if (detail::same_path(path, other)) throw FileProblem("--metrics-file " + path + " is the file " + other);
  struct stat status {};
  if (::lstat(path.c_str(), &status) != 0) {
    if (errno == ENOENT) return;
    throw FileProblem("--metrics-file " + path + ": cannot be examined");
  }
  if (!S_ISREG(status.st_mode))
    throw FileProblem("--metrics-file " + path +
                      ": not a regular file (it is replaced whole every few seconds: give the path of a file)");
  for (const std::string& other : others)
    if (detail::same_file(status, detail::status_of(other)))
      throw FileProblem("--metrics-file " + path + " is the file " + other);
}

/// Writes `text()` to the file `path` now, every `every` on a thread of its own, and once more when
/// destroyed: each time a new version written beside it and renamed over it (see Replacement), so that a
/// reader (node_exporter's textfile collector) never reads half of one. A write that fails later is told on
/// stderr (once until one succeeds again) and does not stop the run.
class MetricsFile {
 public:
  static constexpr std::chrono::milliseconds default_every{5'000};

  /// Checks `path` (check_metrics_file) and writes the first version. Throws FileProblem naming it when it
  /// cannot be used or written. `text` is called on the writing thread and must be thread-safe.
  MetricsFile(std::string path, std::function<std::string()> text, std::chrono::milliseconds every = default_every)
      : path_(std::move(path)), text_(std::move(text)) {
    check_metrics_file(path_);
    try {
      write();
    } catch (const FileError& error) {
      throw FileProblem(std::string("--metrics-file ") + error.what());
    }
    thread_.emplace(every, [this] {
      write_or_tell();
      return true;
    });
  }
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;
  MetricsFile(MetricsFile&&) = delete;
  MetricsFile& operator=(MetricsFile&&) = delete;
  /// Stops the thread and writes the last version.
  ~MetricsFile() {
    thread_.reset();
    write_or_tell();
  }

 private:
  void write() {
    Replacement file(path_, Links::replace);
    file.append(text_());
    file.commit();
  }

  void write_or_tell() noexcept {
    try {
      write();
      failing_ = false;
    } catch (const std::exception& error) {
      if (!std::exchange(failing_, true)) std::fprintf(stderr, "llmretry-batch: --metrics-file %s\n", error.what());
    }
  }

  const std::string path_;
  const std::function<std::string()> text_;
  bool failing_ = false;                                  ///< the last write failed (and was told)
  std::optional<llmretry_tools::PeriodicThread> thread_;  ///< last: it starts once the rest is ready
};

}  // namespace batch

#endif  // LLMRETRY_BATCH_METRICS_FILE_HPP
