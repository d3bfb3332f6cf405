# The autoencoder app's fixed-set evaluation: 20 Adam steps on random data, evaluated after every
# step, must exit 0, lower the fixed-set objective from the start to the end, write one evaluation
# row per step boundary (steps 0 to 20) whose last loss is below its first, and the 20-step curve.
# Run as: cmake -DAPP=<autoencoder> -DOUT=<dir> -P fixed_set.cmake
file(REMOVE "${OUT}/eval.csv" "${OUT}/loss.csv")
execute_process(COMMAND "${APP}" --data=random --optimizer=adam --learning_rate=1e-3
                        --training_steps=20 --log_every=10 --eval_every_seconds=1e-6
                        --eval_examples=500 --csv=${OUT}/loss.csv --png=${OUT}/loss.png
                        --eval_csv=${OUT}/eval.csv
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if (NOT rc EQUAL 0)
  message(FATAL_ERROR "autoencoder failed (${rc}):\n${out}\n${err}")
endif ()
message(STATUS "${out}")

# [0-9.]+ refuses nan and inf, so a diverged run cannot pass.
if (NOT out MATCHES
    "objective on the first 500 examples: ([0-9.]+) at the start, ([0-9.]+) at the end")
  message(FATAL_ERROR "no fixed-set objective in the output")
endif ()
set(start_loss "${CMAKE_MATCH_1}")
set(end_loss "${CMAKE_MATCH_2}")
if (NOT end_loss LESS start_loss)
  message(FATAL_ERROR "training did not lower the fixed-set objective: ${start_loss} at the "
                      "start, ${end_loss} at the end")
endif ()

# eval.csv (step,seconds,loss): a row after every step, as --eval_every_seconds=1e-6 asks.
file(STRINGS "${OUT}/eval.csv" rows)
list(REMOVE_AT rows 0)
set(steps "")
foreach (row IN LISTS rows)
  string(REPLACE "," ";" cells "${row}")
  list(GET cells 0 step)
  list(APPEND steps "${step}")
endforeach ()
set(want "")
foreach (step RANGE 20)
  list(APPEND want "${step}")
endforeach ()
if (NOT steps STREQUAL want)
  message(FATAL_ERROR "eval.csv has rows for steps '${steps}', expected '${want}'")
endif ()
list(GET rows 0 first_row)
list(GET rows -1 last_row)
string(REPLACE "," ";" first_cells "${first_row}")
string(REPLACE "," ";" last_cells "${last_row}")
list(GET first_cells 2 first_loss)
list(GET last_cells 2 last_loss)
if (NOT last_loss LESS first_loss)
  message(FATAL_ERROR "eval.csv: the loss went from ${first_loss} to ${last_loss}, not down")
endif ()

file(STRINGS "${OUT}/loss.csv" curve)
list(LENGTH curve n)
if (NOT n EQUAL 21)
  message(FATAL_ERROR "loss.csv has ${n} lines, expected a header and 20 steps")
endif ()
