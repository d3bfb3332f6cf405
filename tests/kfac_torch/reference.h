// Brute-force references for the kfac_torch tests, in double precision with plain torch ops:
// factors from explicit (homogeneous) inputs and per-example gradients, pi-adjusted damping
// restated from SPEC-kfac.md, and Kronecker inverses formed as dense matrices and solved.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "hkfac/kfac/types.h"

namespace hkfac::kfac_torch::testref {

// Same results on every run and thread count.
inline void deterministic(uint64_t seed = 0) {
  torch::manual_seed(seed);
  torch::set_num_threads(1);
}

// X̄ᵀX̄ / n over rows (with a column of ones appended when `homogeneous`), in double.
inline torch::Tensor covariance(const torch::Tensor &rows, bool homogeneous, double n) {
  torch::Tensor x = rows.to(torch::kDouble);
  if (homogeneous)
    x = torch::cat({x, torch::ones({x.size(0), 1}, torch::kDouble)}, 1);
  return x.t().mm(x) / n;
}

struct Damped {
  torch::Tensor A, G;
};
// SPEC-kfac.md's pi-adjusted damping, general case: π = sqrt((tr A/dim A) / (tr G/dim G)),
// A + π√γ I and G + (√γ/π) I.
inline Damped pi_damped(const torch::Tensor &A, const torch::Tensor &G, double gamma) {
  const double pi =
      std::sqrt((A.trace().item<double>() / A.size(0)) / (G.trace().item<double>() / G.size(0)));
  return {A + pi * std::sqrt(gamma) * torch::eye(A.size(0), torch::kDouble),
          G + std::sqrt(gamma) / pi * torch::eye(G.size(0), torch::kDouble)};
}

// U with vec(U) = M⁻¹ vec(V), vec the row-major flattening of V (rows x cols) and M dense.
inline torch::Tensor solve_flat(const torch::Tensor &M, const torch::Tensor &V) {
  const torch::Tensor v = V.to(torch::kDouble).reshape({-1, 1});
  return torch::linalg_solve(M, v).reshape(V.sizes());
}

// (G ⊗ A)⁻¹ vec(V) for V (dim G x dim A): the K-FAC step on a torch-oriented gradient.
inline torch::Tensor kron_solve(const torch::Tensor &G, const torch::Tensor &A,
                                const torch::Tensor &V) {
  return solve_flat(torch::kron(G, A), V);
}

// (G ⊗ A + γI)⁻¹ vec(V): the eigen route's exact damping.
inline torch::Tensor kron_solve_exact(const torch::Tensor &G, const torch::Tensor &A, double gamma,
                                      const torch::Tensor &V) {
  const torch::Tensor K = torch::kron(G, A);
  return solve_flat(K + gamma * torch::eye(K.size(0), torch::kDouble), V);
}

inline kfac::Matrix to_matrix(const torch::Tensor &t) {
  const torch::Tensor c = t.to(torch::kFloat).contiguous().reshape({t.size(0), -1});
  kfac::Matrix m(c.size(0), c.size(1));
  std::copy(c.data_ptr<float>(), c.data_ptr<float>() + c.numel(), m.data());
  return m;
}

inline torch::Tensor to_tensor(const kfac::Matrix &m) {
  torch::Tensor t = torch::empty({m.rows(), m.cols()}, torch::kFloat);
  std::copy(m.data(), m.data() + m.size(), t.data_ptr<float>());
  return t;
}

// max |a - b| <= tol · max(1, max |b|).
inline ::testing::AssertionResult near(const torch::Tensor &a, const torch::Tensor &b, double tol) {
  if (a.sizes() != b.sizes()) {
    return ::testing::AssertionFailure() << "shapes differ: " << a.sizes() << " vs " << b.sizes();
  }
  const torch::Tensor ad = a.to(torch::kDouble), bd = b.to(torch::kDouble);
  const double err = (ad - bd).abs().max().item<double>();
  const double scale = std::max(1.0, bd.abs().max().item<double>());
  if (err <= tol * scale)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "max |difference| " << err << " > " << tol << " x " << scale;
}

} // namespace hkfac::kfac_torch::testref
