# Runs one evaluation-app generator with an invalid GeneratorParam and checks that it refuses it:
# an exit status other than 0 and not a signal, and an error naming the app, parameter and value.
# cmake -D GENERATOR=<exe> -D APP=<name> -D PARAM=<name>=<value> -D OUTPUT_DIR=<dir> -P <this>
file(MAKE_DIRECTORY "${OUTPUT_DIR}")
execute_process(COMMAND "${GENERATOR}" -g "${APP}" -o "${OUTPUT_DIR}" target=host "${PARAM}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
set(log "${out}${err}")
# execute_process reports a signal ("Segmentation fault", "Child aborted") as text, not a number.
if (NOT rc MATCHES "^[0-9]+$")
  message(FATAL_ERROR "${APP} ${PARAM}: the generator died (${rc}) instead of refusing:\n${log}")
endif ()
if (rc EQUAL 0)
  message(FATAL_ERROR "${APP} ${PARAM}: the generator accepted the value:\n${log}")
endif ()
string(FIND "${log}" "${APP}: ${PARAM} " at)
if (at EQUAL -1)
  message(FATAL_ERROR "${APP} ${PARAM}: exit status ${rc}, but no error naming '${APP}: ${PARAM}':\n${log}")
endif ()
message(STATUS "${APP} ${PARAM}: refused (exit status ${rc}): ${err}")
