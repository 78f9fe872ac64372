#include <llmretry/json/canonical.hpp>
#include <llmretry/store/fingerprint.hpp>

#include <cstddef>
#include <stdexcept>
#include <string>

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

TEST_CASE("canonical keeps integers beyond 64 bits exactly: two of them never read the same", "[json][canonical]") {
  CHECK(canonical(R"({"seed":18446744073709551617})") == R"({"seed":18446744073709551617})");
  CHECK(canonical(R"({"seed":18446744073709551616})") == R"({"seed":18446744073709551616})");
  CHECK(canonical(R"([-99999999999999999999999, 18446744073709551615, -9223372036854775808])") ==
        "[-99999999999999999999999,18446744073709551615,-9223372036854775808]");
  CHECK(canonical(R"({ "b": 123456789012345678901234567890, "a": [ 1e2, 2.50 ] })") ==
        R"({"a":[100.0,2.5],"b":123456789012345678901234567890})");
  CHECK(canonical(R"({"a":1,"a":18446744073709551617})") == R"({"a":18446744073709551617})");
}

TEST_CASE("canonical refuses what is not JSON", "[json][canonical]") {
  CHECK_THROWS_AS(canonical("{\"a\":"), std::invalid_argument);
  CHECK_THROWS_AS(canonical(""), std::invalid_argument);
  CHECK_THROWS_AS(canonical("[1] 2"), std::invalid_argument);
  CHECK_THROWS_AS(canonical("{\"a\":1,}"), std::invalid_argument);
}

TEST_CASE("canonical refuses a body nested deeper than max_canonical_depth, before parsing it", "[json][canonical]") {
  using llmretry::json::max_canonical_depth;
  using llmretry::json::nested_deeper_than;
  const auto nested = [](int depth) {
    return std::string(static_cast<std::size_t>(depth), '[') + std::string(static_cast<std::size_t>(depth), ']');
  };
  CHECK(canonical(nested(max_canonical_depth)) == nested(max_canonical_depth));
  CHECK_THROWS_AS(canonical(nested(max_canonical_depth + 1)), std::invalid_argument);
  CHECK_THROWS_AS(canonical(std::string(1'000'000, '[')), std::invalid_argument);  // never parsed, never recursed

  CHECK_FALSE(nested_deeper_than(R"({"a":[{"b":[]}]})", 4));
  CHECK(nested_deeper_than(R"({"a":[{"b":[]}]})", 3));
  CHECK_FALSE(nested_deeper_than(R"({"a":"[[[[[[\"[[[["})", 1));  // brackets in strings, an escaped quote
  CHECK_FALSE(nested_deeper_than("[][][][]", 1));
  // a closing bracket with nothing open counts for nothing: it cannot hide the nesting after it
  CHECK(nested_deeper_than("]]][[[", 2));
  CHECK(nested_deeper_than(std::string(1000, '}') + std::string(513, '{'), max_canonical_depth));
  CHECK_FALSE(nested_deeper_than("]]][[", 2));
}
