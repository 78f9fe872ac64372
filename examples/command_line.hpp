// The examples' command line: `--option value` and `--option=value`, --help, and errors that name the
// option and exit with status 2.
#ifndef LLMRETRY_EXAMPLES_COMMAND_LINE_HPP
#define LLMRETRY_EXAMPLES_COMMAND_LINE_HPP

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

namespace example {

/// Reads argv one argument at a time:
///   for (CommandLine args(argc, argv, "name", usage); args.next();) {
///     if (args.is_flag("--flag")) ...; else if (args.is("--option")) use(args.value()); else args.reject();
///   }
class CommandLine {
 public:
  /// `usage` is printed by --help and -h, which exit with status 0.
  CommandLine(int argc, char** argv, const char* program, const char* usage)
      : argc_(argc), argv_(argv), program_(program), usage_(usage) {}

  /// Moves to the next argument. Returns false after the last one. Prints the usage and exits with status 0
  /// on --help or -h.
  bool next() {
    if (index_ + 1 >= argc_) return false;
    name_ = argv_[++index_];
    attached_.reset();
    if (const auto equals = name_.find('='); name_.substr(0, 2) == "--" && equals != std::string_view::npos) {
      attached_ = name_.substr(equals + 1);
      name_ = name_.substr(0, equals);
    }
    if (name_ == "--help" || name_ == "-h") {
      std::fputs(usage_, stdout);
      std::exit(0);
    }
    return true;
  }

  /// Returns true when the current argument is the option `name`, which takes a value.
  bool is(std::string_view name) const { return name_ == name; }
  /// Returns true when the current argument is the flag `name`. Exits with status 2 when it was given a
  /// value (`--flag=x`).
  bool is_flag(std::string_view name) const {
    if (name_ != name) return false;
    if (attached_) fail(std::string(name_) + " takes no value");
    return true;
  }
  /// Returns true when the current argument is not an option (does not start with '-').
  bool is_positional() const { return name_.empty() || name_.front() != '-'; }
  /// Returns the current argument itself.
  std::string_view argument() const { return name_; }

  /// Returns the current option's value, from `--option=value` or the next argument.
  /// Exits with status 2 when there is none.
  std::string_view value() {
    if (attached_) return *attached_;
    if (index_ + 1 >= argc_) fail(std::string(name_) + " needs a value");
    return argv_[++index_];
  }
  /// Returns the current option's value as a whole number. Exits with status 2 when it is not one.
  std::uint64_t number() {
    const auto text = value();
    std::uint64_t parsed = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), parsed);
    if (text.empty() || error != std::errc{} || end != text.data() + text.size())
      fail(std::string(name_) + ": '" + std::string(text) + "' is not a whole number");
    return parsed;
  }
  /// Rejects the current argument: exits with status 2, naming it.
  [[noreturn]] void reject() { fail("'" + std::string(name_) + "' is not an option"); }

  /// Prints "program: problem (see --help)" and exits with status 2.
  [[noreturn]] void fail(const std::string& problem) const {
    std::fprintf(stderr, "%s: %s (see --help)\n", program_, problem.c_str());
    std::exit(2);
  }

 private:
  int argc_;
  char** argv_;
  const char* program_;
  const char* usage_;
  int index_ = 0;
  std::string_view name_;
  std::optional<std::string_view> attached_;
};

}  // namespace example

#endif  // LLMRETRY_EXAMPLES_COMMAND_LINE_HPP
