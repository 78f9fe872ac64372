// The output and errors files of llmretry-batch: append-only JSONL, each line durable before it counts.
#ifndef LLMRETRY_BATCH_ANSWERS_HPP
#define LLMRETRY_BATCH_ANSWERS_HPP

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_set>

namespace batch {

/// An output or errors file that cannot be opened, locked, read or written: what() names the file.
class FileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// An append-only JSONL file of answered requests, the record of what is done: a line is written whole
/// and made durable (fdatasync) before append returns, so that every complete line found after a crash was
/// answered. The file is held under an exclusive lock (flock) while open: one llmretry-batch at a time on
/// this host (flock does not exclude the processes of other hosts).
/// append is thread-safe.
class AnswerFile {
 public:
  /// Opens `path` for appending (creating it), locks it, cuts a torn last line (one without its newline,
  /// left by a crash while writing) and reads the custom_id of every line. Lines that are not a JSON
  /// object with a string custom_id are ignored and counted. Throws FileError naming the file, also when it
  /// is not a regular file.
  explicit AnswerFile(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY, 0644);
    if (fd_ < 0) fail("cannot be opened");
    struct stat status {};
    if (::fstat(fd_, &status) != 0 || !S_ISREG(status.st_mode)) {
      ::close(fd_);
      throw FileError(path_ + ": not a regular file");
    }
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      ::close(fd_);
      if (error == EWOULDBLOCK) throw FileError(path_ + ": in use by another llmretry-batch");
      errno = error;
      fail("cannot be locked");
    }
    read_existing();
  }

  AnswerFile(const AnswerFile&) = delete;
  AnswerFile& operator=(const AnswerFile&) = delete;
  AnswerFile(AnswerFile&&) = delete;
  AnswerFile& operator=(AnswerFile&&) = delete;
  ~AnswerFile() { ::close(fd_); }

  /// Returns the custom_ids of the lines the file held when it was opened.
  [[nodiscard]] const std::unordered_set<std::string>& answered() const noexcept { return answered_; }
  /// Returns how many lines were ignored when it was opened (not a JSON object with a custom_id).
  [[nodiscard]] std::size_t ignored() const noexcept { return ignored_; }
  /// Returns true when a torn last line was cut when it was opened.
  [[nodiscard]] bool cut_torn_line() const noexcept { return torn_; }

  /// Appends `line` (without its newline) and makes it durable. Throws FileError naming the file.
  void append(std::string line) {
    line += '\n';
    const std::lock_guard<std::mutex> lock(mutex_);
    for (std::string_view rest = line; !rest.empty();) {
      const ssize_t written = ::write(fd_, rest.data(), rest.size());
      if (written < 0 && errno == EINTR) continue;
      if (written <= 0) fail("cannot be written");
      rest.remove_prefix(static_cast<std::size_t>(written));
    }
    if (::fdatasync(fd_) != 0) fail("cannot be synced to disk");
  }

 private:
  [[noreturn]] void fail(const char* what) const {
    throw FileError(path_ + ": " + what + ": " + std::error_code(errno, std::generic_category()).message());
  }

  void read_existing() {
    std::string content;
    char buffer[1 << 16];
    for (off_t offset = 0;;) {
      const ssize_t got = ::pread(fd_, buffer, sizeof buffer, offset);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) fail("cannot be read");
      if (got == 0) break;
      content.append(buffer, static_cast<std::size_t>(got));
      offset += got;
    }
    const std::size_t end = content.rfind('\n') == std::string::npos ? 0 : content.rfind('\n') + 1;
    if (end < content.size()) {
      if (::ftruncate(fd_, static_cast<off_t>(end)) != 0) fail("cannot cut its torn last line");
      torn_ = true;
    }
    for (std::size_t start = 0; start < end;) {
      const std::size_t newline = content.find('\n', start);
      read_line(std::string_view(content).substr(start, newline - start));
      start = newline + 1;
    }
  }

  void read_line(std::string_view text) {
    if (text.empty()) return;
    const auto line = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    const auto id = line.is_object() ? line.find("custom_id") : line.end();
    if (id == line.end() || !id->is_string()) {
      ++ignored_;
      return;
    }
    answered_.insert(id->get<std::string>());
  }

  std::string path_;
  int fd_ = -1;
  std::mutex mutex_;
  std::unordered_set<std::string> answered_;
  std::size_t ignored_ = 0;
  bool torn_ = false;
};

}  // namespace batch

#endif  // LLMRETRY_BATCH_ANSWERS_HPP
