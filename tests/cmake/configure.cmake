# Configures llmretry in a fresh build directory with the given options and checks the outcome:
#   cmake -DSOURCE_DIR=<llmretry> -DBINARY_DIR=<scratch> -DEXPECT=success|failure -DOUTPUT=<regex>
#         -P configure.cmake -- <cmake options...>
cmake_minimum_required(VERSION 3.24...3.31)
# Passes when configuring succeeds (or fails) as expected and its output matches OUTPUT.
set(_options "")
set(_after_separator FALSE)
math(EXPR _last "${CMAKE_ARGC} - 1")
foreach(_i RANGE ${_last})
  if(_after_separator)
    list(APPEND _options "${CMAKE_ARGV${_i}}")
  elseif(CMAKE_ARGV${_i} STREQUAL "--")
    set(_after_separator TRUE)
  endif()
endforeach()

file(REMOVE_RECURSE "${BINARY_DIR}")
execute_process(COMMAND "${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${BINARY_DIR}" ${_options}
  RESULT_VARIABLE _result OUTPUT_VARIABLE _output ERROR_VARIABLE _output)
if(_result EQUAL 0)
  set(_outcome success)
else()
  set(_outcome failure)
endif()
if(NOT _outcome STREQUAL EXPECT OR NOT _output MATCHES "${OUTPUT}")
  message(FATAL_ERROR "expected ${EXPECT} with output matching '${OUTPUT}', got ${_outcome}:\n${_output}")
endif()
file(REMOVE_RECURSE "${BINARY_DIR}")
message(STATUS "configure: ${_outcome} as expected, output matches '${OUTPUT}'")
