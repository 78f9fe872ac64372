// A file replaced whole: its new version written beside it, synced, then renamed over it.
#ifndef LLMRETRY_BATCH_REPLACEMENT_HPP
#define LLMRETRY_BATCH_REPLACEMENT_HPP

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "answers.hpp"

namespace batch {

/// Whether a Replacement of a symbolic link replaces the file it leads to (a file the user named through a
/// link), or the link itself (a file the program owns, such as its metrics: a link planted there later must
/// not make it write elsewhere).
enum class Links { follow, replace };

/// A file written beside `path` (in its directory, named `path` and a random suffix) and renamed over it
/// once whole and synced: a crash leaves the old version or the new one, and a reader opening `path`
/// reads one whole version. The new version keeps the old one's permissions and, where it may, its group
/// (a new file's are 0644). Destroyed before commit(), it removes its new version and leaves `path` as it was.
class Replacement {
 public:
  /// Creates the new version of `path`, or of the file it leads to when it is a symbolic link and `links`
  /// says follow. Throws FileError naming `path`.
  explicit Replacement(std::string path, Links links)
      : path_(std::move(path)),
        target_(links == Links::follow ? target_of(path_) : path_),
        temporary_(target_ + ".XXXXXX") {
    const int fd = ::mkstemp(temporary_.data());
    if (fd < 0) fail("cannot write its new version beside it");
    file_ = ::fdopen(fd, "wb");
    if (file_ == nullptr) {
      const int error = errno;
      ::close(fd);
      ::unlink(temporary_.c_str());
      errno = error;
      fail("cannot write its new version beside it");
    }
  }
  Replacement(const Replacement&) = delete;
  Replacement& operator=(const Replacement&) = delete;
  Replacement(Replacement&&) = delete;
  Replacement& operator=(Replacement&&) = delete;
  ~Replacement() {
    if (file_ != nullptr) std::fclose(file_);
    if (!committed_) ::unlink(temporary_.c_str());
  }

  /// Writes `text` as it is.
  void append(std::string_view text) { std::fwrite(text.data(), 1, text.size(), file_); }
  /// Writes `line` and a newline.
  void write(std::string_view line) {
    append(line);
    std::fputc('\n', file_);
    ++lines_;
  }
  /// Returns how many lines write() wrote.
  [[nodiscard]] std::size_t lines() const noexcept { return lines_; }
  /// Syncs the new version (with the old one's permissions and group, or 0644) and renames it over the file.
  /// Throws FileError naming the file.
  void commit() {
    struct stat old {};
    // A link replaced itself (Links::replace) is as a new file.
    const bool existed = ::lstat(target_.c_str(), &old) == 0 && S_ISREG(old.st_mode);
    // The group where this user may give it (one of its own groups); otherwise the new version keeps its own.
    if (existed) (void)::fchown(::fileno(file_), static_cast<uid_t>(-1), old.st_gid);
    const mode_t mode = existed ? old.st_mode & 0777 : 0644;
    const bool written = std::fflush(file_) == 0 && std::ferror(file_) == 0 && ::fchmod(::fileno(file_), mode) == 0 &&
                         ::fdatasync(::fileno(file_)) == 0;
    const int error = errno;
    std::fclose(file_);
    file_ = nullptr;
    errno = error;
    if (!written) fail("cannot write its new version beside it");
    if (::rename(temporary_.c_str(), target_.c_str()) != 0) fail("cannot be replaced by its new version");
    committed_ = true;
  }

 private:
  /// Returns the file `path` leads to: itself, or where its symbolic links lead when it is one.
  static std::string target_of(const std::string& path) {
    struct stat status {};
    if (::lstat(path.c_str(), &status) != 0 || !S_ISLNK(status.st_mode)) return path;
    std::error_code error;
    const auto target = std::filesystem::weakly_canonical(path, error);
    return error ? path : target.string();
  }

  [[noreturn]] void fail(const char* what) const {
    throw FileError(path_ + ": " + what + ": " + std::error_code(errno, std::generic_category()).message());
  }

  std::string path_;
  std::string target_;
  std::string temporary_;
  std::FILE* file_ = nullptr;
  std::size_t lines_ = 0;
  bool committed_ = false;
};

}  // namespace batch

#endif  // LLMRETRY_BATCH_REPLACEMENT_HPP
