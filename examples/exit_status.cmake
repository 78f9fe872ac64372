# Runs PROGRAM with ARGUMENTS (a list; default --bogus) and fails unless it exits with status EXPECTED.
#   cmake -DPROGRAM=path [-DARGUMENTS=a;b] -DEXPECTED=2 -P exit_status.cmake
if(NOT DEFINED ARGUMENTS)
  set(ARGUMENTS --bogus)
endif()
execute_process(COMMAND ${PROGRAM} ${ARGUMENTS} RESULT_VARIABLE status OUTPUT_QUIET ERROR_QUIET)
if(NOT status STREQUAL EXPECTED)
  message(FATAL_ERROR "${PROGRAM} ${ARGUMENTS}: exit status ${status}, expected ${EXPECTED}")
endif()
