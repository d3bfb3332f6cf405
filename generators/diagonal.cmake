# Diagonal-block kernels (NaiveDiagonal / ScaleAndShiftDiagonal curvature).
add_halide_generator(hkfac_gen_diagonal SOURCES diagonal.cpp)
hkfac_add_kernel(diagonal_ema FROM hkfac_gen_diagonal GENERATOR hkfac_diagonal_ema)
hkfac_add_kernel(diagonal_matpower FROM hkfac_gen_diagonal GENERATOR hkfac_diagonal_matpower)
