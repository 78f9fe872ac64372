#include <llmretry/version.hpp>

#include <llmretry/policy.hpp>

#include <string>
#include <type_traits>

#include "llmretry_catch.hpp"

#define LLMRETRY_TEST_STRING(x) #x
#define LLMRETRY_TEST_STRING_OF(x) LLMRETRY_TEST_STRING(x)
#define LLMRETRY_TEST_VERSION_STRING(major, minor, patch) \
  LLMRETRY_TEST_STRING(major) "." LLMRETRY_TEST_STRING(minor) "." LLMRETRY_TEST_STRING(patch)

TEST_CASE("The header's version is the one CMake read from it", "[version]") {
  CHECK(std::string(LLMRETRY_TEST_VERSION_STRING(LLMRETRY_VERSION_MAJOR, LLMRETRY_VERSION_MINOR,
                                                 LLMRETRY_VERSION_PATCH)) == LLMRETRY_TEST_PROJECT_VERSION);
}

TEST_CASE("LLMRETRY_VERSION decodes back to its parts, and orders versions", "[version]") {
  // The encoding is unambiguous only while minor and patch stay below 100.
  STATIC_REQUIRE(LLMRETRY_VERSION_MINOR < 100);
  STATIC_REQUIRE(LLMRETRY_VERSION_PATCH < 100);
  STATIC_REQUIRE(LLMRETRY_VERSION / 10000 == LLMRETRY_VERSION_MAJOR);
  STATIC_REQUIRE(LLMRETRY_VERSION / 100 % 100 == LLMRETRY_VERSION_MINOR);
  STATIC_REQUIRE(LLMRETRY_VERSION % 100 == LLMRETRY_VERSION_PATCH);
}

TEST_CASE("Every name is in the inline namespace v<major>_<minor>, spelled without it", "[version]") {
  CHECK(std::string(LLMRETRY_TEST_STRING_OF(LLMRETRY_ABI_NAMESPACE)) ==
        "v" LLMRETRY_TEST_STRING_OF(LLMRETRY_VERSION_MAJOR) "_" LLMRETRY_TEST_STRING_OF(LLMRETRY_VERSION_MINOR));
  STATIC_REQUIRE(std::is_same_v<llmretry::RetryPolicy, llmretry::LLMRETRY_ABI_NAMESPACE::RetryPolicy>);
  STATIC_REQUIRE(std::is_same_v<llmretry::RetryPolicy, llmretry::v0_1::RetryPolicy>);
}
