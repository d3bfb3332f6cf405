# Script mode: install, configure, build and run the downstream example; any failure fails the test.
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if (NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif ()
  message(STATUS "${out}")
endfunction()

file(REMOVE_RECURSE "${PREFIX}" "${WORK}")
run("${CMAKE_COMMAND}" --install "${HKFAC_BUILD_DIR}" --prefix "${PREFIX}")
run("${CMAKE_COMMAND}" -S "${SOURCE}" -B "${WORK}" -G Ninja "-DCMAKE_PREFIX_PATH=${PREFIX}")
run("${CMAKE_COMMAND}" --build "${WORK}")
run("${WORK}/downstream_demo")
