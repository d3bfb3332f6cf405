# General matrix multiply: one kernel library per (transpose_a, transpose_b) pair, each also as a
# CPU variant with one-vector tiles for C with a few columns (kNarrowColumnsTo), an untransposed
# A also as one for a single column (its rows' dot products), plus a CPU
# variant of the transposed-A product that copies A into rows first, for deep products
# (kGemmPackedDepthFrom in runtime/src/dispatch.h).
add_halide_generator(hkfac_gen_gemm SOURCES gemm.cpp)
foreach (ta IN ITEMS n t)
  foreach (tb IN ITEMS n t)
    set(ta_bool false)
    set(tb_bool false)
    if (ta STREQUAL "t")
      set(ta_bool true)
    endif ()
    if (tb STREQUAL "t")
      set(tb_bool true)
    endif ()
    hkfac_add_kernel(gemm_${ta}${tb} FROM hkfac_gen_gemm GENERATOR hkfac_gemm
                     PARAMS transpose_a=${ta_bool} transpose_b=${tb_bool})
    hkfac_add_kernel(gemm_${ta}${tb}_narrow CPU_ONLY FROM hkfac_gen_gemm GENERATOR hkfac_gemm
                     PARAMS transpose_a=${ta_bool} transpose_b=${tb_bool} tiles=narrow)
    if (ta STREQUAL "n")
      hkfac_add_kernel(gemm_${ta}${tb}_one_column CPU_ONLY FROM hkfac_gen_gemm GENERATOR hkfac_gemm
                       PARAMS transpose_a=false transpose_b=${tb_bool} tiles=one_column)
    endif ()
  endforeach ()
endforeach ()
hkfac_add_kernel(gemm_tn_packed CPU_ONLY FROM hkfac_gen_gemm GENERATOR hkfac_gemm
                 PARAMS transpose_a=true transpose_b=false pack_a=true)
