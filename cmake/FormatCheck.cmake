# cmake -DCLANG_FORMAT=... -DROOT=... -P FormatCheck.cmake: fails listing every file clang-format would change.
file(GLOB_RECURSE files ${ROOT}/include/*.h ${ROOT}/src/*.cc ${ROOT}/src/*.h ${ROOT}/tools/*.cc ${ROOT}/tools/*.h
     ${ROOT}/tests/*.cc ${ROOT}/tests/*.h ${ROOT}/bench/*.cc)
# One clang-format over every file (a process per file took 40 s, most of it starting clang-format); only
# when it fails are the files asked one by one, to name them.
execute_process(COMMAND ${CLANG_FORMAT} --style=file --dry-run --Werror ${files}
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET WORKING_DIRECTORY ${ROOT})
if(rc EQUAL 0)
  message(STATUS "all files formatted")
  return()
endif()
set(bad "")
foreach(f IN LISTS files)
  execute_process(COMMAND ${CLANG_FORMAT} --style=file --dry-run --Werror ${f}
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET WORKING_DIRECTORY ${ROOT})
  if(NOT rc EQUAL 0)
    list(APPEND bad ${f})
  endif()
endforeach()
if(bad)
  string(REPLACE ";" "\n  " bad "${bad}")
  message(FATAL_ERROR "not clang-formatted (run scripts/format):\n  ${bad}")
endif()
message(FATAL_ERROR "clang-format failed on the files together but on none alone (exit ${rc})")
