# Dense layer kernels: forward and backward, one library per activation (no runtime branch); both
# also as CPU variants with one-vector tiles for layers with a few outputs (kNarrowColumnsTo), the
# forward pass for a single output as its rows' dot products (the backward pass as an outer
# product and one column of sums), and the backward pass as a CPU
# variant that copies X into rows for dW = Xᵀ dZ, for large batches
# (kDenseBackwardPackedBatchFrom in runtime/src/dispatch.h).
add_halide_generator(hkfac_gen_dense SOURCES dense.cpp)
foreach (act IN ITEMS identity tanh relu sigmoid)
  hkfac_add_kernel(dense_forward_${act} FROM hkfac_gen_dense GENERATOR hkfac_dense_forward
                   PARAMS activation=${act})
  hkfac_add_kernel(dense_backward_${act} FROM hkfac_gen_dense GENERATOR hkfac_dense_backward
                   PARAMS activation=${act})
  hkfac_add_kernel(dense_backward_${act}_packed CPU_ONLY FROM hkfac_gen_dense
                   GENERATOR hkfac_dense_backward PARAMS activation=${act} pack_x=true)
  hkfac_add_kernel(dense_forward_${act}_narrow CPU_ONLY FROM hkfac_gen_dense
                   GENERATOR hkfac_dense_forward PARAMS activation=${act} tiles=narrow)
  hkfac_add_kernel(dense_forward_${act}_one_column CPU_ONLY FROM hkfac_gen_dense
                   GENERATOR hkfac_dense_forward PARAMS activation=${act} tiles=one_column)
  hkfac_add_kernel(dense_backward_${act}_narrow CPU_ONLY FROM hkfac_gen_dense
                   GENERATOR hkfac_dense_backward PARAMS activation=${act} tiles=narrow)
  hkfac_add_kernel(dense_backward_${act}_one_column CPU_ONLY FROM hkfac_gen_dense
                   GENERATOR hkfac_dense_backward PARAMS activation=${act} tiles=one_column)
endforeach ()
