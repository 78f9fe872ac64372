# Strict warnings for the project's own tests and examples, never for the INTERFACE target that users link.
# llmretry_strict_warnings(<target>) turns them on, as errors unless LLMRETRY_WERROR is OFF.
option(LLMRETRY_WERROR "Treat warnings as errors in llmretry's tests and examples" ON)

function(llmretry_strict_warnings target)
  if(MSVC)
    target_compile_options(${target} PRIVATE /W4 $<$<BOOL:${LLMRETRY_WERROR}>:/WX>)
  else()
    target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wconversion
      $<$<BOOL:${LLMRETRY_WERROR}>:-Werror>)
  endif()
endfunction()
