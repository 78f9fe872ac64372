# Runs the README's FetchContent recipe as written. The cmake block that follows the marker
# <!-- llmretry-test: fetchcontent --> in README.md becomes the CMakeLists.txt of a project (with readme/main.cpp
# as its main.cpp); only its GIT_REPOSITORY is replaced, by the file:// URL of a scratch repository that
# holds the checkout's committed HEAD under the recipe's GIT_TAG. Then ctest --build-and-test configures,
# builds and runs it.
#   cmake -DSOURCE_DIR=<llmretry checkout> -DBINARY_DIR=<scratch> -DCTEST_COMMAND=<ctest> -P readme.cmake --
#         <--build-and-test options...>
# Prints "skipped" and passes when SOURCE_DIR is not the top of a git checkout (a release archive).
cmake_minimum_required(VERSION 3.24...3.31)
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

if(NOT EXISTS "${SOURCE_DIR}/.git")
  message(STATUS "skipped: ${SOURCE_DIR} is not a git checkout, so it has no commit to fetch")
  return()
endif()
find_package(Git REQUIRED)

# The recipe: the first ```cmake block after the marker.
file(READ "${SOURCE_DIR}/README.md" _readme)
set(_marker "<!-- llmretry-test: fetchcontent -->")
string(FIND "${_readme}" "${_marker}" _at)
if(_at EQUAL -1)
  message(FATAL_ERROR "README.md has no '${_marker}'")
endif()
string(SUBSTRING "${_readme}" ${_at} -1 _readme)
if(NOT _readme MATCHES "```cmake\n(.*)")
  message(FATAL_ERROR "README.md has no ```cmake block after '${_marker}'")
endif()
set(_recipe "${CMAKE_MATCH_1}")
string(FIND "${_recipe}" "```" _end)
string(SUBSTRING "${_recipe}" 0 ${_end} _recipe)
if(NOT _recipe MATCHES "GIT_TAG[ \t\n]+([^ \t\n)]+)")
  message(FATAL_ERROR "the README's recipe has no GIT_TAG:\n${_recipe}")
endif()
set(_tag "${CMAKE_MATCH_1}")

# A bare repository with HEAD as the branch <GIT_TAG>, and the recipe pointed at it.
set(_repository "${BINARY_DIR}/llmretry.git")
file(REMOVE_RECURSE "${BINARY_DIR}")
execute_process(COMMAND "${GIT_EXECUTABLE}" init --quiet --bare "${_repository}" COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${_repository}" fetch --quiet --no-tags "file://${SOURCE_DIR}"
  "+HEAD:refs/heads/${_tag}" COMMAND_ERROR_IS_FATAL ANY)
string(REGEX REPLACE "GIT_REPOSITORY[ \t\n]+[^ \t\n)]+" "GIT_REPOSITORY file://${_repository}" _project "${_recipe}")
if(_project STREQUAL _recipe)
  message(FATAL_ERROR "the README's recipe has no GIT_REPOSITORY:\n${_recipe}")
endif()
file(WRITE "${BINARY_DIR}/project/CMakeLists.txt" "${_project}")
file(COPY "${CMAKE_CURRENT_LIST_DIR}/readme/main.cpp" DESTINATION "${BINARY_DIR}/project")
message(STATUS "the README's recipe, with GIT_REPOSITORY replaced:\n${_project}")

execute_process(COMMAND "${CTEST_COMMAND}" --build-and-test "${BINARY_DIR}/project" "${BINARY_DIR}/build"
  ${_options} --test-command app COMMAND_ERROR_IS_FATAL ANY)
