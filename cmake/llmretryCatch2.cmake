# Finds Catch2: version 3 first, then version 2 (Debian's catch2 package). Defines the target
# llmretry_catch2 (with a main) and LLMRETRY_CATCH2_MAJOR; tests include <llmretry_catch.hpp>, the shim
# that hides the difference.
find_package(Catch2 3 QUIET)
if(Catch2_FOUND)
  set(LLMRETRY_CATCH2_MAJOR 3)
else()
  find_package(Catch2 2 REQUIRED)
  set(LLMRETRY_CATCH2_MAJOR 2)
endif()
message(STATUS "llmretry tests: Catch2 ${Catch2_VERSION}")

add_library(llmretry_catch2 STATIC "${CMAKE_CURRENT_LIST_DIR}/../tests/support/catch_main.cpp")
target_include_directories(llmretry_catch2 PUBLIC "${CMAKE_CURRENT_LIST_DIR}/../tests/support")
target_compile_definitions(llmretry_catch2 PUBLIC LLMRETRY_CATCH2_MAJOR=${LLMRETRY_CATCH2_MAJOR})
target_link_libraries(llmretry_catch2 PUBLIC Catch2::Catch2)
target_compile_features(llmretry_catch2 PUBLIC cxx_std_17)
