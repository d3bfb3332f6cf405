// Runs one installed kernel and checks its result, proving the package is usable from outside.
#include <hkfac/kernels/diagonal.h>

#include <cmath>
#include <cstdio>

int main() {
  auto g = hkfac::make_vector<float>(33);
  auto d = hkfac::make_vector<float>(33);
  auto u = hkfac::make_vector<float>(33);
  for (int i = 0; i < 33; i++) {
    g(i) = float(i);
    d(i) = 1.0f;
  }
  hkfac::kernels::diagonal_matpower(u, g, d, 1.0f, -1, hkfac::Device::cpu);
  for (int i = 0; i < 33; i++) {
    if (std::fabs(u(i) - i / 2.0f) > 1e-6f) {
      std::printf("wrong result at %d: %f\n", i, u(i));
      return 1;
    }
  }
  std::printf("downstream ok (cuda %s)\n", hkfac::cuda_status().usable ? "usable" : "not usable");
  return 0;
}
