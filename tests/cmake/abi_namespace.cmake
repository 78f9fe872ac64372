# Every header under include/ declares its names inside the inline ABI namespace: it opens namespace llmretry
# only with LLMRETRY_BEGIN_NAMESPACE (version.hpp), never with `namespace llmretry`.
# Usage: cmake -DSOURCE_DIR=<llmretry> -P abi_namespace.cmake
file(GLOB_RECURSE _headers RELATIVE "${SOURCE_DIR}/include" "${SOURCE_DIR}/include/*.hpp")
set(_found "")
list(REMOVE_ITEM _headers "llmretry/version.hpp")  # where the macros are defined
foreach(_header IN LISTS _headers)
  file(STRINGS "${SOURCE_DIR}/include/${_header}" _lines REGEX "^[ \t]*namespace llmretry")
  foreach(_line IN LISTS _lines)
    string(APPEND _found "\n  ${_header}: ${_line}")
  endforeach()
endforeach()
if(_found)
  message(FATAL_ERROR "headers that open namespace llmretry outside LLMRETRY_BEGIN_NAMESPACE:${_found}")
endif()
list(LENGTH _headers _count)
message(STATUS "${_count} headers checked: every one opens namespace llmretry with LLMRETRY_BEGIN_NAMESPACE")
