# HKFAC_HOST_TARGET: this machine's Halide target, minus features Halide 14 mis-detects.
#
# Halide 14 reports AMD Zen 4 hosts as avx512_sapphirerapids and then emits AVX512-FP16
# instructions (e.g. vmovw) that Zen 4 lacks, so `target=host` code can die with SIGILL. We ask
# Halide's get_host_target for the host's features and drop that one; everything else (AVX-512,
# FMA, ...) stays, so kernels still use the host's full vector width.
include_guard(GLOBAL)

find_program(HKFAC_GET_HOST_TARGET get_host_target
             PATHS /usr/lib/x86_64-linux-gnu/halide14 /usr/lib/halide14 NO_DEFAULT_PATH)
set(HKFAC_HOST_TARGET "host")
if (HKFAC_GET_HOST_TARGET)
  execute_process(COMMAND "${HKFAC_GET_HOST_TARGET}" OUTPUT_VARIABLE detected
                  RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
  if (rc EQUAL 0 AND detected MATCHES "^[a-z0-9_]+-[0-9]+-[a-z]+")
    string(REPLACE "-avx512_sapphirerapids" "" HKFAC_HOST_TARGET "${detected}")
  endif ()
endif ()
message(STATUS "hkfac: Halide host target ${HKFAC_HOST_TARGET}")
# For scripts that run a generator by hand (apps/bench/kernels/profile_covariance.sh).
file(WRITE "${CMAKE_BINARY_DIR}/hkfac_host_target.txt" "${HKFAC_HOST_TARGET}\n")

# HKFAC_AGREEMENT_TARGET: the one target of the scheduler-agreement tests (tests/pipelines,
# tests/random_pipeline). Adams2019 chooses schedules by the target's vector width, so at the
# host's target AVX-512 and AVX2-only hosts hit different scheduler bugs, and no known-bug list
# held on both. Every x86-64 host these builds run on has AVX2 and FMA; fixing that feature set
# makes the schedules, and the lists, the same wherever the suite runs (docs/pipelines.md). The
# benchmark bed keeps the host's target.
set(agreement_default "${HKFAC_HOST_TARGET}")
if (HKFAC_HOST_TARGET MATCHES "^x86-64-linux" AND HKFAC_HOST_TARGET MATCHES "-avx2"
    AND HKFAC_HOST_TARGET MATCHES "-fma")
  set(agreement_default "x86-64-linux-avx-avx2-f16c-fma-sse41")
endif ()
set(HKFAC_AGREEMENT_TARGET "${agreement_default}" CACHE STRING
    "Halide target of the scheduler-agreement tests (their known-bug lists are for the default)")
unset(agreement_default)
