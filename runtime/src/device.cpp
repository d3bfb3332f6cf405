// Device selection and the CUDA probe (dlopen of libcuda; no link-time dependency on CUDA).
#include "hkfac/device.h"

#include <dlfcn.h>

#include <HalideRuntime.h>
#include <atomic>
#include <cstdlib>
#include <mutex>

#include "hkfac/error.h"

#if HKFAC_HAVE_CUDA
#include <HalideRuntimeCuda.h>
#endif

namespace hkfac {
namespace {

CudaStatus probe_cuda() {
  CudaStatus s;
  s.compiled_in = HKFAC_HAVE_CUDA;
  if (!s.compiled_in) {
    s.reason = "this build has no CUDA kernels (configured with HKFAC_CUDA=OFF)";
    return s;
  }
  // The driver library Halide's CUDA runtime calls; probing it ourselves keeps a missing driver a
  // clear status instead of a kernel failure. Loaded with RTLD_GLOBAL because of how Halide 14's
  // runtime finds it: it looks the driver's symbols up among those already loaded, and failing
  // that opens "libcuda.so" only. The driver installs libcuda.so.1; the unversioned name comes
  // with development packages and is often absent, and then every kernel would fail where this
  // probe had said CUDA was usable (tests/cuda_probe).
  void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_GLOBAL);
  if (!lib)
    lib = dlopen("libcuda.so", RTLD_LAZY | RTLD_GLOBAL);
  if (!lib) {
    s.reason = "libcuda (the NVIDIA driver library) is not installed";
    return s;
  }
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int *);
  using GetFn = int (*)(int *, int);
  using NameFn = int (*)(char *, int, int);
  auto init = reinterpret_cast<InitFn>(dlsym(lib, "cuInit"));
  auto count = reinterpret_cast<CountFn>(dlsym(lib, "cuDeviceGetCount"));
  auto get = reinterpret_cast<GetFn>(dlsym(lib, "cuDeviceGet"));
  auto name = reinterpret_cast<NameFn>(dlsym(lib, "cuDeviceGetName"));
  if (!init || !count) {
    s.reason = "libcuda lacks cuInit/cuDeviceGetCount";
    return s;
  }
  if (int rc = init(0); rc != 0) {
    s.reason = "cuInit failed with CUDA error " + std::to_string(rc) +
               (rc == 100  ? " (no CUDA-capable device)"
                : rc == 34 ? " (stub driver library)"
                           : "");
    return s;
  }
  if (int rc = count(&s.device_count); rc != 0 || s.device_count < 1) {
    s.reason = "no CUDA device found";
    s.device_count = 0;
    return s;
  }
  int dev = 0;
  char buf[256] = {0};
  if (get && name && get(&dev, 0) == 0 && name(buf, sizeof(buf) - 1, dev) == 0) {
    s.device_name = buf;
  }
  s.usable = true;
  return s; // lib stays loaded, its symbols global: Halide's runtime finds them there.
}

std::atomic<int> g_default{-1};

} // namespace

const char *device_name(Device d) { return d == Device::cuda ? "cuda" : "cpu"; }

const CudaStatus &cuda_status() {
  static const CudaStatus status = probe_cuda();
  return status;
}

Device parse_device(std::string_view text, std::string_view what) {
  if (text == "cpu")
    return Device::cpu;
  if (text == "auto")
    return cuda_status().usable ? Device::cuda : Device::cpu;
  if (text == "cuda") {
    require_device(Device::cuda);
    return Device::cuda;
  }
  throw Error(std::string(what) + ": expected cpu, cuda or auto, got '" + std::string(text) + "'");
}

Device default_device() {
  int v = g_default.load(std::memory_order_relaxed);
  if (v < 0) {
    const char *env = std::getenv("HKFAC_DEVICE");
    Device d = parse_device(env && *env ? env : "auto", "HKFAC_DEVICE");
    int expected = -1;
    g_default.compare_exchange_strong(expected, static_cast<int>(d));
    v = g_default.load();
  }
  return static_cast<Device>(v);
}

void set_default_device(Device d) {
  require_device(d);
  g_default.store(static_cast<int>(d));
}

void require_device(Device d) {
  if (d == Device::cpu)
    return;
  const CudaStatus &s = cuda_status();
  if (!s.usable)
    throw Error("device cuda requested but CUDA is not usable: " + s.reason);
}

const halide_device_interface_t *device_interface(Device d) {
  if (d == Device::cpu)
    return nullptr;
  require_device(d);
#if HKFAC_HAVE_CUDA
  return halide_cuda_device_interface();
#else
  return nullptr;
#endif
}

void synchronize(Device d) {
  if (d == Device::cpu)
    return;
  const halide_device_interface_t *iface = device_interface(d);
  // The CUDA runtime synchronises the whole context; it does not need a buffer.
  if (iface && iface->device_sync) {
    if (int rc = iface->device_sync(nullptr, nullptr); rc != 0) {
      throw Error("synchronize: device " + std::string(device_name(d)) +
                  " failed with Halide error " + std::to_string(rc));
    }
  }
}

} // namespace hkfac
