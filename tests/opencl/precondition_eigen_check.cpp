// The eigen-route precondition generator's GPU schedule on OpenCL (scripts/opencl-check):
// U = Q_A [(Q_Aᵀ V Q_G) ⊘ (max(λ_A, 0) max(λ_G, 0)ᵀ + γ)] Q_Gᵀ, power -1 and +1 (which
// multiplies), against double-precision loops; linked with the generated `kernel`.
#include <cmath>
#include <string>

#include "check_util.h"
#include "kernel.h"

using Halide::Runtime::Buffer;

using namespace hkfac::opencl_check;

int main() {
  const int shapes[][2] = {{1, 1}, {1, 7}, {7, 1}, {31, 250}, {129, 33}};
  std::mt19937 rng(6);
  bool all_ok = true;
  for (const auto &s : shapes) {
    for (int power : {-1, 1}) {
      const int d_a = s[0], d_g = s[1];
      Buffer<float> QA(d_a, d_a), lA(d_a), V(d_g, d_a), QG(d_g, d_g), lG(d_g), U(d_g, d_a);
      for (Buffer<float> *b : {&QA, &lA, &V, &QG, &lG})
        fill_random(*b, rng);
      const float gamma = 0.7f;
      const int rc = kernel(QA, lA, V, QG, lG, gamma, power, U);
      U.copy_to_host();
      const Mat qa = rows_of(QA), qg = rows_of(QG);
      Mat w =
          product(product(transpose(qa, d_a, d_a), rows_of(V), d_a, d_a, d_g), qg, d_a, d_g, d_g);
      for (int i = 0; i < d_a; i++) {
        for (int j = 0; j < d_g; j++) {
          const double c = std::max(double(lA(i)), 0.0) * std::max(double(lG(j)), 0.0) + gamma;
          w[size_t(i) * d_g + j] *= power > 0 ? c : 1.0 / c;
        }
      }
      const Mat want =
          product(product(qa, w, d_a, d_a, d_g), transpose(qg, d_g, d_g), d_a, d_g, d_g);
      const double err = max_relative_error(want, U);
      const std::string what = "precondition_eigen dA=" + std::to_string(d_a) +
                               " dG=" + std::to_string(d_g) + " power=" + std::to_string(power);
      all_ok &= verdict(rc == 0 && err < 1e-4, what.c_str(), rc, err);
    }
  }
  return all_ok ? 0 : 1;
}
