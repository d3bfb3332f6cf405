// The relative-throughput loss: values, exact gradient, Gauss–Newton curvature and its factor.
#include "hkfac/cost_model/relative_throughput_loss.h"

#include <algorithm>
#include <cmath>

#include "hkfac/error.h"

namespace hkfac::cost_model {

namespace {

constexpr double kMinRatio = 1e-10;

// 1 / max(p / p_ref, 1e-10), and whether the guard is inactive (the value depends on p, p_ref).
double inverse_ratio(double p, double p_ref, bool *live) {
  const double ratio = p / p_ref;
  *live = ratio > kMinRatio;
  return 1.0 / std::max(ratio, kMinRatio);
}

} // namespace

RelativeThroughputLoss::RelativeThroughputLoss(const kfac::Matrix &predictions,
                                               const kfac::Matrix *runtimes, float weight)
    : LossFunction(predictions, runtimes, weight, "RelativeThroughputLoss") {
  if (predictions.cols() != 1) {
    throw Error("RelativeThroughputLoss: 'predictions' must have one column (one runtime per "
                "schedule), got " +
                std::to_string(predictions.cols()));
  }
  if (runtimes)
    reference(*runtimes);
}

Eigen::Index RelativeThroughputLoss::reference(const kfac::Matrix &runtimes) const {
  Eigen::Index r = 0;
  for (Eigen::Index n = 0; n < runtimes.rows(); ++n) {
    const float t = runtimes(n, 0);
    if (!(t > 0.0f) || !std::isfinite(t)) {
      throw Error("RelativeThroughputLoss: runtime of schedule " + std::to_string(n) +
                  " must be finite and > 0, got " + std::to_string(t));
    }
    if (t < runtimes(r, 0))
      r = n;
  }
  return r;
}

Eigen::VectorXd RelativeThroughputLoss::values_on(const kfac::Matrix &targets) const {
  check_targets(targets, "RelativeThroughputLoss::values_on");
  const Eigen::Index r = reference(targets);
  const double p_r = inputs_(r, 0), t_r = targets(r, 0);
  Eigen::VectorXd v(inputs_.rows());
  for (Eigen::Index n = 0; n < inputs_.rows(); ++n) {
    bool live;
    const double q = n == r ? 1.0 : inverse_ratio(inputs_(n, 0), p_r, &live);
    const double e = q - t_r / targets(n, 0);
    v(n) = weight_ * e * e;
  }
  return v;
}

kfac::Matrix RelativeThroughputLoss::gradient_on(const kfac::Matrix &targets) const {
  check_targets(targets, "RelativeThroughputLoss::gradient_on");
  const Eigen::Index r = reference(targets);
  const double p_r = inputs_(r, 0), t_r = targets(r, 0);
  Eigen::VectorXd g = Eigen::VectorXd::Zero(inputs_.rows());
  for (Eigen::Index n = 0; n < inputs_.rows(); ++n) {
    if (n == r)
      continue; // e_r = 1 - 1 whatever p_r is
    bool live;
    const double p = inputs_(n, 0);
    const double e = inverse_ratio(p, p_r, &live) - t_r / targets(n, 0);
    if (!live)
      continue;
    // e_n = p_r / p_n: d/dp_n = -p_r / p_n², d/dp_r = 1 / p_n.
    g(n) += 2.0 * weight_ * e * (-p_r / (p * p));
    g(r) += 2.0 * weight_ * e / p;
  }
  return g.cast<float>();
}

kfac::Matrix RelativeThroughputLoss::sample(const kfac::ExampleSeeds &) const {
  throw Error("RelativeThroughputLoss: not a likelihood, so it has no samples; use a ggn_* or "
              "*_exact estimation mode instead of fisher_gradients");
}

double RelativeThroughputLoss::curvature(Eigen::Index n, Eigen::Index r) const {
  const double p_r = inputs_(r, 0);
  bool live;
  if (n != r) {
    const double p = inputs_(n, 0);
    inverse_ratio(p, p_r, &live);
    return live ? 2.0 * weight_ * std::pow(p_r / (p * p), 2) : 0.0;
  }
  // The reference prediction enters every other residual: Σ_n (d e_n / d p_r)².
  double sum = 0.0;
  for (Eigen::Index k = 0; k < inputs_.rows(); ++k) {
    if (k == r)
      continue;
    const double p = inputs_(k, 0);
    inverse_ratio(p, p_r, &live);
    if (live)
      sum += 1.0 / (p * p);
  }
  return 2.0 * weight_ * sum;
}

kfac::Matrix RelativeThroughputLoss::multiply_fisher(const kfac::Matrix &v) const {
  check_vector(v, 1, "multiply_fisher");
  const Eigen::Index r = reference(targets());
  const double p_r = inputs_(r, 0);
  // 2w·Jᵀ(J v) with J = de/dp: row n of J (n ≠ r, guard inactive) is -p_r/p_n² at n and 1/p_n
  // at r, so the reference gathers every residual's term.
  Eigen::VectorXd out = Eigen::VectorXd::Zero(v.rows());
  for (Eigen::Index n = 0; n < v.rows(); ++n) {
    if (n == r)
      continue;
    const double p = inputs_(n, 0);
    bool live;
    inverse_ratio(p, p_r, &live);
    if (!live)
      continue;
    const double d_n = -p_r / (p * p), d_r = 1.0 / p;
    const double jv = d_n * v(n, 0) + d_r * v(r, 0);
    out(n) += 2.0 * weight_ * d_n * jv;
    out(r) += 2.0 * weight_ * d_r * jv;
  }
  return out.cast<float>();
}

kfac::Matrix RelativeThroughputLoss::multiply_fisher_factor(const kfac::Matrix &v) const {
  check_vector(v, 1, "multiply_fisher_factor");
  const Eigen::Index r = reference(targets());
  kfac::Matrix out(v.rows(), 1);
  for (Eigen::Index n = 0; n < v.rows(); ++n)
    out(n, 0) = static_cast<float>(std::sqrt(curvature(n, r)) * v(n, 0));
  return out;
}

double relative_throughput_loss(const Eigen::VectorXd &p, const Eigen::VectorXd &t) {
  if (p.size() != t.size() || p.size() == 0)
    throw Error("relative_throughput_loss: need as many predictions as runtimes (> 0)");
  Eigen::Index r;
  t.minCoeff(&r);
  double sum = 0.0;
  for (Eigen::Index n = 0; n < p.size(); ++n) {
    if (n == r)
      continue;
    bool live;
    const double e = inverse_ratio(p(n), p(r), &live) - t(r) / t(n);
    sum += e * e;
  }
  return sum;
}

} // namespace hkfac::cost_model
