// The gemm generator's GPU schedule on OpenCL (scripts/opencl-check): C <- 0.5 op(A) op(B) + 2 C
// on the gemm test's shapes against a double-precision loop. Usage: gemm_check TA TB (0 or 1),
// linked with the kernel generated for that transpose pair as `kernel`.
#include <cmath>
#include <cstdlib>
#include <string>

#include "check_util.h"
#include "kernel.h"

using Halide::Runtime::Buffer;

int main(int argc, char **argv) {
  if (argc != 3)
    return 2;
  const bool ta = std::atoi(argv[1]) != 0, tb = std::atoi(argv[2]) != 0;
  const int shapes[][3] = {{1, 1, 1},      {7, 129, 1},   {129, 1, 7},    {1, 7, 129},
                           {1001, 7, 129}, {7, 1001, 33}, {33, 7, 1001},  {129, 129, 129},
                           {1, 1001, 7},   {1001, 1, 7},  {257, 259, 263}};
  std::mt19937 rng(1);
  bool all_ok = true;
  for (const auto &s : shapes) {
    const int m = s[0], n = s[1], k = s[2];
    // Stored operands: op(A) is m x k, op(B) k x n (Halide order: columns first).
    Buffer<float> A = ta ? Buffer<float>(m, k) : Buffer<float>(k, m);
    Buffer<float> B = tb ? Buffer<float>(k, n) : Buffer<float>(n, k);
    Buffer<float> C(n, m), C0(n, m);
    hkfac::opencl_check::fill_random(A, rng);
    hkfac::opencl_check::fill_random(B, rng);
    hkfac::opencl_check::fill_random(C, rng);
    hkfac::copy_values(C0, C);
    const int rc = kernel(A, B, C, 0.5f, 2.0f, C);
    C.copy_to_host();
    double err = 0;
    for (int i = 0; i < m; i++) {
      for (int j = 0; j < n; j++) {
        double sum = 0;
        for (int q = 0; q < k; q++)
          sum += double(ta ? A(i, q) : A(q, i)) * double(tb ? B(q, j) : B(j, q));
        const double want = 0.5 * sum + 2.0 * C0(j, i);
        err = std::max(err, std::fabs(want - C(j, i)) / (1 + std::fabs(want)));
      }
    }
    const std::string what = "gemm ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) +
                             " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                             " depth=" + std::to_string(k);
    all_ok &= hkfac::opencl_check::verdict(rc == 0 && err < 1e-4, what.c_str(), rc, err);
  }
  return all_ok ? 0 : 1;
}
