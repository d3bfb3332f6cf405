// The CUDA probe against a stand-in driver that exists only as libcuda.so.1 (stub_driver.c; no
// unversioned libcuda.so on the library path), as the NVIDIA driver installs it. Halide 14's CUDA
// runtime resolves the driver's entry points with halide_cuda_get_symbol: first among the
// symbols already loaded, then by opening "libcuda.so" (no other name). So when the probe says
// CUDA is usable, the runtime must be able to find the same driver: here that holds only because
// the probe loads it with global symbols.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include "hkfac/device.h"

// Halide 14's runtime (linked into hkfac::runtime); not declared in its public headers.
extern "C" void *halide_cuda_get_symbol(void *user_context, const char *name);

namespace {

TEST(CudaProbe, FindsADriverInstalledOnlyAsLibcudaSo1) {
  const hkfac::CudaStatus &s = hkfac::cuda_status();
  ASSERT_TRUE(s.usable) << s.reason;
  EXPECT_EQ(s.device_count, 1);
  EXPECT_EQ(s.device_name, "hkfac stub driver");
}

TEST(CudaProbe, HalidesRuntimeResolvesTheDriverTheProbeLoaded) {
  ASSERT_TRUE(hkfac::cuda_status().usable) << hkfac::cuda_status().reason;
  void *stub = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  ASSERT_NE(stub, nullptr) << "the probe did not leave libcuda.so.1 loaded";
  void *expected = dlsym(stub, "cuInit");
  ASSERT_NE(expected, nullptr);
  // What Halide's CUDA runtime will call for cuInit: the stub's, not a failed lookup.
  EXPECT_EQ(halide_cuda_get_symbol(nullptr, "cuInit"), expected);
  EXPECT_EQ(halide_cuda_get_symbol(nullptr, "cuDeviceGetCount"), dlsym(stub, "cuDeviceGetCount"));
  dlclose(stub);
}

} // namespace
