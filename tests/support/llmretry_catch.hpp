// The one place where the tests meet Catch2: version 3 (split headers) or version 2 (single header).
#ifndef LLMRETRY_TESTS_CATCH_HPP
#define LLMRETRY_TESTS_CATCH_HPP

#include <string>

#if LLMRETRY_CATCH2_MAJOR == 3
#include <catch2/catch_approx.hpp>
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
using Catch::Approx;
namespace llmretry_catch {
/// Returns the matcher of a string that contains `part`.
inline auto contains(const std::string& part) { return Catch::Matchers::ContainsSubstring(part); }
}  // namespace llmretry_catch
#else
#include <catch2/catch.hpp>
namespace llmretry_catch {
/// Returns the matcher of a string that contains `part`.
inline auto contains(const std::string& part) { return Catch::Matchers::Contains(part); }
}  // namespace llmretry_catch
#endif

#endif  // LLMRETRY_TESTS_CATCH_HPP
