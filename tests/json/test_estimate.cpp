#include <llmretry/json/estimate.hpp>

#include <nlohmann/json.hpp>

#include <string>

#include <llmretry_catch.hpp>

using llmretry::json::estimate_of;

namespace {
llmretry::Cost estimate(const std::string& text) { return estimate_of(nlohmann::json::parse(text), text); }
}  // namespace

TEST_CASE("estimate_of: the prompt's tokens in, the most the answer may produce out") {
  const std::string plain = R"({"model":"m","messages":[{"role":"user","content":"Hello there"}]})";
  const auto prompt = llmretry::estimate_tokens(plain);
  const llmretry::Cost cost = estimate(plain);
  CHECK(cost.requests == 1);
  CHECK(cost.input_tokens == prompt);
  CHECK(cost.output_tokens == 0);

  SECTION("max_tokens, max_completion_tokens or max_output_tokens, times n") {
    const std::string text = R"({"model":"m","max_tokens":20,"n":3})";
    CHECK(estimate(text).output_tokens == 60);
    CHECK(estimate(R"({"max_completion_tokens":7})").output_tokens == 7);
    CHECK(estimate(R"({"max_output_tokens":9})").output_tokens == 9);
  }
  SECTION("a field of the wrong type or a negative count is ignored; a huge one counts as 10^9") {
    CHECK(estimate(R"({"max_tokens":"20"})").output_tokens == 0);
    CHECK(estimate(R"({"max_tokens":-5,"n":-2})").output_tokens == 0);
    CHECK(estimate(R"({"max_tokens":18446744073709551615})").output_tokens == 1'000'000'000);
  }
  SECTION("a body that is not an object reserves its prompt only") { CHECK(estimate("[1,2]").output_tokens == 0); }
}
