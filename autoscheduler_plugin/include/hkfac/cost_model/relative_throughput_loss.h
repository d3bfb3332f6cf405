// The cost model's training loss as a K-FAC loss: squared error on throughput relative to the
// fastest schedule of a batch.
#pragma once

#include <string>

#include "hkfac/kfac/losses.h"

namespace hkfac::cost_model {

// For a batch of schedules of one pipeline with predicted runtimes p (B x 1) and measured
// runtimes t (the targets), r the fastest measured schedule:
//   loss_n = w · (1 / max(p_n / p_r, 1e-10) − t_r / t_n)²,
// the same L_rel the training kernel computes (SPEC-autoscheduler.md). The reference p_r couples
// the examples; the gradient includes that coupling exactly.
//
// Curvature: the loss is not a likelihood, so it has no samples (fisher_gradients is an error)
// and its Fisher and Hessian both mean the Gauss–Newton matrix H = 2w·JᵀJ of the residuals
// e_n = p_r/p_n − t_r/t_n (J = de/dp).
//  - multiply_fisher / multiply_hessian: H v exactly, reference coupling included (the exact
//    curvature products of the quadratic model and rho).
//  - the factors: row-wise, the square root of H's diagonal, 2w (p_r / p_n²)² for n ≠ r and
//    2w Σ_{n≠r} 1/p_n² for the reference. K-FAC's factors are sums of per-example outer
//    products, and H's exact square root √(2w)·Jᵀ has, in every column, example n's entry and
//    the reference's; summed over the columns, each example's squared entries are H's diagonal.
//    So these row-wise factors give every block exactly the statistics of ggn_exact with the
//    coupled square root, in one backward pass instead of one per schedule.
class RelativeThroughputLoss : public kfac::LossFunction {
public:
  RelativeThroughputLoss(const kfac::Matrix &predictions, const kfac::Matrix *runtimes,
                         float weight = 1.0f);
  std::string name() const override { return "relative_throughput"; }

  Eigen::VectorXd values_on(const kfac::Matrix &targets) const override;
  kfac::Matrix gradient_on(const kfac::Matrix &targets) const override;
  kfac::Matrix sample(const kfac::ExampleSeeds &seeds) const override;
  kfac::Matrix multiply_fisher(const kfac::Matrix &v) const override;
  kfac::Matrix multiply_fisher_factor(const kfac::Matrix &v) const override;

private:
  // Index of the fastest measured schedule; throws on non-positive or non-finite runtimes.
  Eigen::Index reference(const kfac::Matrix &runtimes) const;
  // Diagonal entry n of H, the Gauss–Newton matrix 2w·JᵀJ of the residuals e with respect to p.
  double curvature(Eigen::Index n, Eigen::Index r) const;
};

// L_rel summed over a batch, in double: the validation loss of a set of predictions.
double relative_throughput_loss(const Eigen::VectorXd &predictions,
                                const Eigen::VectorXd &runtimes);

} // namespace hkfac::cost_model
