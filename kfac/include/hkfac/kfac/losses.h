// Per-example losses registered on a model's outputs, and the registry that collects them.
#pragma once

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "hkfac/kfac/example_seeds.h"
#include "hkfac/kfac/types.h"

namespace hkfac::kfac {

// A negative log-likelihood loss -w·log p(t | z) on the network output z (B x K), one value per
// example (never reduced over the batch).
//
// Besides value and gradient it exposes the two things the curvature estimator needs from the
// output side: samples from the predictive distribution p(· | z) (for fisher_gradients) and
// products with square roots of the output-space curvature — L_F with L_F L_Fᵀ = F (the Fisher
// of p with respect to z) and L_H with L_H L_Hᵀ = H (the Hessian of the loss with respect to z)
// — for the exact and curvature-propagation modes. All three losses here are exponential
// families in their natural parameters, so F = H, but the two entry points are kept apart so
// the estimator reads like the math and a future loss can differ.
//
// The weight w scales the loss; curvature products carry w (factors carry √w), so every
// estimation mode estimates the curvature of the weighted loss. Values omit constants that do
// not depend on z (so the squared-error loss is exactly ||t - z||²).
class LossFunction {
public:
  LossFunction(const Matrix &inputs, const Matrix *targets, float weight, const char *what);
  virtual ~LossFunction() = default;

  virtual std::string name() const = 0;
  const Matrix &inputs() const { return inputs_; }
  bool has_targets() const { return has_targets_; }
  const Matrix &targets() const; // throws hkfac::Error when none were registered
  float weight() const { return weight_; }
  Eigen::Index batch_size() const { return inputs_.rows(); }

  // Per-example values (B) and gradients d value_i / d z_i (B x K) at the registered targets.
  Eigen::VectorXd values() const { return values_on(targets()); }
  Matrix gradient() const { return gradient_on(targets()); }
  virtual Eigen::VectorXd values_on(const Matrix &targets) const = 0;
  virtual Matrix gradient_on(const Matrix &targets) const = 0;

  // Targets drawn from p(· | z), one row per example, row i from seeds.rng(i).
  virtual Matrix sample(const ExampleSeeds &seeds) const = 0;

  // Row-wise products with the output-space curvature (B x K -> B x K) and its square roots.
  // The square-root products take B x factor_dim() and return B x K.
  virtual int factor_dim() const { return static_cast<int>(inputs_.cols()); }
  virtual Matrix multiply_fisher(const Matrix &v) const = 0;
  virtual Matrix multiply_fisher_factor(const Matrix &v) const = 0;
  virtual Matrix multiply_hessian(const Matrix &v) const { return multiply_fisher(v); }
  virtual Matrix multiply_hessian_factor(const Matrix &v) const {
    return multiply_fisher_factor(v);
  }

protected:
  // The shape check, then (for targets other than the registered ones, which the derived
  // constructor checks) check_target_values.
  void check_targets(const Matrix &targets, const char *what) const;
  // The range a loss's targets must lie in; an hkfac::Error naming `what`, the loss, the value and
  // its row and column. Non-finite values pass: they make the loss non-finite, and the optimizer
  // rejects such a batch rather than throwing.
  virtual void check_target_values(const Matrix &, const char *) const {}
  void check_vector(const Matrix &v, Eigen::Index cols, const char *what) const;

  Matrix inputs_;
  Matrix targets_;
  bool has_targets_;
  float weight_;
};

// N(t; mean, variance·I): value w·||t - mean||² / (2·variance), gradient w·(mean - t)/variance,
// Fisher w/variance·I.
class NormalMeanNegativeLogProbLoss : public LossFunction {
public:
  NormalMeanNegativeLogProbLoss(const Matrix &mean, const Matrix *targets, float variance,
                                float weight);
  std::string name() const override { return "normal_predictive_distribution"; }
  float variance() const { return variance_; }
  Eigen::VectorXd values_on(const Matrix &targets) const override;
  Matrix gradient_on(const Matrix &targets) const override;
  Matrix sample(const ExampleSeeds &seeds) const override;
  Matrix multiply_fisher(const Matrix &v) const override;
  Matrix multiply_fisher_factor(const Matrix &v) const override;

private:
  float variance_;
};

// Softmax cross-entropy on logits; targets are class probabilities per row (one-hot labels, or
// soft labels): each in [0, 1], each row summing to 1 within kRowSumTolerance.
// Fisher = w·(diag p - p pᵀ), square root w^½·(diag √p - p √pᵀ).
class CategoricalLogitsNegativeLogProbLoss : public LossFunction {
public:
  CategoricalLogitsNegativeLogProbLoss(const Matrix &logits, const Matrix *targets, float weight);
  std::string name() const override { return "categorical_logits"; }
  Matrix probabilities() const;
  Eigen::VectorXd values_on(const Matrix &targets) const override;
  Matrix gradient_on(const Matrix &targets) const override;
  Matrix sample(const ExampleSeeds &seeds) const override;
  Matrix multiply_fisher(const Matrix &v) const override;
  Matrix multiply_fisher_factor(const Matrix &v) const override;

  // Loose enough for float probabilities of thousands of classes summed in any order.
  static constexpr double kRowSumTolerance = 1e-3;

protected:
  void check_target_values(const Matrix &targets, const char *what) const override;
};

// Independent Bernoulli per output (sigmoid cross-entropy on logits); targets in [0, 1].
// Fisher = w·diag(p(1-p)).
class MultiBernoulliNegativeLogProbLoss : public LossFunction {
public:
  MultiBernoulliNegativeLogProbLoss(const Matrix &logits, const Matrix *targets, float weight);
  std::string name() const override { return "multi_bernoulli_logits"; }
  Matrix probabilities() const;
  Eigen::VectorXd values_on(const Matrix &targets) const override;
  Matrix gradient_on(const Matrix &targets) const override;
  Matrix sample(const ExampleSeeds &seeds) const override;
  Matrix multiply_fisher(const Matrix &v) const override;
  Matrix multiply_fisher_factor(const Matrix &v) const override;

protected:
  void check_target_values(const Matrix &targets, const char *what) const override;
};

// The losses a value function registers on the model's outputs (kfac_ferminet_alpha's
// register_* functions). Several losses on the same output add up. Targets may be omitted when
// only curvature is needed (fisher_gradients samples its own); value and gradient then throw.
class LossRegistry {
public:
  void register_normal_predictive_distribution(const Matrix &mean, const Matrix *targets = nullptr,
                                               float variance = 0.5f, float weight = 1.0f);
  // = normal predictive distribution with variance 0.5: value ||t - prediction||².
  void register_squared_error_loss(const Matrix &prediction, const Matrix *targets = nullptr,
                                   float weight = 1.0f);
  void register_categorical_predictive_distribution(const Matrix &logits,
                                                    const Matrix *targets = nullptr,
                                                    float weight = 1.0f);
  void register_multi_bernoulli_predictive_distribution(const Matrix &logits,
                                                        const Matrix *targets = nullptr,
                                                        float weight = 1.0f);
  void add(std::unique_ptr<LossFunction> loss);

  const std::vector<std::unique_ptr<LossFunction>> &losses() const { return losses_; }
  bool empty() const { return losses_.empty(); }
  void clear() { losses_.clear(); }

  // Σ over losses of the per-example values (B) / gradients (B x K).
  Eigen::VectorXd total_values() const;
  Matrix total_gradient() const;

private:
  std::vector<std::unique_ptr<LossFunction>> losses_;
};

} // namespace hkfac::kfac
