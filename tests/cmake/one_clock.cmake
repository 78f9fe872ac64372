# Only include/llmretry/clock.hpp reads the real clocks: every other header under include/ takes a Clock
# (or WallClock) or calls real_now() / real_wall_now(). Found: any now( after a standard clock's name on one
# line (steady_clock::now(), steady_clock{}.now(), std::chrono::system_clock::now()); random.hpp may seed
# from high_resolution_clock, which is entropy, not time.
# Usage: cmake -DSOURCE_DIR=<llmretry> -P one_clock.cmake
file(GLOB_RECURSE _headers RELATIVE "${SOURCE_DIR}/include" "${SOURCE_DIR}/include/*.hpp")
set(_found "")
foreach(_header IN LISTS _headers)
  if(_header STREQUAL "llmretry/clock.hpp")
    continue()
  endif()
  set(_clocks "steady_clock|system_clock|high_resolution_clock|utc_clock|file_clock|gps_clock|tai_clock")
  if(_header STREQUAL "llmretry/random.hpp")
    set(_clocks "steady_clock|system_clock|utc_clock|file_clock|gps_clock|tai_clock")
  endif()
  file(STRINGS "${SOURCE_DIR}/include/${_header}" _lines REGEX "(${_clocks})[^;]*now[ ]*\\(")
  foreach(_line IN LISTS _lines)
    string(STRIP "${_line}" _line)
    string(APPEND _found "\n  ${_header}: ${_line}")
  endforeach()
endforeach()
if(_found)
  message(FATAL_ERROR "headers that read a real clock themselves (use llmretry/clock.hpp):${_found}")
endif()
list(LENGTH _headers _count)
message(STATUS "${_count} headers checked: only llmretry/clock.hpp reads the real clocks")
