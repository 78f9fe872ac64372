// The lines of llmretry-batch's errors file that a rerun sends again (--retry-errors, --fresh).
#ifndef LLMRETRY_BATCH_SEND_AGAIN_HPP
#define LLMRETRY_BATCH_SEND_AGAIN_HPP

#include <llmretry/vocabulary.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <fstream>
#include <functional>
#include <string>
#include <string_view>

#include "answers.hpp"
#include "replacement.hpp"

namespace batch {

/// Returns true when a request given up for `reason` may be answered if sent again later: the provider or
/// the limits asked for more time, or more attempts, than the run allowed (not a refusal of the request).
inline bool is_temporary(std::string_view reason) {
  using llmretry::StopReason;
  for (const StopReason temporary :
       {StopReason::attempts_exhausted, StopReason::wait_budget, StopReason::provider_wait_too_long,
        StopReason::deadline, StopReason::refused, StopReason::no_capacity, StopReason::retry_budget,
        StopReason::circuit_open, StopReason::pacing_unavailable})
    if (reason == llmretry::to_string(temporary)) return true;
  return false;
}

/// Returns the `error.stop_reason` of an errors-file line, empty when it has none.
inline std::string stop_reason_of(const std::string& text) {
  const auto line = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!is_batch_line(line) || !line.at("error").is_object()) return {};
  const auto& error = line.at("error");
  const auto reason = error.find("stop_reason");
  return reason != error.end() && reason->is_string() ? reason->get<std::string>() : std::string();
}

/// Removes from the errors file `path` the lines whose stop reason `send_again` accepts, so that this run
/// sends their requests again; the other lines stay as they were, in their order. The file is replaced
/// whole (see Replacement): a crash leaves one version or the other. Returns how many lines were removed
/// (none: the file is left as it was). The caller holds the file's lock (AnswerFile), which keeps away the
/// other runs that write to it. Throws FileError naming the file.
inline std::size_t drop_lines(const std::string& path, const std::function<bool(std::string_view)>& send_again) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return 0;  // none yet
  Replacement kept(path, Links::follow);
  std::size_t dropped = 0;
  for (std::string line; std::getline(in, line);) {
    if (send_again(stop_reason_of(line))) {
      ++dropped;
      continue;
    }
    if (in.eof()) kept.append(line);  // the last line may have no newline (torn)
    else kept.write(line);
  }
  if (in.bad()) throw FileError(path + ": cannot be read");
  if (dropped > 0) kept.commit();
  return dropped;
}

}  // namespace batch

#endif  // LLMRETRY_BATCH_SEND_AGAIN_HPP
