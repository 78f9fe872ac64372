# How much slower than a plain build the tests run in this build: the factor of their ctest timeouts and of
# the bounds they put on their own waits for real time (tests/support/test_time.hpp). ThreadSanitizer runs
# the suite's threaded tests about 5-10 times slower, AddressSanitizer about 3 times; both on a busy machine.
# LLMRETRY_TEST_TIME_SCALE sets the factor; empty: 10 under -fsanitize=thread, 4 under -fsanitize=address,
# else 1. Only bounds scale: what a test waits for on purpose (a lease it lets run out, a delay it measures)
# does not.
set(LLMRETRY_TEST_TIME_SCALE "" CACHE STRING
  "Factor of the tests' timeouts and of their bounds on real time (empty: chosen from the sanitizer flags)")
if(LLMRETRY_TEST_TIME_SCALE STREQUAL "")
  if(CMAKE_CXX_FLAGS MATCHES "-fsanitize=[^ ]*thread")
    set(LLMRETRY_TEST_TIME_FACTOR 10)
  elseif(CMAKE_CXX_FLAGS MATCHES "-fsanitize=[^ ]*address")
    set(LLMRETRY_TEST_TIME_FACTOR 4)
  else()
    set(LLMRETRY_TEST_TIME_FACTOR 1)
  endif()
elseif(LLMRETRY_TEST_TIME_SCALE MATCHES "^[1-9][0-9]?$")
  set(LLMRETRY_TEST_TIME_FACTOR ${LLMRETRY_TEST_TIME_SCALE})
else()
  message(FATAL_ERROR "LLMRETRY_TEST_TIME_SCALE is '${LLMRETRY_TEST_TIME_SCALE}': it must be a whole number "
    "from 1 to 99, or empty")
endif()
message(STATUS "llmretry tests: timeouts and real-time bounds x${LLMRETRY_TEST_TIME_FACTOR}")

# llmretry_test_timeout(<seconds> <test>...): the timeout of each test, as measured in a plain build on a
# busy 2-core machine with room to spare, times the factor above.
function(llmretry_test_timeout seconds)
  math(EXPR _scaled "${seconds} * ${LLMRETRY_TEST_TIME_FACTOR}")
  set_tests_properties(${ARGN} PROPERTIES TIMEOUT ${_scaled})
endfunction()

# llmretry_test_cost(<seconds> <test>...): how long each test takes in a plain build, times the factor above,
# as its COST, so that ctest -j starts the longest first instead of leaving one of them to end alone. ctest
# ranks the other tests by the times it measured in earlier runs of the tree (none in a fresh one): these
# stay at their COST, in the same unit.
function(llmretry_test_cost seconds)
  math(EXPR _scaled "${seconds} * ${LLMRETRY_TEST_TIME_FACTOR}")
  set_tests_properties(${ARGN} PROPERTIES COST ${_scaled})
endfunction()
