// The dense forward generator's GPU schedule on OpenCL (scripts/opencl-check), tanh activation:
// Y = tanh(X W + b) on the dense test's shapes against a double-precision loop, linked with the
// generated `kernel`.
#include <cmath>
#include <string>

#include "check_util.h"
#include "kernel.h"

using Halide::Runtime::Buffer;

int main() {
  std::mt19937 rng(5);
  bool all_ok = true;
  for (const auto &s : hkfac::opencl_check::kDenseShapes) {
    const int batch = s[0], d_in = s[1], d_out = s[2];
    Buffer<float> X(d_in, batch), W(d_out, d_in), b(d_out), Y(d_out, batch);
    for (Buffer<float> *buf : {&X, &W, &b})
      hkfac::opencl_check::fill_random(*buf, rng);
    const int rc = kernel(X, W, b, Y);
    Y.copy_to_host();
    double err = 0;
    for (int i = 0; i < batch; i++) {
      for (int o = 0; o < d_out; o++) {
        double z = b(o);
        for (int j = 0; j < d_in; j++)
          z += double(X(j, i)) * W(o, j);
        const double want = std::tanh(z);
        err = std::max(err, std::fabs(want - Y(o, i)) / (1 + std::fabs(want)));
      }
    }
    const std::string what = "dense_forward batch=" + std::to_string(batch) +
                             " d_in=" + std::to_string(d_in) + " d_out=" + std::to_string(d_out);
    all_ok &= hkfac::opencl_check::verdict(rc == 0 && err < 1e-4, what.c_str(), rc, err);
  }
  return all_ok ? 0 : 1;
}
