/* A stand-in for the NVIDIA driver library (libcuda.so.1) with the four entry points the
 * runtime's probe calls: one device, named so the test can tell the stub from a real driver.
 * Built only for tests/cuda_probe, which puts its directory first on LD_LIBRARY_PATH. */
#include <string.h>

int cuInit(unsigned flags) {
  (void)flags;
  return 0;
}

int cuDeviceGetCount(int *count) {
  *count = 1;
  return 0;
}

int cuDeviceGet(int *device, int ordinal) {
  *device = ordinal;
  return 0;
}

int cuDeviceGetName(char *name, int length, int device) {
  (void)device;
  strncpy(name, "hkfac stub driver", (size_t)length);
  return 0;
}
