# Writes OUT (generated/git_info.h) with `git describe --always --dirty --tags` of SRC, at every build, touching the
# file only when the description changed: result records and --version name the code the binary was built from, not
# the commit of the first configure. Run by the trainer_git_info target (CMakeLists.txt): cmake -DSRC=.. -DOUT=.. -P
execute_process(COMMAND git describe --always --dirty --tags WORKING_DIRECTORY ${SRC}
                OUTPUT_VARIABLE git OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT git)
  set(git "unknown")
endif()
set(text "// Generated at build time by src/git_info.cmake. Do not edit.\n#pragma once\nnamespace trainer::build {\ninline constexpr const char* kGit = \"${git}\";\n}  // namespace trainer::build\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT "${old}" STREQUAL "${text}")
  file(WRITE ${OUT} "${text}")
endif()
