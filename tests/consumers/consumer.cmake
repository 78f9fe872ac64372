# The consumer program, the same whichever way llmretry was brought in: it needs the target
# llmretry::llmretry, and checks that the headers it compiles with are LLMRETRY_EXPECTED_VERSION.
# LLMRETRY_CONSUMER_COMPONENTS lists the optional components the project asked for: exactly those are
# targets, whatever else this machine has installed; with curl (prometheus_cpp), the program uses
# llmretry::curl (llmretry::prometheus_cpp) too.
set(LLMRETRY_CONSUMER_COMPONENTS "" CACHE STRING "Optional components of llmretry that this project asks for")
foreach(_component curl json loopback prometheus_cpp)
  if(_component IN_LIST LLMRETRY_CONSUMER_COMPONENTS AND NOT TARGET llmretry::${_component})
    message(FATAL_ERROR "llmretry::${_component} was asked for but is not a target")
  elseif(NOT _component IN_LIST LLMRETRY_CONSUMER_COMPONENTS AND TARGET llmretry::${_component})
    message(FATAL_ERROR "llmretry::${_component} is a target but was not asked for")
  endif()
endforeach()

add_executable(consumer "${CMAKE_CURRENT_LIST_DIR}/main.cpp")
target_link_libraries(consumer PRIVATE llmretry::llmretry)
target_compile_definitions(consumer PRIVATE LLMRETRY_CONSUMER_EXPECTED_VERSION="${LLMRETRY_EXPECTED_VERSION}")
if("curl" IN_LIST LLMRETRY_CONSUMER_COMPONENTS)
  target_link_libraries(consumer PRIVATE llmretry::curl)
  target_compile_definitions(consumer PRIVATE LLMRETRY_CONSUMER_CURL)
endif()
if("prometheus_cpp" IN_LIST LLMRETRY_CONSUMER_COMPONENTS)
  target_link_libraries(consumer PRIVATE llmretry::prometheus_cpp)
  target_compile_definitions(consumer PRIVATE LLMRETRY_CONSUMER_PROMETHEUS_CPP)
endif()
