# A K-FAC run of the autoencoder app stopped after 7 steps and resumed from its checkpoint for 5
# more must log the same losses, to the last digit, as an uninterrupted 12-step run: the
# optimizer's state, the parameters and the data position all travel through the file. A resume
# with other settings is refused.
# Run as: cmake -DAPP=<autoencoder> -DOUT=<dir> -P resume.cmake
set(flags --data=random --batch_size=32 --log_every=100 --inverse_update_period=3
          --use_adaptive_damping --use_adaptive_learning_rate --use_adaptive_momentum)
file(REMOVE "${OUT}/ckpt.bin")

function(run name)
  execute_process(COMMAND "${APP}" ${flags} --csv=${OUT}/${name}.csv --png=${OUT}/${name}.png
                          ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if (NOT rc EQUAL 0)
    message(FATAL_ERROR "autoencoder (${name}) failed (${rc}):\n${out}\n${err}")
  endif ()
endfunction()

# The loss column of rows `first`.. of a step,seconds,loss CSV.
function(losses csv first result)
  file(STRINGS "${csv}" rows)
  list(REMOVE_AT rows 0)
  set(out "")
  foreach (row IN LISTS rows)
    string(REPLACE "," ";" cells "${row}")
    list(GET cells 0 step)
    list(GET cells 2 loss)
    if (step GREATER_EQUAL first)
      list(APPEND out "${step}:${loss}")
    endif ()
  endforeach ()
  set(${result} "${out}" PARENT_SCOPE)
endfunction()

run(full --training_steps=12)
run(first --training_steps=7 --save_checkpoint=${OUT}/ckpt.bin)
run(resumed --training_steps=5 --load_checkpoint=${OUT}/ckpt.bin)
losses("${OUT}/full.csv" 7 expected)
losses("${OUT}/resumed.csv" 0 found)
list(LENGTH expected n)
if (NOT n EQUAL 5 OR NOT expected STREQUAL found)
  message(FATAL_ERROR
          "resumed losses differ:\n  uninterrupted ${expected}\n  resumed       ${found}")
endif ()
message(STATUS "resumed run matches the uninterrupted one: ${found}")

# Resuming with settings the losses depend on changed is refused, naming each changed flag; the
# step count and the outputs may change.
execute_process(COMMAND "${APP}" ${flags} --batch_size=16 --seed=5 --training_steps=2
                        --csv=${OUT}/other.csv --png=${OUT}/other.png
                        --load_checkpoint=${OUT}/ckpt.bin
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if (rc EQUAL 0 OR NOT err MATCHES "--batch_size: the checkpoint's run had 32, this run 16"
    OR NOT err MATCHES "--seed: the checkpoint's run had 12412321, this run 5")
  message(FATAL_ERROR "a resume with other settings was not refused by name (${rc}):\n${out}\n${err}")
endif ()
file(REMOVE "${OUT}/ckpt.bin")
