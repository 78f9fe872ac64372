// The lines of llmretry-batch's errors file that a rerun sends again (--retry-errors, --fresh).
#ifndef LLMRETRY_BATCH_SEND_AGAIN_HPP
#define LLMRETRY_BATCH_SEND_AGAIN_HPP

#include <llmretry/vocabulary.hpp>

#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <string_view>
#include <system_error>

#include "answers.hpp"

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
/// whole (its new version written and synced beside it, then renamed over it): a crash leaves one version
/// or the other. Returns how many lines were removed (none: the file is left as it was). The caller holds
/// the lock of the output file, which keeps the other runs of this batch away. Throws FileError naming the
/// file.
inline std::size_t drop_lines(const std::string& path, const std::function<bool(std::string_view)>& send_again) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return 0;  // none yet
  const auto fail = [&](const char* what) {
    throw FileError(path + ": " + what + ": " + std::error_code(errno, std::generic_category()).message());
  };
  std::string temporary = path + ".XXXXXX";
  const int fd = ::mkstemp(temporary.data());
  if (fd < 0) fail("cannot write its new version beside it");
  std::FILE* out = ::fdopen(fd, "wb");
  if (out == nullptr) {
    ::close(fd);
    ::unlink(temporary.c_str());
    fail("cannot write its new version beside it");
  }
  std::size_t dropped = 0;
  for (std::string line; std::getline(in, line);) {
    const bool newline = !in.eof();  // the last line may have none (torn)
    if (send_again(stop_reason_of(line))) {
      ++dropped;
      continue;
    }
    std::fwrite(line.data(), 1, line.size(), out);
    if (newline) std::fputc('\n', out);
  }
  struct stat status {};
  const bool written = !in.bad() && std::fflush(out) == 0 && std::ferror(out) == 0 &&
                       ::stat(path.c_str(), &status) == 0 && ::fchmod(fd, status.st_mode & 07777) == 0 &&
                       ::fdatasync(fd) == 0;
  const int error = errno;
  std::fclose(out);
  if (!written || dropped == 0) {
    ::unlink(temporary.c_str());
    errno = error;
    if (!written) fail("cannot write its new version beside it");
    return 0;
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int rename_error = errno;
    ::unlink(temporary.c_str());
    errno = rename_error;
    fail("cannot be replaced by its new version");
  }
  return dropped;
}

}  // namespace batch

#endif  // LLMRETRY_BATCH_SEND_AGAIN_HPP
