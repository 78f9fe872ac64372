#include <llmretry/json/canonical.hpp>
#include <llmretry/store/fingerprint.hpp>

#include <stdexcept>

#include "llmretry_catch.hpp"

using llmretry::json::canonical;

TEST_CASE("canonical sorts keys at every depth and drops insignificant white space", "[json][canonical]") {
  CHECK(canonical(R"( { "b" : 1 , "a" : { "d" : [ 3 , { "z" : null, "y" : true } ], "c" : "x y" } } )") ==
        R"({"a":{"c":"x y","d":[3,{"y":true,"z":null}]},"b":1})");
  CHECK(canonical("[2, 1]") == "[2,1]");  // arrays keep their order
  CHECK(canonical("\"\\u00e9\\n\"") == "\"\xc3\xa9\\n\"");
  CHECK(canonical("1.50") == "1.5");
  CHECK(canonical("{\"a\":1,\"a\":2}") == "{\"a\":2}");
}

TEST_CASE("canonical: the same request, whatever its layout, has one fingerprint", "[json][canonical]") {
  using llmretry::store::fingerprint;
  const auto one = fingerprint(canonical(R"({"model":"m","messages":[{"role":"user","content":"hi"}]})"));
  CHECK(one == fingerprint(canonical(
                   "{\n  \"messages\": [ {\"content\": \"hi\", \"role\": \"user\"} ],\n  \"model\": \"m\"\n}")));
  CHECK(one != fingerprint(canonical(R"({"model":"m","messages":[{"role":"user","content":"hi!"}]})")));
}

TEST_CASE("canonical refuses what is not JSON", "[json][canonical]") {
  CHECK_THROWS_AS(canonical("{\"a\":"), std::invalid_argument);
  CHECK_THROWS_AS(canonical(""), std::invalid_argument);
}
