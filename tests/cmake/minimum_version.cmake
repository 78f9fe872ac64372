# The CMake version that the project declares is true: every cmake_minimum_required of the project (the
# top level and its consumer, fuzz and benchmark projects) states the same range, whose minimum is at least
# the version of every CMake feature the project uses, and the README states that minimum.
#   cmake -DSOURCE_DIR=<llmretry> -P minimum_version.cmake
cmake_minimum_required(VERSION 3.24...3.31)

# Features and the CMake version that introduced them.
set(_features
  "PROJECT_IS_TOP_LEVEL=3.21"
  "FILE_SET=3.23"
  "VERIFY_INTERFACE_HEADER_SETS=3.24")

# The project's CMake files, not those of a build tree inside the source tree.
file(GLOB _lists "${SOURCE_DIR}/CMakeLists.txt")
foreach(_folder cmake tests examples tools bench)
  file(GLOB_RECURSE _in_folder "${SOURCE_DIR}/${_folder}/CMakeLists.txt" "${SOURCE_DIR}/${_folder}/*.cmake"
    "${SOURCE_DIR}/${_folder}/*.cmake.in")
  list(FILTER _in_folder EXCLUDE REGEX "/node_modules/")  # npm packages (tests/node) are not the project's
  list(APPEND _lists ${_in_folder})
endforeach()

set(_needed 0)
set(_needed_by "")
set(_ranges "")
set(_found "")
foreach(_list IN LISTS _lists)
  file(READ "${_list}" _text)
  foreach(_feature IN LISTS _features)
    string(REGEX MATCH "^[^=]+" _name "${_feature}")
    string(REGEX MATCH "[^=]+$" _version "${_feature}")
    if(_text MATCHES "${_name}" AND _version VERSION_GREATER _needed)
      set(_needed ${_version})
      set(_needed_by "${_name}")
    endif()
  endforeach()
  string(REGEX MATCHALL "cmake_minimum_required\\(VERSION [^)]*\\)" _calls "${_text}")
  foreach(_call IN LISTS _calls)
    string(REGEX REPLACE "cmake_minimum_required\\(VERSION ([^)]*)\\)" "\\1" _range "${_call}")
    list(APPEND _ranges "${_range}")
    file(RELATIVE_PATH _where "${SOURCE_DIR}" "${_list}")
    string(APPEND _found "  ${_where}: ${_range}\n")
  endforeach()
endforeach()

list(REMOVE_DUPLICATES _ranges)
list(LENGTH _ranges _count)
if(NOT _count EQUAL 1)
  message(FATAL_ERROR "the projects declare different CMake versions:\n${_found}")
endif()
if(NOT _ranges MATCHES "^([0-9.]+)\\.\\.\\.([0-9.]+)$")
  message(FATAL_ERROR "the declared CMake version '${_ranges}' is not a range min...max")
endif()
set(_minimum ${CMAKE_MATCH_1})
if(_minimum VERSION_LESS _needed)
  message(FATAL_ERROR "cmake_minimum_required declares ${_minimum}, but ${_needed_by} needs CMake ${_needed}:\n${_found}")
endif()
file(READ "${SOURCE_DIR}/README.md" _readme)
string(REPLACE "." "\\." _minimum_regex "${_minimum}")
if(NOT _readme MATCHES "CMake ${_minimum_regex}[^.0-9]")
  message(FATAL_ERROR "README.md does not say 'CMake ${_minimum}'")
endif()
message(STATUS "CMake ${_ranges} everywhere; the features used need ${_needed} (${_needed_by})")
