// The per-example losses and their registry.
#include "hkfac/kfac/losses.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "hkfac/error.h"
#include "parallel_chunks.h"

namespace hkfac::kfac {
namespace {

void check_target_shape(const Matrix &inputs, const Matrix &targets, const char *what) {
  if (targets.rows() != inputs.rows() || targets.cols() != inputs.cols()) {
    throw Error(std::string(what) + ": 'targets' must be " + std::to_string(inputs.rows()) + " x " +
                std::to_string(inputs.cols()) + " like the output, got " +
                std::to_string(targets.rows()) + " x " + std::to_string(targets.cols()));
  }
}

// Shortest round-trip form, so an error shows the value the caller passed (-2, not -2.000000).
std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

[[noreturn]] void target_out_of_range(const char *what, const std::string &loss, Eigen::Index row,
                                      Eigen::Index col, float value, const char *range) {
  throw Error(std::string(what) + ": " + loss + " target (row " + std::to_string(row) +
              ", column " + std::to_string(col) + ") is " + number(value) + "; " + range);
}

} // namespace

LossFunction::LossFunction(const Matrix &inputs, const Matrix *targets, float weight,
                           const char *what)
    : inputs_(inputs), has_targets_(targets != nullptr), weight_(weight) {
  if (inputs.size() == 0)
    throw Error(std::string(what) + ": the output must not be empty");
  if (!(weight >= 0.0f) || !std::isfinite(weight)) {
    throw Error(std::string(what) + ": 'weight' must be finite and >= 0, got " +
                std::to_string(weight));
  }
  // The values are the derived constructor's to check: its override is not callable from here.
  if (targets) {
    check_target_shape(inputs_, *targets, what);
    targets_ = *targets;
  }
}

const Matrix &LossFunction::targets() const {
  if (!has_targets_)
    throw Error(name() + ": no targets were registered with this loss");
  return targets_;
}

void LossFunction::check_targets(const Matrix &targets, const char *what) const {
  check_target_shape(inputs_, targets, what);
  if (&targets != &targets_)
    check_target_values(targets, what);
}

void LossFunction::check_vector(const Matrix &v, Eigen::Index cols, const char *what) const {
  if (v.rows() != inputs_.rows() || v.cols() != cols) {
    throw Error(name() + "::" + what + ": 'v' must be " + std::to_string(inputs_.rows()) + " x " +
                std::to_string(cols) + ", got " + std::to_string(v.rows()) + " x " +
                std::to_string(v.cols()));
  }
}

NormalMeanNegativeLogProbLoss::NormalMeanNegativeLogProbLoss(const Matrix &mean,
                                                             const Matrix *targets, float variance,
                                                             float weight)
    : LossFunction(mean, targets, weight, "register_normal_predictive_distribution"),
      variance_(variance) {
  if (!(variance > 0.0f) || !std::isfinite(variance)) {
    throw Error("register_normal_predictive_distribution: 'variance' must be finite and > 0, "
                "got " +
                std::to_string(variance));
  }
}

Eigen::VectorXd NormalMeanNegativeLogProbLoss::values_on(const Matrix &targets) const {
  check_targets(targets, "normal values_on");
  const Eigen::MatrixXd diff = (inputs_ - targets).cast<double>();
  return diff.rowwise().squaredNorm() * (weight_ / (2.0 * variance_));
}

Matrix NormalMeanNegativeLogProbLoss::gradient_on(const Matrix &targets) const {
  check_targets(targets, "normal gradient_on");
  return (inputs_ - targets) * (weight_ / variance_);
}

Matrix NormalMeanNegativeLogProbLoss::sample(const ExampleSeeds &seeds) const {
  Matrix t = inputs_;
  for (Eigen::Index i = 0; i < t.rows(); ++i) {
    // A distribution per row: std::normal_distribution keeps a second draw for its next call.
    std::normal_distribution<float> n(0.0f, std::sqrt(variance_));
    ExampleRng rng = seeds.rng(i);
    for (Eigen::Index k = 0; k < t.cols(); ++k)
      t(i, k) += n(rng);
  }
  return t;
}

Matrix NormalMeanNegativeLogProbLoss::multiply_fisher(const Matrix &v) const {
  check_vector(v, inputs_.cols(), "multiply_fisher");
  return v * (weight_ / variance_);
}

Matrix NormalMeanNegativeLogProbLoss::multiply_fisher_factor(const Matrix &v) const {
  check_vector(v, inputs_.cols(), "multiply_fisher_factor");
  return v * std::sqrt(weight_ / variance_);
}

CategoricalLogitsNegativeLogProbLoss::CategoricalLogitsNegativeLogProbLoss(const Matrix &logits,
                                                                           const Matrix *targets,
                                                                           float weight)
    : LossFunction(logits, targets, weight, "register_categorical_predictive_distribution") {
  if (targets)
    check_target_values(targets_, "register_categorical_predictive_distribution");
}

void CategoricalLogitsNegativeLogProbLoss::check_target_values(const Matrix &targets,
                                                               const char *what) const {
  // Outside [0, 1], or rows not summing to 1, -Σ t log softmax(z) is no cross-entropy and can be
  // driven below zero.
  for (Eigen::Index r = 0; r < targets.rows(); ++r) {
    double sum = 0.0;
    bool finite = true;
    for (Eigen::Index c = 0; c < targets.cols(); ++c) {
      const float t = targets(r, c);
      if (!std::isfinite(t)) {
        finite = false;
        continue;
      }
      if (!(t >= 0.0f && t <= 1.0f)) {
        target_out_of_range(what, name(), r, c, t,
                            "targets are class probabilities, each in [0, 1]");
      }
      sum += t;
    }
    if (finite && !(std::abs(sum - 1.0) <= kRowSumTolerance)) {
      throw Error(std::string(what) + ": " + name() + " targets of row " + std::to_string(r) +
                  " sum to " + number(sum) + "; each row must be class probabilities summing " +
                  "to 1 (within " + number(kRowSumTolerance) + ")");
    }
  }
}

Matrix CategoricalLogitsNegativeLogProbLoss::probabilities() const {
  Matrix p = inputs_.colwise() - inputs_.rowwise().maxCoeff();
  p = p.array().exp().matrix();
  return p.array().colwise() / p.rowwise().sum().array();
}

Eigen::VectorXd CategoricalLogitsNegativeLogProbLoss::values_on(const Matrix &targets) const {
  check_targets(targets, "categorical values_on");
  const Eigen::MatrixXd z = inputs_.cast<double>();
  const Eigen::VectorXd m = z.rowwise().maxCoeff();
  const Eigen::VectorXd lse = m.array() + (z.colwise() - m).array().exp().rowwise().sum().log();
  const Eigen::MatrixXd t = targets.cast<double>();
  // -Σ t log softmax(z) = Σt·lse - Σ t z
  return weight_ * (t.rowwise().sum().cwiseProduct(lse) - t.cwiseProduct(z).rowwise().sum());
}

Matrix CategoricalLogitsNegativeLogProbLoss::gradient_on(const Matrix &targets) const {
  check_targets(targets, "categorical gradient_on");
  const Matrix p = probabilities();
  return weight_ * (Matrix(p.array().colwise() * targets.rowwise().sum().array()) - targets);
}

Matrix CategoricalLogitsNegativeLogProbLoss::sample(const ExampleSeeds &seeds) const {
  const Matrix p = probabilities();
  Matrix t = Matrix::Zero(p.rows(), p.cols());
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (Eigen::Index i = 0; i < p.rows(); ++i) {
    ExampleRng rng = seeds.rng(i);
    const float r = u(rng);
    float acc = 0.0f;
    Eigen::Index k = 0;
    for (; k + 1 < p.cols(); ++k) {
      acc += p(i, k);
      if (r < acc)
        break;
    }
    t(i, k) = 1.0f;
  }
  return t;
}

Matrix CategoricalLogitsNegativeLogProbLoss::multiply_fisher(const Matrix &v) const {
  check_vector(v, inputs_.cols(), "multiply_fisher");
  const Matrix p = probabilities();
  const Eigen::VectorXf pv = p.cwiseProduct(v).rowwise().sum();
  return weight_ * (p.cwiseProduct(v) - Matrix(p.array().colwise() * pv.array()));
}

Matrix CategoricalLogitsNegativeLogProbLoss::multiply_fisher_factor(const Matrix &v) const {
  // L = diag(√p) - p √pᵀ satisfies L Lᵀ = diag(p) - p pᵀ because Σp = 1.
  check_vector(v, inputs_.cols(), "multiply_fisher_factor");
  const Matrix p = probabilities();
  const Matrix s = p.cwiseSqrt();
  const Eigen::VectorXf sv = s.cwiseProduct(v).rowwise().sum();
  return std::sqrt(weight_) * (s.cwiseProduct(v) - Matrix(p.array().colwise() * sv.array()));
}

MultiBernoulliNegativeLogProbLoss::MultiBernoulliNegativeLogProbLoss(const Matrix &logits,
                                                                     const Matrix *targets,
                                                                     float weight)
    : LossFunction(logits, targets, weight, "register_multi_bernoulli_predictive_distribution") {
  if (targets)
    check_target_values(targets_, "register_multi_bernoulli_predictive_distribution");
}

void MultiBernoulliNegativeLogProbLoss::check_target_values(const Matrix &targets,
                                                            const char *what) const {
  // Outside [0, 1] the cross-entropy is unbounded below in the logits. The range first, in two
  // vectorised reductions (NaN, which the loop allows, may or may not take part; an infinity,
  // allowed too, goes on to the exact loop), as this runs on every batch (see
  // docs/RESULTS.md#step-overheads).
  if (targets.size() == 0 || (targets.minCoeff() >= 0.0f && targets.maxCoeff() <= 1.0f))
    return;
  for (Eigen::Index r = 0; r < targets.rows(); ++r) {
    for (Eigen::Index c = 0; c < targets.cols(); ++c) {
      const float t = targets(r, c);
      if (std::isfinite(t) && !(t >= 0.0f && t <= 1.0f))
        target_out_of_range(what, name(), r, c, t, "targets must be in [0, 1]");
    }
  }
}

Matrix MultiBernoulliNegativeLogProbLoss::probabilities() const {
  return (1.0f / (1.0f + (-inputs_.array()).exp())).matrix();
}

Eigen::VectorXd MultiBernoulliNegativeLogProbLoss::values_on(const Matrix &targets) const {
  check_targets(targets, "multi_bernoulli values_on");
  // Per example, Σ_k softplus(z_k) - t_k z_k in double, written to stay finite for large |z|.
  // Its exp and log1p are the dearest part of a forward pass outside the kernels (an Adam step
  // on the Fashion-MNIST autoencoder computes 100K of them), and examples are independent, so
  // ranges of rows run on the kernels' thread pool; each row sums in column order.
  Eigen::VectorXd out(inputs_.rows());
  const Eigen::Index cols = inputs_.cols();
  detail::for_row_ranges(inputs_.rows(), cols, [&](Eigen::Index first, Eigen::Index end) {
    for (Eigen::Index r = first; r < end; ++r) {
      const float *z = inputs_.row(r).data(), *t = targets.row(r).data();
      double sum = 0.0;
      for (Eigen::Index k = 0; k < cols; ++k) {
        const double zk = z[k];
        sum += std::max(zk, 0.0) - double(t[k]) * zk + std::log1p(std::exp(-std::abs(zk)));
      }
      out[r] = weight_ * sum;
    }
  });
  return out;
}

Matrix MultiBernoulliNegativeLogProbLoss::gradient_on(const Matrix &targets) const {
  check_targets(targets, "multi_bernoulli gradient_on");
  return weight_ * (probabilities() - targets);
}

Matrix MultiBernoulliNegativeLogProbLoss::sample(const ExampleSeeds &seeds) const {
  const Matrix p = probabilities();
  Matrix t(p.rows(), p.cols());
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (Eigen::Index i = 0; i < p.rows(); ++i) {
    ExampleRng rng = seeds.rng(i);
    for (Eigen::Index k = 0; k < p.cols(); ++k)
      t(i, k) = u(rng) < p(i, k) ? 1.0f : 0.0f;
  }
  return t;
}

Matrix MultiBernoulliNegativeLogProbLoss::multiply_fisher(const Matrix &v) const {
  check_vector(v, inputs_.cols(), "multiply_fisher");
  const Matrix p = probabilities();
  return weight_ * v.cwiseProduct(Matrix(p.array() * (1.0f - p.array())));
}

Matrix MultiBernoulliNegativeLogProbLoss::multiply_fisher_factor(const Matrix &v) const {
  check_vector(v, inputs_.cols(), "multiply_fisher_factor");
  const Matrix p = probabilities();
  return std::sqrt(weight_) * v.cwiseProduct(Matrix((p.array() * (1.0f - p.array())).sqrt()));
}

void LossRegistry::register_normal_predictive_distribution(const Matrix &mean,
                                                           const Matrix *targets, float variance,
                                                           float weight) {
  add(std::make_unique<NormalMeanNegativeLogProbLoss>(mean, targets, variance, weight));
}

void LossRegistry::register_squared_error_loss(const Matrix &prediction, const Matrix *targets,
                                               float weight) {
  add(std::make_unique<NormalMeanNegativeLogProbLoss>(prediction, targets, 0.5f, weight));
}

void LossRegistry::register_categorical_predictive_distribution(const Matrix &logits,
                                                                const Matrix *targets,
                                                                float weight) {
  add(std::make_unique<CategoricalLogitsNegativeLogProbLoss>(logits, targets, weight));
}

void LossRegistry::register_multi_bernoulli_predictive_distribution(const Matrix &logits,
                                                                    const Matrix *targets,
                                                                    float weight) {
  add(std::make_unique<MultiBernoulliNegativeLogProbLoss>(logits, targets, weight));
}

void LossRegistry::add(std::unique_ptr<LossFunction> loss) {
  if (!loss)
    throw Error("LossRegistry::add: 'loss' is null");
  if (!losses_.empty() && (loss->inputs().rows() != losses_[0]->inputs().rows() ||
                           loss->inputs().cols() != losses_[0]->inputs().cols())) {
    throw Error("LossRegistry: every loss must be registered on the model output (" +
                std::to_string(losses_[0]->inputs().rows()) + " x " +
                std::to_string(losses_[0]->inputs().cols()) + "); '" + loss->name() + "' is " +
                std::to_string(loss->inputs().rows()) + " x " +
                std::to_string(loss->inputs().cols()));
  }
  losses_.push_back(std::move(loss));
}

Eigen::VectorXd LossRegistry::total_values() const {
  if (losses_.empty())
    throw Error("LossRegistry: no loss was registered");
  Eigen::VectorXd v = Eigen::VectorXd::Zero(losses_[0]->batch_size());
  for (const auto &l : losses_)
    v += l->values();
  return v;
}

Matrix LossRegistry::total_gradient() const {
  if (losses_.empty())
    throw Error("LossRegistry: no loss was registered");
  Matrix g = Matrix::Zero(losses_[0]->inputs().rows(), losses_[0]->inputs().cols());
  for (const auto &l : losses_)
    g += l->gradient();
  return g;
}

} // namespace hkfac::kfac
