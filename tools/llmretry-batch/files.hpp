// The files llmretry-batch is given: checked before any of them is opened for writing.
#ifndef LLMRETRY_BATCH_FILES_HPP
#define LLMRETRY_BATCH_FILES_HPP

#include <sys/stat.h>

#include <cerrno>
#include <optional>
#include <stdexcept>
#include <string>

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

}  // namespace detail

/// Throws FileProblem unless `output` and `errors` are each a regular file or a new path, and `input`,
/// `output` and `errors` are three files (not one file under two names: hard or symbolic links).
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
  if (detail::same_file(out, in)) throw FileProblem("OUTPUT " + output + " is the file INPUT names");
  if (detail::same_file(err, in)) throw FileProblem("--errors " + errors + " is the file INPUT names");
  if (detail::same_file(err, out)) throw FileProblem("--errors " + errors + " is the file OUTPUT names");
}

}  // namespace batch

#endif  // LLMRETRY_BATCH_FILES_HPP
