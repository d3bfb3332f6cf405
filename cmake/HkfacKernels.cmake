# Helpers that turn Halide generators into hkfac kernel libraries sharing one Halide runtime.
include_guard(GLOBAL)

# True when kernel group GROUP is part of this build (see HKFAC_ONLY_GROUPS).
function(hkfac_group_enabled GROUP OUT)
  if (HKFAC_ONLY_GROUPS STREQUAL "" OR GROUP IN_LIST HKFAC_ONLY_GROUPS)
    set(${OUT} TRUE PARENT_SCOPE)
  else ()
    set(${OUT} FALSE PARENT_SCOPE)
  endif ()
endfunction()

# One Halide runtime for every kernel library and both targets: it is generated for the CUDA
# target when HKFAC_CUDA is on (a superset of the CPU runtime), so CPU and CUDA kernels linked into
# one program never carry duplicate halide_* symbols.
function(hkfac_add_halide_runtime)
  if (TARGET hkfac_halide_runtime)
    return()
  endif ()
  add_executable(hkfac_runtime_gen "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/empty.cpp")
  target_link_libraries(hkfac_runtime_gen PRIVATE Halide::Generator)
  if (HKFAC_CUDA)
    set(rt_target "${HKFAC_HOST_TARGET}-cuda")
  else ()
    set(rt_target "${HKFAC_HOST_TARGET}")
  endif ()
  set(out "${CMAKE_CURRENT_BINARY_DIR}/hkfac_halide_runtime.o")
  add_custom_command(OUTPUT "${out}"
                     COMMAND hkfac_runtime_gen -r hkfac_halide_runtime -o . -e object
                             "target=${rt_target}"
                     DEPENDS hkfac_runtime_gen
                     WORKING_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}"
                     VERBATIM)
  add_custom_target(hkfac_halide_runtime.update DEPENDS "${out}")
  # The object goes straight into libhkfac_runtime (see runtime/); kernel libraries only carry
  # the runtime's usage requirements through this interface target.
  add_library(hkfac_halide_runtime INTERFACE)
  target_link_libraries(hkfac_halide_runtime INTERFACE Halide::Runtime Threads::Threads
                                                       ${CMAKE_DL_LIBS})
  set_property(GLOBAL PROPERTY HKFAC_HALIDE_RUNTIME_OBJECT "${out}")
endfunction()

# hkfac_add_kernel(NAME [CPU_ONLY] FROM <generator exe> GENERATOR <registered name>
#                  [PARAMS k=v ...])
# Builds hkfac_k_<NAME>_cpu and, with HKFAC_CUDA and without CPU_ONLY, hkfac_k_<NAME>_cuda. The
# generated function names equal the library names; headers land in the build tree as
# <library>.h. CPU_ONLY is for a CPU-specific variant of a kernel whose CUDA variant exists under
# another name (the dispatch calls it on the CPU only).
function(hkfac_add_kernel NAME)
  cmake_parse_arguments(ARG "CPU_ONLY" "FROM;GENERATOR" "PARAMS" ${ARGN})
  set(variants cpu)
  if (HKFAC_CUDA AND NOT ARG_CPU_ONLY)
    list(APPEND variants cuda)
  endif ()
  foreach (v IN LISTS variants)
    if (v STREQUAL "cpu")
      set(tgt "${HKFAC_CPU_TARGET}")
    else ()
      set(tgt "${HKFAC_CUDA_TARGET}")
    endif ()
    set(lib "hkfac_k_${NAME}_${v}")
    add_halide_library(${lib} FROM ${ARG_FROM} GENERATOR ${ARG_GENERATOR}
                       FUNCTION_NAME ${lib}
                       USE_RUNTIME hkfac_halide_runtime
                       TARGETS ${tgt}
                       PARAMS ${ARG_PARAMS})
    set_property(GLOBAL APPEND PROPERTY HKFAC_KERNEL_LIBS ${lib})
    set_property(GLOBAL APPEND PROPERTY HKFAC_KERNEL_HEADER_DIRS "${CMAKE_CURRENT_BINARY_DIR}")
  endforeach ()
endfunction()
