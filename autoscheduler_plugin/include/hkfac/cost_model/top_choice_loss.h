// A training loss on which schedule of a batch is fastest: the cross-entropy between the measured
// and the predicted "top choice" distributions (ListNet's top-one probabilities).
#pragma once

#include <string>

#include "hkfac/kfac/losses.h"

namespace hkfac::cost_model {

// For a batch of schedules of one pipeline with predicted runtimes p (B x 1) and measured
// runtimes t (the targets), at temperature τ in log-runtime:
//   z_n = -log(p_n) / τ,  Q = softmax(-log(t) / τ),  P = softmax(z),
//   loss = w · Σ_n -Q_n log P_n   (example n's value is its term).
// Q puts its mass on the fastest schedules (one 2x slower than the fastest weighs 2^(-1/τ) of
// it), so the loss is about the top of the ranking, where the search picks: L_rel squares
// throughput errors of every schedule alike, and pair counts treat a wrong pair at the top as one
// of hundreds. The gradient is w·(P_n - Q_n) · dz_n/dp_n = -w·(P_n - Q_n) / (τ p_n).
//
// Curvature: the Gauss–Newton matrix through the logits, H = Jᵀ·w(diag(P) - P Pᵀ)·J with
// J = diag(-1/(τ p)) (the softmax cross-entropy's Hessian in z; the curvature of log p itself is
// left out, which keeps H positive semi-definite and equal to the Hessian where P = Q). The
// factors are row-wise, the square root of H's diagonal, for the reason RelativeThroughputLoss
// gives: K-FAC sums per-example outer products, which see only each example's squared entries of
// a square root of H, and those sum to H's diagonal.
//
// Predictions at or below 1e-20 are held there (no gradient or curvature through them), so a
// batch never takes the log of a non-positive number.
class TopChoiceLoss : public kfac::LossFunction {
public:
  TopChoiceLoss(const kfac::Matrix &predictions, const kfac::Matrix *runtimes, float temperature,
                float weight = 1.0f);
  std::string name() const override { return "top_choice"; }

  Eigen::VectorXd values_on(const kfac::Matrix &targets) const override;
  kfac::Matrix gradient_on(const kfac::Matrix &targets) const override;
  kfac::Matrix sample(const kfac::ExampleSeeds &seeds) const override;
  kfac::Matrix multiply_fisher(const kfac::Matrix &v) const override;
  kfac::Matrix multiply_fisher_factor(const kfac::Matrix &v) const override;

private:
  // -log(x) / τ in double; throws on non-positive or non-finite runtimes when `runtimes`
  // (predictions are floored instead).
  Eigen::VectorXd logits(const kfac::Matrix &x, bool runtimes) const;
  // softmax(logits(x)) over the batch.
  Eigen::VectorXd top_probabilities(const kfac::Matrix &x, bool runtimes) const;
  // dz_n/dp_n, 0 where the prediction is floored.
  double logit_slope(Eigen::Index n) const;

  double temperature_;
};

} // namespace hkfac::cost_model
