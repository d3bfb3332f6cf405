# Conv2D's input (patch) factor, read from the images; the untiled variant serves patches narrower
# than one tile.
add_halide_generator(hkfac_gen_patch_covariance SOURCES patch_covariance.cpp)
hkfac_add_kernel(patch_covariance_update FROM hkfac_gen_patch_covariance
                 GENERATOR hkfac_patch_covariance_update)
hkfac_add_kernel(patch_covariance_update_small FROM hkfac_gen_patch_covariance
                 GENERATOR hkfac_patch_covariance_update PARAMS tiled=false)
