// The diagonal EMA generator's GPU schedule on OpenCL (scripts/opencl-check): d_out = 0.9 d_in +
// 0.1 Σ_k g(:, k)² over per-example gradient rows, against a double-precision loop. Linked with
// the generated `kernel`.
#include <cmath>
#include <string>

#include "check_util.h"
#include "kernel.h"

using Halide::Runtime::Buffer;

int main() {
  std::mt19937 rng(6);
  bool all_ok = true;
  for (int p : {1, 7, 129, 255, 256, 257, 1001, 2240}) {
    for (int examples : {1, 7, 129}) {
      Buffer<float> d_in(p), g(p, examples), d_out(p);
      hkfac::opencl_check::fill_random(d_in, rng);
      hkfac::opencl_check::fill_random(g, rng);
      const int rc = kernel(d_in, g, 0.9f, 0.1f, d_out);
      d_out.copy_to_host();
      double err = 0;
      for (int j = 0; j < p; j++) {
        double sum = 0;
        for (int k = 0; k < examples; k++)
          sum += double(g(j, k)) * g(j, k);
        const double want = 0.9 * d_in(j) + 0.1 * sum;
        err = std::max(err, std::fabs(want - d_out(j)) / (1 + std::fabs(want)));
      }
      const std::string what =
          "diagonal_ema params=" + std::to_string(p) + " examples=" + std::to_string(examples);
      all_ok &= hkfac::opencl_check::verdict(rc == 0 && err < 1e-5, what.c_str(), rc, err);
    }
  }
  return all_ok ? 0 : 1;
}
