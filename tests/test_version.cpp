#include <llmretry/version.hpp>

#include "llmretry_catch.hpp"

TEST_CASE("The version number is consistent", "[version]") {
  STATIC_REQUIRE(LLMRETRY_VERSION ==
                 LLMRETRY_VERSION_MAJOR * 10000 + LLMRETRY_VERSION_MINOR * 100 + LLMRETRY_VERSION_PATCH);
  STATIC_REQUIRE(LLMRETRY_VERSION >= 100);
}
