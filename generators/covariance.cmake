# Covariance (K-FAC factor) update; the untiled variant serves X narrower than one tile (on the
# CPU, narrower than kCovarianceCpuTiledFrom), the wide one (CPU only) X of at least
# kCovarianceWideFrom columns (runtime/src/dispatch.h).
add_halide_generator(hkfac_gen_covariance SOURCES covariance.cpp)
hkfac_add_kernel(covariance_update FROM hkfac_gen_covariance GENERATOR hkfac_covariance_update)
hkfac_add_kernel(covariance_update_small FROM hkfac_gen_covariance
                 GENERATOR hkfac_covariance_update PARAMS tiled=false)
hkfac_add_kernel(covariance_update_wide CPU_ONLY FROM hkfac_gen_covariance
                 GENERATOR hkfac_covariance_update PARAMS tile=48)
# X narrower than one CPU vector, its rows read in place as whole vectors (covariance_narrow.cpp):
# the dispatch's kCpuFloatLanes.
add_halide_generator(hkfac_gen_covariance_narrow SOURCES covariance_narrow.cpp)
hkfac_add_kernel(covariance_update_narrow CPU_ONLY FROM hkfac_gen_covariance_narrow
                 GENERATOR hkfac_covariance_update_narrow)
