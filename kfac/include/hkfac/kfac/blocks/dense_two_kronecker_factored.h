// DenseTwoKroneckerFactored: the K-FAC block of a dense layer, F ≈ A ⊗ G.
#pragma once

#include "hkfac/kfac/blocks/curvature_block.h"

namespace hkfac::kfac {

// The two damped factors whose Kronecker product stands in for A ⊗ G + γI.
//
// General case — pi-adjusted damping (Martens & Grosse 2015, sec. 6.3): with
// π = sqrt((tr A / dim A) / (tr G / dim G)), A_d = A + π√γ I and G_d = G + (√γ/π) I; π splits the
// damping so that each factor is damped in proportion to its own scale. Degenerate cases, where
// the exact answer is cheap and the split would be arbitrary or undefined:
//  - tr A · tr G = 0: the estimate is zero, so A_d = G_d = √γ I (together γI, never NaN);
//  - both factors 1 x 1: A_d = [a·g + γ], G_d = [1];
//  - one factor a scalar s: all damping goes to the other, A_d = [s], G_d = G + (γ/s) I
//    (a G + γI = a (G + γ/a I) exactly), and symmetrically.
struct DampedFactors {
  Eigen::MatrixXd A, G;
  double pi = 1.0;
};
DampedFactors pi_adjusted_damped_factors(Eigen::MatrixXd A, Eigen::MatrixXd G,
                                         double diagonal_weight);

// The dense layer block. Its parameters are W (d_in x d_out) and optionally b; stacked, they form
// V = [W; b] ((d_in+1) x d_out), and since row-major flattening gives (A ⊗ G) vec(V) =
// vec(A V G), every product is a pair of small matrix multiplies (the kron_precondition kernel).
//
// Factors: A = E[x̄ x̄ᵀ] over the homogeneous inputs x̄ = [x; 1] (bias) and G = E[ds dsᵀ] over the
// per-example pre-activation gradients, each batch contributing X̄ᵀX̄ / B and Σ_passes DSᵀDS / B
// (the covariance_update kernel).
//
// Inverse: pi-adjusted damped factors, each inverted by Cholesky (factorised in double, L⁻¹ and
// L⁻ᵀL⁻¹ formed in float), the preconditioned gradient being A_d⁻¹ V G_d⁻¹. With
// use_exact_inverses the block instead keeps the eigendecompositions of A and G and applies
// (A ⊗ G + γI)⁻¹ exactly (eigenvalues clipped at 0); a non-finite factor is reported before the
// decomposition.
class DenseTwoKroneckerFactored : public CurvatureBlock {
public:
  DenseTwoKroneckerFactored(const LayerTag &tag, const std::vector<ParamShape> &shapes,
                            const BlockOptions &options);
  std::string name() const override { return "DenseTwoKroneckerFactored"; }

  // The current factor estimates (S / w); for conv2d tags factor_a() includes the factor T.
  Matrix factor_a() const;
  Matrix factor_g() const;

  void update_inverse(float diagonal_weight) override;
  Eigen::MatrixXd full_curvature() const override;

protected:
  DenseTwoKroneckerFactored(const LayerTag &tag, const std::vector<ParamShape> &shapes,
                            const BlockOptions &options, TagKind expected);
  void reset() override;
  OwnState own_state() override;
  void accumulate(float ema_old, float ema_new, const BlockBatch &batch) override;
  bool statistics_fit(float ema_old, float ema_new, const BlockBatch &batch) const override;
  std::vector<Matrix> matpower(const std::vector<Matrix> &vec, int exp,
                               float diagonal_weight) const override;

private:
  Matrix stack(const std::vector<Matrix> &vec) const;
  std::vector<Matrix> unstack(Matrix &&v) const;

  BlockOptions options_;
  int d_in_, d_out_;
  Matrix a_sum_, g_sum_;
  bool have_inverse_ = false;
  Matrix a_inv_, g_inv_;                   // Cholesky route
  Matrix q_a_, lambda_a_, q_g_, lambda_g_; // eigen route
};

// Conv2DTwoKroneckerFactored (KFC, Grosse & Martens 2016): the conv layer is a dense layer over
// its T input patches per example, so the block is the dense one fed with B·T rows:
// A = E[x̄ x̄ᵀ] over patches (+1 for the bias), G = E[ds dsᵀ] over output locations (both averaged
// over the B·T rows), and, assuming spatially uncorrelated derivatives, F ≈ T·(A ⊗ G).
class Conv2DTwoKroneckerFactored : public DenseTwoKroneckerFactored {
public:
  Conv2DTwoKroneckerFactored(const LayerTag &tag, const std::vector<ParamShape> &shapes,
                             const BlockOptions &options)
      : DenseTwoKroneckerFactored(tag, shapes, options, TagKind::conv2d) {}
  std::string name() const override { return "Conv2DTwoKroneckerFactored"; }
};

} // namespace hkfac::kfac
