# Kronecker-factored preconditioning: explicit inverses, and the eigenbasis route.
add_halide_generator(hkfac_gen_precondition SOURCES precondition.cpp)
hkfac_add_kernel(kron_precondition FROM hkfac_gen_precondition GENERATOR hkfac_kron_precondition)
hkfac_add_kernel(kron_precondition_eigen FROM hkfac_gen_precondition
                 GENERATOR hkfac_kron_precondition_eigen)
