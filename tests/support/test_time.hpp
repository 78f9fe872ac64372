#ifndef LLMRETRY_TESTS_TEST_TIME_HPP
#define LLMRETRY_TESTS_TEST_TIME_HPP

// The bounds a test puts on its waits for real time, scaled for the build it runs in: a sanitizer build runs
// several times slower (cmake/llmretryTestTime.cmake sets the factor). Only bounds scale (the longest something
// may take, or a time that must outlast what the program under test does meanwhile, such as a lease its timer
// renews), never what a test waits for on purpose (a lease it lets run out, a delay it measures).

#include <chrono>

#ifndef LLMRETRY_TEST_TIME_SCALE
#error "LLMRETRY_TEST_TIME_SCALE is not defined: link the test to llmretry_catch2"
#endif

namespace llmretry_test {

/// How many times slower than a plain build this build runs the tests (1 in a plain build).
inline constexpr int time_scale = LLMRETRY_TEST_TIME_SCALE;

/// Returns `bound` (the longest a plain build on a busy machine may take for something) times time_scale.
template <class Rep, class Period>
constexpr std::chrono::duration<Rep, Period> scaled(std::chrono::duration<Rep, Period> bound) {
  return bound * time_scale;
}

}  // namespace llmretry_test

#endif  // LLMRETRY_TESTS_TEST_TIME_HPP
