# Every header under include/ is guarded by a macro made from its path: include/llmretry/http/sse.hpp opens
# with `#ifndef LLMRETRY_HTTP_SSE_HPP` and `#define LLMRETRY_HTTP_SSE_HPP` and closes with
# `#endif  // LLMRETRY_HTTP_SSE_HPP`, so that two headers never share a guard.
# Usage: cmake -DSOURCE_DIR=<llmretry> -P include_guards.cmake
file(GLOB_RECURSE _headers RELATIVE "${SOURCE_DIR}/include" "${SOURCE_DIR}/include/*.hpp")
set(_found "")
foreach(_header IN LISTS _headers)
  string(TOUPPER "${_header}" _guard)
  string(REGEX REPLACE "[^A-Z0-9]" "_" _guard "${_guard}")
  file(STRINGS "${SOURCE_DIR}/include/${_header}" _lines REGEX "^#(ifndef|define|endif)")
  list(LENGTH _lines _count)
  set(_ifndef "")
  set(_define "")
  set(_endif "")
  if(_count GREATER_EQUAL 3)
    list(GET _lines 0 _ifndef)
    list(GET _lines 1 _define)
    list(GET _lines -1 _endif)
  endif()
  if(NOT _ifndef STREQUAL "#ifndef ${_guard}" OR NOT _define STREQUAL "#define ${_guard}"
     OR NOT _endif STREQUAL "#endif  // ${_guard}")
    string(APPEND _found "\n  ${_header}: expected ${_guard}, found '${_ifndef}', '${_define}', '${_endif}'")
  endif()
endforeach()
if(_found)
  message(FATAL_ERROR "headers whose include guard does not match their path:${_found}")
endif()
list(LENGTH _headers _count)
message(STATUS "${_count} headers checked: each include guard matches its path")
