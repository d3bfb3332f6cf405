# Covariance (K-FAC factor) update; the untiled variant serves X narrower than one tile (on the
# CPU, narrower than kCovarianceCpuTiledFrom), the wide one (CPU only) X of at least
# kCovarianceWideFrom columns (runtime/src/dispatch.h).
add_halide_generator(hkfac_gen_covariance SOURCES covariance.cpp)
hkfac_add_kernel(covariance_update FROM hkfac_gen_covariance GENERATOR hkfac_covariance_update)
hkfac_add_kernel(covariance_update_small FROM hkfac_gen_covariance
                 GENERATOR hkfac_covariance_update PARAMS tiled=false)
hkfac_add_kernel(covariance_update_wide CPU_ONLY FROM hkfac_gen_covariance
                 GENERATOR hkfac_covariance_update PARAMS tile=48)
# The same two tiled forms writing only the upper triangle (covariance_update_upper; the untiled
# and narrow variants are cheap enough to write both and serve it as they are).
hkfac_add_kernel(covariance_update_upper FROM hkfac_gen_covariance
                 GENERATOR hkfac_covariance_update PARAMS upper_only=true)
hkfac_add_kernel(covariance_update_wide_upper CPU_ONLY FROM hkfac_gen_covariance
                 GENERATOR hkfac_covariance_update PARAMS tile=48 upper_only=true)
# X narrower than one CPU vector, its rows read in place as whole vectors (covariance_narrow.cpp):
# the dispatch's kCpuFloatLanes.
add_halide_generator(hkfac_gen_covariance_narrow SOURCES covariance_narrow.cpp)
hkfac_add_kernel(covariance_update_narrow CPU_ONLY FROM hkfac_gen_covariance_narrow
                 GENERATOR hkfac_covariance_update_narrow)
