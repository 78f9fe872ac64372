# The consumer program, the same whichever way llmretry was brought in: it needs the target
# llmretry::llmretry, and checks that the headers it compiles with are LLMRETRY_EXPECTED_VERSION.
add_executable(consumer "${CMAKE_CURRENT_LIST_DIR}/main.cpp")
target_link_libraries(consumer PRIVATE llmretry::llmretry)
target_compile_definitions(consumer PRIVATE LLMRETRY_CONSUMER_EXPECTED_VERSION="${LLMRETRY_EXPECTED_VERSION}")
