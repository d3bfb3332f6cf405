// Shared by the OpenCL schedule checks (scripts/opencl-check): random inputs and a verdict line.
#pragma once

#include <HalideBuffer.h>

#include <cstdio>
#include <random>

// Halide's default error handler aborts; this one prints, and the kernel returns its error code, so
// a failing case is reported and the next one runs. (The runtime's handler is a weak symbol; one
// driver per program includes this header.)
extern "C" void halide_error(void *, const char *msg) { std::fprintf(stderr, "halide: %s\n", msg); }

namespace hkfac::opencl_check {

// Fills `b` with values in [-0.5, 0.5) and marks the host copy as the one to upload.
inline void fill_random(Halide::Runtime::Buffer<float> &b, std::mt19937 &rng) {
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  b.for_each_value([&](float &v) { v = u(rng); });
  b.set_host_dirty();
}

// Prints one line per case; returns whether it passed.
inline bool verdict(bool ok, const char *what, int rc, double err) {
  std::printf("%s %s (halide rc %d, max relative error %.3g)\n", ok ? "ok  " : "FAIL", what, rc,
              err);
  return ok;
}

} // namespace hkfac::opencl_check
