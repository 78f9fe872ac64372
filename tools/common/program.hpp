// What every llmretry tool's main() does the same way: a usage error, the exit status of what escapes the
// program's body, the environment.
#ifndef LLMRETRY_TOOLS_COMMON_PROGRAM_HPP
#define LLMRETRY_TOOLS_COMMON_PROGRAM_HPP

#include <cstddef>
#include <cstdlib>
#include <exception>
#include <functional>
#include <iostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace llmretry_tools {

/// Returns true when `name` is 1 to `most` letters, digits, '.', '_' or '-' (ASCII): a name that can go into a
/// key, a label or a file name as it is.
inline bool is_plain_name(std::string_view name, std::size_t most) noexcept {
  return !name.empty() && name.size() <= most &&
         name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") ==
             std::string_view::npos;
}

/// A problem with the command line, the configuration or the environment: exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The exit status of a program and the message it prints on stderr after "<program>: ".
struct Exit {
  int status;
  std::string message;
};

/// How run_main() reports what escapes the body.
struct MainOptions {
  /// Appended to a UsageError's message (such as " (see --help)").
  std::string usage_suffix;
  /// Returns the Exit of any other std::exception; empty: status 1 and its what().
  std::function<Exit(const std::exception&)> other;
};

/// Returns `body()` (the exit status). What escapes it is printed on stderr as "<program>: <message>\n"
/// and returned as a status: a UsageError 2, any other std::exception what `options.other` says.
template <class Body>
int run_main(const char* program, Body&& body, const MainOptions& options = {}) {
  Exit outcome{0, ""};
  try {
    return std::forward<Body>(body)();
  } catch (const UsageError& error) {
    outcome = {2, error.what() + options.usage_suffix};
  } catch (const std::exception& error) {
    outcome = options.other ? options.other(error) : Exit{1, error.what()};
  }
  std::cerr << program << ": " << outcome.message << '\n';
  return outcome.status;
}

/// Returns the value of the environment variable `name`, empty when unset.
inline std::string environment(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  return value != nullptr ? value : "";
}

}  // namespace llmretry_tools

#endif  // LLMRETRY_TOOLS_COMMON_PROGRAM_HPP
