# commit.cmake - run at every build (cmake -P): writes OUT, a header naming
# the source tree's git commit for `strata --version`, only when it changed,
# so a new commit is never reported stale and an unchanged one rebuilds
# nothing. Without git (a source archive) the commit reads "unknown".
execute_process(COMMAND git -C ${SRC} describe --always --dirty --abbrev=12
  OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE
  RESULT_VARIABLE rc ERROR_QUIET)
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown")
endif()
set(text "#define STRATA_COMMIT \"${commit}\"\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUT} "${text}")
endif()
