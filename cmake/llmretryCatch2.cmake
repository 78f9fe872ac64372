# Finds Catch2 and defines the target llmretry_catch2 (Catch2 with a main) and LLMRETRY_CATCH2_MAJOR; tests
# include <llmretry_catch.hpp>, the shim that hides the difference between versions 2 and 3.
# LLMRETRY_CATCH2_VERSION picks the major version: 3 or 2 requires it, empty takes 3 if found, else 2
# (Debian bookworm packages 2.13).
set(LLMRETRY_CATCH2_VERSION "" CACHE STRING "Catch2 major version of the tests: 3, 2, or empty for 3 if found, else 2")
if(LLMRETRY_CATCH2_VERSION STREQUAL "")
  find_package(Catch2 3 QUIET)
  if(NOT Catch2_FOUND)
    find_package(Catch2 2 QUIET)
  endif()
elseif(LLMRETRY_CATCH2_VERSION MATCHES "^[23]$")
  find_package(Catch2 ${LLMRETRY_CATCH2_VERSION} QUIET)
else()
  message(FATAL_ERROR "LLMRETRY_CATCH2_VERSION is '${LLMRETRY_CATCH2_VERSION}': it must be 3, 2 or empty")
endif()
if(NOT Catch2_FOUND)
  if(LLMRETRY_CATCH2_VERSION STREQUAL "")
    message(FATAL_ERROR "the tests need Catch2 3 or 2 (Debian: catch2), or LLMRETRY_BUILD_TESTS=OFF")
  endif()
  message(FATAL_ERROR "LLMRETRY_CATCH2_VERSION is ${LLMRETRY_CATCH2_VERSION} but Catch2 "
    "${LLMRETRY_CATCH2_VERSION} was not found: point CMAKE_PREFIX_PATH at its installation")
endif()
set(LLMRETRY_CATCH2_MAJOR ${Catch2_VERSION_MAJOR})
message(STATUS "llmretry tests: Catch2 ${Catch2_VERSION} (${Catch2_DIR})")

# Catch2::Catch2 has no main in either version: tests/support/catch_main.cpp is the runner's main.
add_library(llmretry_catch2 STATIC "${CMAKE_CURRENT_LIST_DIR}/../tests/support/catch_main.cpp")
target_include_directories(llmretry_catch2 PUBLIC "${CMAKE_CURRENT_LIST_DIR}/../tests/support")
target_compile_definitions(llmretry_catch2 PUBLIC LLMRETRY_CATCH2_MAJOR=${LLMRETRY_CATCH2_MAJOR}
  LLMRETRY_TEST_TIME_SCALE=${LLMRETRY_TEST_TIME_FACTOR})
target_link_libraries(llmretry_catch2 PUBLIC Catch2::Catch2)
target_compile_features(llmretry_catch2 PUBLIC cxx_std_17)
