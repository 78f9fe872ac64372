// A check of the Prometheus text exposition format 0.0.4, line by line, for the tests of metrics.
#ifndef LLMRETRY_TESTS_METRICS_EXPOSITION_GRAMMAR_HPP
#define LLMRETRY_TESTS_METRICS_EXPOSITION_GRAMMAR_HPP

#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace exposition {

/// Returns the first line of `text` that breaks the format, with the reason, or "" when every line keeps
/// it: each line is `# HELP name text`, `# TYPE name type` or `name{label="value",...} value`; the text
/// ends with a line feed; a family's HELP and TYPE come once each, before its samples; a sample belongs to
/// the family declared last (a histogram's to name_bucket, name_sum or name_count), and a bucket has `le`.
inline std::string first_error(const std::string& text) {
  static const std::regex help(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) (?:[^\\\n]|\\[\\n])*)");
  static const std::regex type(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped))");
  static const std::regex sample(R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*")"
                                 R"((?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*")*\})? )"
                                 R"((?:[+-]?Inf|NaN|[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?))");
  if (!text.empty() && text.back() != '\n') return "the text does not end with a line feed";
  std::istringstream lines(text);
  std::string line;
  std::string family;
  std::string family_type;
  std::set<std::string> declared;
  while (std::getline(lines, line)) {
    std::smatch match;
    if (std::regex_match(line, match, help)) {
      family = match[1];
      if (!declared.insert(family).second) return "HELP twice: " + line;
      family_type.clear();
    } else if (std::regex_match(line, match, type)) {
      if (match[1] != family || !family_type.empty()) return "TYPE not right after its HELP: " + line;
      family_type = match[2];
    } else if (std::regex_match(line, match, sample)) {
      const std::string name = match[1];
      const bool histogram_part = family_type == "histogram" &&
                                  (name == family + "_bucket" || name == family + "_sum" || name == family + "_count");
      if (name != family && !histogram_part) return "sample outside its family: " + line;
      if (name == family + "_bucket" && line.find("le=\"") == std::string::npos) return "bucket without le: " + line;
    } else {
      return "not in the format: " + line;
    }
  }
  return "";
}

}  // namespace exposition

#endif  // LLMRETRY_TESTS_METRICS_EXPOSITION_GRAMMAR_HPP
