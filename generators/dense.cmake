# Dense layer kernels: forward and backward, one library per activation (no runtime branch).
add_halide_generator(hkfac_gen_dense SOURCES dense.cpp)
foreach (act IN ITEMS identity tanh relu sigmoid)
  hkfac_add_kernel(dense_forward_${act} FROM hkfac_gen_dense GENERATOR hkfac_dense_forward
                   PARAMS activation=${act})
  hkfac_add_kernel(dense_backward_${act} FROM hkfac_gen_dense GENERATOR hkfac_dense_backward
                   PARAMS activation=${act})
endforeach ()
