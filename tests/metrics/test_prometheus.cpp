#include <llmretry/metrics/prometheus.hpp>

#include <array>
#include <limits>
#include <string>

#include "llmretry_catch.hpp"

using namespace llmretry::metrics;

TEST_CASE("prometheus_content_type names the text format 0.0.4", "[metrics][prometheus]") {
  CHECK(prometheus_content_type == "text/plain; version=0.0.4; charset=utf-8");
}

TEST_CASE("escape_label_value escapes backslash, double quote and line feed", "[metrics][prometheus]") {
  CHECK(escape_label_value("gpt-5.5") == "gpt-5.5");
  CHECK(escape_label_value("") == "");
  CHECK(escape_label_value(R"(a\b)") == R"(a\\b)");
  CHECK(escape_label_value(R"(say "hi")") == R"(say \"hi\")");
  CHECK(escape_label_value("two\nlines") == R"(two\nlines)");
  CHECK(escape_label_value("tab\tand\rreturn") == "tab\tand\rreturn");
}

TEST_CASE("escape_label_value keeps UTF-8 and replaces bytes that are not UTF-8", "[metrics][prometheus]") {
  const std::string replacement = "\xEF\xBF\xBD";
  CHECK(escape_label_value("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80") == "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  SECTION("a stray continuation byte, a lead byte cut short") {
    CHECK(escape_label_value("a\x80z") == "a" + replacement + "z");
    CHECK(escape_label_value("a\xC3") == "a" + replacement);
    CHECK(escape_label_value("\xE2\x82") == replacement + replacement);
  }
  SECTION("overlong forms, surrogates and code points past U+10FFFF") {
    CHECK(escape_label_value("\xC0\xAF") == replacement + replacement);
    CHECK(escape_label_value("\xE0\x80\xAF") == replacement + replacement + replacement);
    CHECK(escape_label_value("\xED\xA0\x80") == replacement + replacement + replacement);
    CHECK(escape_label_value("\xF4\x90\x80\x80") == replacement + replacement + replacement + replacement);
    CHECK(escape_label_value("\xF5") == replacement);
  }
  SECTION("an invalid byte before a quote") { CHECK(escape_label_value("\xFF\"") == replacement + "\\\""); }
}

TEST_CASE("escape_help escapes backslash and line feed only", "[metrics][prometheus]") {
  CHECK(escape_help(R"(a "quoted" \ path)") == R"(a "quoted" \\ path)");
  CHECK(escape_help("one\ntwo") == R"(one\ntwo)");
}

TEST_CASE("format_value writes the shortest text that reads back, and the infinities", "[metrics][prometheus]") {
  CHECK(format_value(0) == "0");
  CHECK(format_value(1) == "1");
  CHECK(format_value(0.1) == "0.1");
  CHECK(format_value(2.5) == "2.5");
  CHECK(format_value(120) == "120");
  CHECK(format_value(0.1 + 0.2) == "0.30000000000000004");
  CHECK(format_value(1e21) == "1e+21");
  CHECK(format_value(-3.25) == "-3.25");
  CHECK(format_value(std::numeric_limits<double>::infinity()) == "+Inf");
  CHECK(format_value(-std::numeric_limits<double>::infinity()) == "-Inf");
  CHECK(format_value(std::numeric_limits<double>::quiet_NaN()) == "NaN");
}

TEST_CASE("append_family and append_sample write metadata and sample lines", "[metrics][prometheus]") {
  std::string out;
  append_family(out, "app_jobs_total", "Jobs done.\nBy kind.", "counter");
  append_sample(out, "app_jobs_total", {{"kind", "say \"hi\""}, {"shard", "1"}}, "3");
  append_sample(out, "app_jobs_total", {}, "4");
  const std::array<Label, 1> labels{Label{"kind", "x"}};
  append_sample(out, "app_jobs_total", labels, format_value(0.5));
  CHECK(out ==
        "# HELP app_jobs_total Jobs done.\\nBy kind.\n"
        "# TYPE app_jobs_total counter\n"
        "app_jobs_total{kind=\"say \\\"hi\\\"\",shard=\"1\"} 3\n"
        "app_jobs_total 4\n"
        "app_jobs_total{kind=\"x\"} 0.5\n");
}
