// Device choice (cpu | cuda | auto) and the CUDA availability probe.
#pragma once

#include <string>
#include <string_view>

struct halide_device_interface_t;

namespace hkfac {

enum class Device { cpu, cuda };

// Parses "cpu", "cuda" or "auto" (auto = cuda when usable, else cpu). Throws hkfac::Error naming
// `what` (e.g. "HKFAC_DEVICE") on anything else, and on "cuda" when CUDA is not usable.
Device parse_device(std::string_view text, std::string_view what = "device");
const char *device_name(Device d);

// What the probe found. `usable` is true only when libcuda loads, cuInit succeeds and at least
// one device exists; otherwise `reason` says which of those failed.
struct CudaStatus {
  bool compiled_in = false; // this build has CUDA kernel variants (HKFAC_CUDA)
  bool usable = false;
  int device_count = 0;
  std::string device_name;
  std::string reason;
};

// Probes once (thread-safe) and caches; never crashes when libcuda or a device is missing.
const CudaStatus &cuda_status();

// The device kernels run on when a call does not name one: HKFAC_DEVICE (cpu|cuda|auto, default
// auto) read once, unless overridden with set_default_device().
Device default_device();
void set_default_device(Device d);

// Throws hkfac::Error with the probe's reason when `d` cannot run kernels in this process.
void require_device(Device d);

// Halide's device interface for `d` (nullptr for cpu).
const halide_device_interface_t *device_interface(Device d);

// Waits until all kernels launched on `d` have finished (CUDA launches are asynchronous); a no-op
// for cpu. Timings of device kernels need it.
void synchronize(Device d);

} // namespace hkfac
