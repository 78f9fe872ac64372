#ifndef LLMRETRY_DETAIL_CONFIG_HPP
#define LLMRETRY_DETAIL_CONFIG_HPP

#include <cstdlib>
#include <stdexcept>

#include "../version.hpp"

// Exceptions may be switched off (-fno-exceptions): the result-value style still works, and a
// programming error that would throw aborts instead.
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS) || defined(_CPPUNWIND)
#define LLMRETRY_HAS_EXCEPTIONS 1
#else
#define LLMRETRY_HAS_EXCEPTIONS 0
#endif

// Keeps a function that a hot path seldom calls out of that path, so that the path stays short.
#if defined(__GNUC__) || defined(__clang__)
#define LLMRETRY_NOINLINE __attribute__((__noinline__))
#elif defined(_MSC_VER)
#define LLMRETRY_NOINLINE __declspec(noinline)
#else
#define LLMRETRY_NOINLINE
#endif

LLMRETRY_BEGIN_NAMESPACE
namespace detail {

/// Throws std::invalid_argument(message), or aborts when exceptions are off.
[[noreturn]] inline void throw_invalid_argument(const char* message) {
#if LLMRETRY_HAS_EXCEPTIONS
  throw std::invalid_argument(message);
#else
  (void)message;
  std::abort();
#endif
}

/// Tags a constructor that skips validating what its caller has validated already.
struct prevalidated_t {
  explicit prevalidated_t() = default;
};
inline constexpr prevalidated_t prevalidated{};

/// Tags a constructor that validates its configuration when it first reads it instead of at once.
struct validate_later_t {
  explicit validate_later_t() = default;
};
inline constexpr validate_later_t validate_later{};

}  // namespace detail
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_DETAIL_CONFIG_HPP
