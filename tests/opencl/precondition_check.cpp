// The Kronecker precondition generator's GPU schedule on OpenCL (scripts/opencl-check):
// U = A_inv V G_inv on awkward shapes against a double-precision loop, linked with the generated
// `kernel`.
#include <cmath>
#include <string>

#include "check_util.h"
#include "kernel.h"

using Halide::Runtime::Buffer;
using namespace hkfac::opencl_check;

int main() {
  const int shapes[][2] = {{1, 1}, {1, 7}, {7, 1}, {31, 250}, {129, 33}, {257, 7}};
  std::mt19937 rng(4);
  bool all_ok = true;
  for (const auto &s : shapes) {
    const int d_a = s[0], d_g = s[1];
    // Halide order: V and U are (dG, dA), columns first.
    Buffer<float> A(d_a, d_a), V(d_g, d_a), G(d_g, d_g), U(d_g, d_a);
    for (Buffer<float> *b : {&A, &V, &G})
      fill_random(*b, rng);
    const int rc = kernel(A, V, G, U);
    U.copy_to_host();
    const Mat want =
        product(product(rows_of(A), rows_of(V), d_a, d_a, d_g), rows_of(G), d_a, d_g, d_g);
    const double err = max_relative_error(want, U);
    const std::string what =
        "precondition dA=" + std::to_string(d_a) + " dG=" + std::to_string(d_g);
    all_ok &= verdict(rc == 0 && err < 1e-4, what.c_str(), rc, err);
  }
  return all_ok ? 0 : 1;
}
