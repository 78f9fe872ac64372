// The command lines of the llmretry tools, parsed with CLI11.
#ifndef LLMRETRY_TOOLS_COMMON_COMMAND_LINE_HPP
#define LLMRETRY_TOOLS_COMMON_COMMAND_LINE_HPP

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>

#include "duration.hpp"
#include "program.hpp"

namespace llmretry_tools {

/// Parses `argc`/`argv` with `app`. After --help prints `help` (empty: the help CLI11 writes) on stdout and
/// exits with status 0. Throws UsageError with CLI11's message for a bad command line.
inline void parse_command_line(CLI::App& app, int argc, char** argv, const std::string& help = {}) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << (help.empty() ? app.help() : help);
    std::exit(0);
  } catch (const CLI::ParseError& error) {
    throw UsageError(error.what());
  }
}

/// Adds the option `name` to `app` (--name VALUE or --name=VALUE, once), a duration read into `into` as
/// parse_duration says, within [least, most]. Returns the option.
inline CLI::Option* add_duration_option(CLI::App& app, const std::string& name, std::chrono::milliseconds& into,
                                        std::chrono::milliseconds least, std::chrono::milliseconds most,
                                        const std::string& description) {
  return app
      .add_option_function<std::string>(
          name, [name, &into, least, most](const std::string& text) { into = parse_duration(name, text, least, most); },
          description)
      ->type_name("DURATION");
}

}  // namespace llmretry_tools

#endif  // LLMRETRY_TOOLS_COMMON_COMMAND_LINE_HPP
