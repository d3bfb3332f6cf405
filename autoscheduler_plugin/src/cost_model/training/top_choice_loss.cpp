// The top-choice loss: values, exact gradient, Gauss–Newton curvature through the logits.
#include "hkfac/cost_model/top_choice_loss.h"

#include <algorithm>
#include <cmath>

#include "hkfac/error.h"

namespace hkfac::cost_model {

namespace {

constexpr double kMinPrediction = 1e-20;

} // namespace

TopChoiceLoss::TopChoiceLoss(const kfac::Matrix &predictions, const kfac::Matrix *runtimes,
                             float temperature, float weight)
    : LossFunction(predictions, runtimes, weight, "TopChoiceLoss"), temperature_(temperature) {
  if (predictions.cols() != 1) {
    throw Error("TopChoiceLoss: 'predictions' must have one column (one runtime per schedule), "
                "got " +
                std::to_string(predictions.cols()));
  }
  if (!(temperature > 0.0f) || !std::isfinite(temperature))
    throw Error("TopChoiceLoss: the temperature must be finite and > 0, got " +
                std::to_string(temperature));
  if (runtimes)
    top_probabilities(*runtimes, true);
}

Eigen::VectorXd TopChoiceLoss::logits(const kfac::Matrix &x, bool runtimes) const {
  Eigen::VectorXd z(x.rows());
  for (Eigen::Index n = 0; n < x.rows(); ++n) {
    double v = x(n, 0);
    if (runtimes && (!(v > 0.0) || !std::isfinite(v))) {
      throw Error("TopChoiceLoss: runtime of schedule " + std::to_string(n) +
                  " must be finite and > 0, got " + std::to_string(v));
    }
    if (!runtimes)
      v = std::max(v, kMinPrediction);
    z(n) = -std::log(v) / temperature_;
  }
  return z;
}

Eigen::VectorXd TopChoiceLoss::top_probabilities(const kfac::Matrix &x, bool runtimes) const {
  const Eigen::VectorXd z = logits(x, runtimes);
  // Shifted by the largest logit so that no exponential overflows.
  const Eigen::VectorXd e = (z.array() - z.maxCoeff()).exp();
  return e / e.sum();
}

double TopChoiceLoss::logit_slope(Eigen::Index n) const {
  const double p = inputs_(n, 0);
  return p > kMinPrediction ? -1.0 / (temperature_ * p) : 0.0;
}

Eigen::VectorXd TopChoiceLoss::values_on(const kfac::Matrix &targets) const {
  check_targets(targets, "TopChoiceLoss::values_on");
  const Eigen::VectorXd q = top_probabilities(targets, true);
  const Eigen::VectorXd z = logits(inputs_, false);
  const double log_sum = z.maxCoeff() + std::log((z.array() - z.maxCoeff()).exp().sum());
  return weight_ * (q.array() * (log_sum - z.array())).matrix();
}

kfac::Matrix TopChoiceLoss::gradient_on(const kfac::Matrix &targets) const {
  check_targets(targets, "TopChoiceLoss::gradient_on");
  const Eigen::VectorXd q = top_probabilities(targets, true);
  const Eigen::VectorXd p = top_probabilities(inputs_, false);
  kfac::Matrix g(inputs_.rows(), 1);
  for (Eigen::Index n = 0; n < inputs_.rows(); ++n)
    g(n, 0) = static_cast<float>(weight_ * (p(n) - q(n)) * logit_slope(n));
  return g;
}

kfac::Matrix TopChoiceLoss::sample(const kfac::ExampleSeeds &) const {
  throw Error("TopChoiceLoss: its targets are runtimes, not draws of a predictive distribution, "
              "so it has no samples; use a ggn_* or *_exact estimation mode instead of "
              "fisher_gradients");
}

kfac::Matrix TopChoiceLoss::multiply_fisher(const kfac::Matrix &v) const {
  check_vector(v, 1, "multiply_fisher");
  const Eigen::VectorXd p = top_probabilities(inputs_, false);
  Eigen::VectorXd u(v.rows());
  for (Eigen::Index n = 0; n < v.rows(); ++n)
    u(n) = logit_slope(n) * v(n, 0);
  const Eigen::VectorXd h = weight_ * (p.array() * u.array() - p.array() * p.dot(u)).matrix();
  kfac::Matrix out(v.rows(), 1);
  for (Eigen::Index n = 0; n < v.rows(); ++n)
    out(n, 0) = static_cast<float>(logit_slope(n) * h(n));
  return out;
}

kfac::Matrix TopChoiceLoss::multiply_fisher_factor(const kfac::Matrix &v) const {
  check_vector(v, 1, "multiply_fisher_factor");
  const Eigen::VectorXd p = top_probabilities(inputs_, false);
  kfac::Matrix out(v.rows(), 1);
  for (Eigen::Index n = 0; n < v.rows(); ++n) {
    const double diagonal = weight_ * p(n) * (1.0 - p(n)) * std::pow(logit_slope(n), 2);
    out(n, 0) = static_cast<float>(std::sqrt(diagonal) * v(n, 0));
  }
  return out;
}

} // namespace hkfac::cost_model
