// The files llmretry-batch is given: checked before any of them is opened for writing.
#ifndef LLMRETRY_BATCH_FILES_HPP
#define LLMRETRY_BATCH_FILES_HPP

#include <sys/stat.h>

#include <cerrno>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>

namespace batch {

/// A file named on the command line that cannot be used as given: exit status 2, nothing sent.
class FileProblem : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

/// Returns the status of the file `path` names (symbolic links followed), or nullopt when there is none.
/// Throws FileProblem when it cannot be found out.
inline std::optional<struct stat> status_of(const std::string& path) {
  struct stat status {};
  if (::stat(path.c_str(), &status) == 0) return status;
  if (errno == ENOENT) return std::nullopt;
  throw FileProblem(path + ": cannot be examined");
}

/// Returns true when `a` and `b` are one file (same device and inode).
inline bool same_file(const std::optional<struct stat>& a, const std::optional<struct stat>& b) {
  return a && b && a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/// Returns true when the paths `a` and `b` (neither empty) name one place, made absolute and free of ".",
/// ".." and symbolic links as far as they exist: one file to be, before either is created ("out.jsonl" and
/// "./out.jsonl").
inline bool same_path(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  const auto place = [](const std::string& path, std::error_code& error) {
    return std::filesystem::weakly_canonical(std::filesystem::absolute(path, error), error);
  };
  std::error_code error_a, error_b;
  const auto place_a = place(a, error_a);
  const auto place_b = place(b, error_b);
  return !error_a && !error_b && place_a == place_b;
}

/// Returns true when `a` (of status `status_a`) and `b` (of status `status_b`) are one file, or one path.
inline bool same(const std::string& a, const std::optional<struct stat>& status_a, const std::string& b,
                 const std::optional<struct stat>& status_b) {
  return same_file(status_a, status_b) || same_path(a, b);
}

}  // namespace detail

/// Throws FileProblem unless `output` and `errors` are each a regular file or a new path, and `input`,
/// `output` and `errors` are three files (not one file under two names: hard or symbolic links, or two
/// spellings of one path that does not exist yet).
inline void check_files(const std::string& input, const std::string& output, const std::string& errors) {
  const auto in = detail::status_of(input);
  const auto out = detail::status_of(output);
  const auto err = detail::status_of(errors);
  const auto regular_or_new = [](const std::string& path, const std::optional<struct stat>& status) {
    if (status && !S_ISREG(status->st_mode))
      throw FileProblem(path + ": not a regular file (answers go to a file that a rerun can read back)");
  };
  regular_or_new(output, out);
  regular_or_new(errors, err);
  if (detail::same(output, out, input, in)) throw FileProblem("OUTPUT " + output + " is the file INPUT names");
  if (detail::same(errors, err, input, in)) throw FileProblem("--errors " + errors + " is the file INPUT names");
  if (detail::same(errors, err, output, out)) throw FileProblem("--errors " + errors + " is the file OUTPUT names");
}

}  // namespace batch

#endif  // LLMRETRY_BATCH_FILES_HPP
