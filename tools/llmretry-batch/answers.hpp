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

/// Returns true when `line` is shaped as a line of the Batch output format: an object with a string `id`
/// and `custom_id`, and a `response` and an `error` that are each an object or null.
inline bool is_batch_line(const nlohmann::json& line) {
  if (!line.is_object()) return false;
  const auto string = [&](const char* name) { return line.contains(name) && line.at(name).is_string(); };
  const auto object_or_null = [&](const char* name) {
    return line.contains(name) && (line.at(name).is_object() || line.at(name).is_null());
  };
  return string("id") && string("custom_id") && object_or_null("response") && object_or_null("error");
}

/// An append-only JSONL file of answered requests, the record of what is done: a line is written whole
/// and made durable (fdatasync) before append returns, so that every complete line found after a crash was
/// answered. The file is held under an exclusive lock (flock) while open: one llmretry-batch at a time on
/// this host (flock does not exclude the processes of other hosts).
/// append is thread-safe.
class AnswerFile {
 public:
  /// Opens `path` for appending (creating it), locks it and reads the custom_id of every line, a line at a
  /// time. A last line without its newline is completed when it parses, and cut when it is torn (it does
  /// not parse and begins as every line written here begins: a crash while writing it). Throws FileError
  /// naming the file when it is not a regular file, cannot be opened, locked, read or written, or holds a
  /// line that is not in the Batch output format.
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
    // A run that held the lock may have replaced the file (--retry-errors) after it was opened here: the lock
    // then holds a file no longer at `path`, which nobody reads, while that run works on the new one.
    struct stat now {};
    if (::stat(path_.c_str(), &now) != 0 || now.st_dev != status.st_dev || now.st_ino != status.st_ino) {
      ::close(fd_);
      throw FileError(path_ + ": in use by another llmretry-batch (it replaced the file as it was opened here)");
    }
    try {
      read_existing();
    } catch (...) {
      ::close(fd_);
      throw;
    }
  }

  AnswerFile(const AnswerFile&) = delete;
  AnswerFile& operator=(const AnswerFile&) = delete;
  AnswerFile(AnswerFile&&) = delete;
  AnswerFile& operator=(AnswerFile&&) = delete;
  ~AnswerFile() { ::close(fd_); }

  /// Returns the custom_ids of the lines the file held when it was opened.
  [[nodiscard]] const std::unordered_set<std::string>& answered() const noexcept { return answered_; }
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

  /// Reads the file a line at a time (only the line being read is held in memory).
  void read_existing() {
    std::string line;  // the line being read, without its newline
    std::size_t number = 1;
    off_t line_start = 0;
    char buffer[1 << 16];
    for (off_t offset = 0;;) {
      const ssize_t got = ::pread(fd_, buffer, sizeof buffer, offset);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) fail("cannot be read");
      if (got == 0) break;
      const std::string_view chunk(buffer, static_cast<std::size_t>(got));
      for (std::size_t from = 0; from < chunk.size();) {
        const std::size_t newline = chunk.find('\n', from);
        line.append(chunk.substr(from, newline - from));
        if (newline == std::string_view::npos) break;
        read_line(line, number++);
        line.clear();
        line_start = offset + static_cast<off_t>(newline + 1);
        from = newline + 1;
      }
      offset += got;
    }
    if (!line.empty()) read_last_line(line, number, line_start);
  }

  /// Reads a last line that has no newline: one that parses was written whole and gets its newline; one
  /// that begins as every line written here begins is torn (a crash while writing it) and is cut.
  void read_last_line(const std::string& line, std::size_t number, off_t start) {
    constexpr std::string_view head = R"({"id":"batch_req_)";
    const bool begins_as_written = head.substr(0, line.size()) == std::string_view(line).substr(0, head.size());
    if (nlohmann::json::accept(line) || !begins_as_written) {
      read_line(line, number);  // throws unless it is a whole line of the Batch output format
      append("");
      return;
    }
    if (::ftruncate(fd_, start) != 0) fail("cannot cut its torn last line");
    torn_ = true;
  }

  /// Counts the custom_id of a line. Throws FileError unless it is blank or a line of the Batch output format.
  void read_line(std::string_view text, std::size_t number) {
    if (text.find_first_not_of(" \t\r") == std::string_view::npos) return;
    const auto line = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (!is_batch_line(line))
      throw FileError(
          path_ + ":" + std::to_string(number) +
          ": not a line of the Batch output format (id, custom_id, response, error): is it the right file?");
    answered_.insert(line.at("custom_id").get<std::string>());
  }

  std::string path_;
  int fd_ = -1;
  std::mutex mutex_;
  std::unordered_set<std::string> answered_;
  bool torn_ = false;
};

}  // namespace batch

#endif  // LLMRETRY_BATCH_ANSWERS_HPP
