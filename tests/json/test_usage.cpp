#include <llmretry/json/usage.hpp>

#include <llmretry_catch.hpp>

using llmretry::Cost;
using llmretry::json::usage_of;

namespace {

bool same(const std::optional<Cost>& cost, std::int64_t input, std::int64_t output) {
  return cost && cost->requests == 1 && cost->input_tokens == input && cost->output_tokens == output;
}

}  // namespace

TEST_CASE("usage_of reads every provider's usage") {
  SECTION("OpenAI / Azure") {
    CHECK(same(usage_of(R"({"id":"chatcmpl-1","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":34,)"
                        R"("total_tokens":46,"prompt_tokens_details":{"cached_tokens":0}}})"),
               12, 34));
  }
  SECTION("Anthropic") {
    CHECK(same(usage_of(R"({"type":"message","usage":{"input_tokens":25,"output_tokens":7,)"
                        R"("cache_read_input_tokens":0}})"),
               25, 7));
  }
  SECTION("Gemini") {
    CHECK(same(usage_of(R"({"candidates":[],"usageMetadata":{"promptTokenCount":8,"candidatesTokenCount":3,)"
                        R"("totalTokenCount":11}})"),
               8, 3));
  }
  SECTION("an output count left out is 0, as Gemini does for an empty answer") {
    CHECK(same(usage_of(R"({"usageMetadata":{"promptTokenCount":8,"totalTokenCount":8}})"), 8, 0));
    CHECK(same(usage_of(R"({"usage":{"prompt_tokens":5,"total_tokens":5}})"), 5, 0));
  }
  SECTION("large counts, up to 10^12 each") {
    CHECK(same(usage_of(R"({"usage":{"prompt_tokens":1000000000000,"completion_tokens":1000000000000}})"),
               1'000'000'000'000, 1'000'000'000'000));
  }
}

TEST_CASE("usage_of ignores what it does not understand, and never throws") {
  for (const char* body : {"",
                           "not json",
                           "[]",
                           "42",
                           "null",
                           R"({"usage":{"prompt_tokens":12)",
                           R"({"choices":[]})",
                           R"({"usage":"12"})",
                           R"({"usage":{}})",
                           R"({"usage":{"completion_tokens":3}})",
                           R"({"usage":{"prompt_tokens":"12"}})",
                           R"({"usage":{"prompt_tokens":-1,"completion_tokens":3}})",
                           R"({"usage":{"prompt_tokens":1.5,"completion_tokens":3}})",
                           R"({"usage":{"prompt_tokens":1,"completion_tokens":-3}})",
                           R"({"usage":{"prompt_tokens":1,"completion_tokens":null}})",
                           R"({"usage":{"input_tokens":1,"output_tokens":"2"}})",
                           R"({"usage":{"prompt_tokens":18446744073709551615,"completion_tokens":1}})",
                           R"({"usage":{"prompt_tokens":9223372036854775807,"completion_tokens":0}})",
                           R"({"usage":{"prompt_tokens":18,"completion_tokens":1000000000001}})",
                           R"({"usage":{"input_tokens":1,"output_tokens":18446744073709551616}})",
                           R"({"usageMetadata":[1,2]})",
                           R"({"usageMetadata":{"candidatesTokenCount":3}})"}) {
    INFO(body);
    CHECK_FALSE(usage_of(body).has_value());
  }
}
