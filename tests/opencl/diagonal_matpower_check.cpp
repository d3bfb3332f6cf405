// The diagonal matpower generator's GPU schedule on OpenCL (scripts/opencl-check): u = g·(d + γ)
// for power +1 and g / (d + γ) for -1, against a double-precision loop. Linked with the generated
// `kernel`.
#include <cmath>
#include <string>

#include "check_util.h"
#include "kernel.h"

using Halide::Runtime::Buffer;

int main() {
  std::mt19937 rng(7);
  bool all_ok = true;
  for (int p : {1, 7, 255, 256, 257, 1001, 4097}) {
    for (int power : {1, -1}) {
      Buffer<float> g(p), d(p), u(p);
      hkfac::opencl_check::fill_random(g, rng);
      std::uniform_real_distribution<float> positive(0.0f, 2.0f);
      for (int j = 0; j < p; j++)
        d(j) = positive(rng);
      d.set_host_dirty();
      const float gamma = 0.01f;
      const int rc = kernel(g, d, gamma, power, u);
      u.copy_to_host();
      double err = 0;
      for (int j = 0; j < p; j++) {
        const double damped = double(d(j)) + gamma;
        const double want = power > 0 ? g(j) * damped : g(j) / damped;
        err = std::max(err, std::fabs(want - u(j)) / (1 + std::fabs(want)));
      }
      const std::string what =
          "diagonal_matpower params=" + std::to_string(p) + " power=" + std::to_string(power);
      all_ok &= hkfac::opencl_check::verdict(rc == 0 && err < 1e-5, what.c_str(), rc, err);
    }
  }
  return all_ok ? 0 : 1;
}
