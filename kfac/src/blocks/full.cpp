// Full-covariance blocks on the covariance_update kernel, inverted by Cholesky.
#include "hkfac/kfac/blocks/full.h"

#include <cmath>
#include <utility>

#include "hkfac/error.h"
#include "kernel_dispatch.h"
#include "spd_inverse.h"

namespace hkfac::kfac {

CurvatureBlock::OwnState FullBlock::own_state() {
  return {&have_inverse_,
          {{"sum", &sum_, dim(), dim(), false, true},
           {"inverse", &inverse_, dim(), dim(), true, true}}};
}

void FullBlock::reset() {
  sum_ = Matrix::Zero(dim(), dim());
  have_inverse_ = false;
}

Matrix FullBlock::covariance() const {
  return sum_.size() == static_cast<Eigen::Index>(dim()) * dim() ? Matrix(sum_ * inverse_weight())
                                                                 : Matrix::Zero(dim(), dim());
}

void FullBlock::accumulate(float ema_old, float ema_new, const BlockBatch &batch) {
  if (sum_.rows() != dim())
    reset();
  for_each_gradient_pass(ema_old, ema_new, batch, [&](const Matrix &g, float decay, float weight) {
    ops::covariance_update(sum_, g, decay, weight, false);
  });
}

bool FullBlock::statistics_fit(float ema_old, float ema_new, const BlockBatch &batch) const {
  return gradient_statistics_fit(ema_old, ema_new, batch, max_diagonal(sum_));
}

void FullBlock::update_inverse(float diagonal_weight) {
  if (!(diagonal_weight >= 0.0f) || !std::isfinite(diagonal_weight)) {
    fail("update_inverse: 'diagonal_weight' must be finite and >= 0");
  }
  Eigen::MatrixXd c = covariance().cast<double>();
  if (!c.allFinite())
    fail("update_inverse: the estimate is not finite");
  c.diagonal().array() += diagonal_weight;
  if (!spd_inverse(inverse_, std::move(c))) {
    fail_inverse("update_inverse: damped estimate is not positive definite (diagonal_weight " +
                 std::to_string(diagonal_weight) + " too small?)");
  }
  have_inverse_ = true;
}

std::vector<Matrix> FullBlock::matpower(const std::vector<Matrix> &vec, int exp,
                                        float diagonal_weight) const {
  const Matrix v = flatten(vec);
  Matrix u;
  if (exp == -1) {
    if (!have_inverse_)
      fail("multiply_matpower(-1): update_inverse was never called");
    ops::gemm(u, v, false, inverse_, false);
  } else {
    ops::gemm(u, v, false, covariance(), false);
    u += diagonal_weight * v;
  }
  return unflatten(u);
}

Eigen::MatrixXd FullBlock::full_curvature() const { return covariance().cast<double>(); }

ScaleAndShiftFull::ScaleAndShiftFull(const LayerTag &tag, const std::vector<ParamShape> &shapes)
    : FullBlock(tag, shapes) {
  if (tag.kind != TagKind::scale_and_shift) {
    throw Error("ScaleAndShiftFull: tag '" + tag.name + "' is " + tag_kind_name(tag.kind) +
                ", expected scale_and_shift");
  }
}

} // namespace hkfac::kfac
