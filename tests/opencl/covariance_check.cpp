// The covariance generator's GPU schedule on OpenCL (scripts/opencl-check): C <- 0.9 C + 0.1 X̄ᵀX̄
// from a symmetric C, against a double-precision loop, and the result exactly symmetric. Usage:
// covariance_check MIN_COLUMNS [upper], linked with the generated `kernel` (the tiled variant serves
// X of at least 32 columns, the untiled one narrower X). With `upper` the kernel is the tiled
// upper_only form: C's strictly lower triangle is NaN on entry, and the upper triangle is checked
// (mirrored into the lower before the comparison, which then also checks it).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "check_util.h"
#include "kernel.h"

using Halide::Runtime::Buffer;

int main(int argc, char **argv) {
  if (argc != 2 && !(argc == 3 && std::strcmp(argv[2], "upper") == 0))
    return 2;
  const int min_columns = std::atoi(argv[1]);
  const bool upper = argc == 3;
  std::mt19937 rng(2);
  bool all_ok = true;
  for (int d : {1, 7, 31, 32, 33, 63, 64, 129, 256, 257}) {
    if (d < min_columns)
      continue;
    for (int n : {1, 7, 128}) {
      for (int homogeneous : {0, 1}) {
        const int dc = d + homogeneous;
        Buffer<float> X(d, n), C(dc, dc), C0(dc, dc);
        hkfac::opencl_check::fill_random(X, rng);
        hkfac::opencl_check::fill_random_symmetric(C, rng);
        hkfac::copy_values(C0, C);
        for (int row = 0; row < dc && upper; row++) {
          for (int col = 0; col < row; col++)
            C(col, row) = std::numeric_limits<float>::quiet_NaN();
        }
        if (upper)
          C.set_host_dirty();
        const int rc = kernel(C, X, 0.9f, 0.1f, C);
        C.copy_to_host();
        for (int row = 0; row < dc && upper; row++) {
          for (int col = 0; col < row; col++)
            C(col, row) = C(row, col);
        }
        bool symmetric = true;
        const double err = hkfac::opencl_check::covariance_update_error(
            C0, C, n, [&](int r, int i) { return i < d ? double(X(i, r)) : 1.0; }, &symmetric);
        const std::string what = std::string(upper ? "covariance upper" : "covariance") +
                                 " d=" + std::to_string(d) + " n=" + std::to_string(n) +
                                 " homogeneous=" + std::to_string(homogeneous) +
                                 (symmetric ? "" : " NOT SYMMETRIC");
        all_ok &=
            hkfac::opencl_check::verdict(rc == 0 && err < 1e-4 && symmetric, what.c_str(), rc, err);
      }
    }
  }
  return all_ok ? 0 : 1;
}
