# Install rules and the package config that lets a downstream project find_package(hkfac).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS hkfac_runtime hkfac_kfac EXPORT hkfacTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The autoscheduler plugin (hkfac::Hkfac), next to libhkfac_runtime, which it finds by $ORIGIN.
if (TARGET hkfac_autoschedule)
  install(TARGETS hkfac_autoschedule EXPORT hkfacTargets
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif ()
# Both trees merge into include/hkfac: the runtime's headers and hkfac/kfac/.
install(DIRECTORY runtime/include/hkfac kfac/include/hkfac DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# K-FAC for LibTorch models (hkfac::kfac_torch), where LibTorch was found; the package config then
# finds Torch for its users, and only then (HKFAC_KFAC_TORCH).
if (TARGET hkfac_kfac_torch)
  set(HKFAC_KFAC_TORCH ON)
  install(TARGETS hkfac_kfac_torch EXPORT hkfacTargets
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(DIRECTORY kfac_torch/include/hkfac DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
else ()
  set(HKFAC_KFAC_TORCH OFF)
endif ()

install(EXPORT hkfacTargets NAMESPACE hkfac:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/hkfac)
configure_package_config_file(cmake/hkfacConfig.cmake.in
                              "${PROJECT_BINARY_DIR}/hkfacConfig.cmake"
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/hkfac)
write_basic_package_version_file("${PROJECT_BINARY_DIR}/hkfacConfigVersion.cmake"
                                 COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/hkfacConfig.cmake"
              "${PROJECT_BINARY_DIR}/hkfacConfigVersion.cmake"
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/hkfac)
