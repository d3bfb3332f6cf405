// Diagonal blocks on the diagonal_ema / diagonal_matpower kernels.
#include "hkfac/kfac/blocks/diagonal.h"

#include "hkfac/error.h"
#include "kernel_dispatch.h"

namespace hkfac::kfac {

CurvatureBlock::OwnState DiagonalBlock::own_state() {
  return {&have_inverse_,
          {{"sum", &sum_, 1, dim(), false, true},
           {"inverse_diagonal", &inverse_diagonal_, 1, dim(), true, true}}};
}

void DiagonalBlock::reset() {
  sum_ = Matrix::Zero(1, dim());
  have_inverse_ = false;
}

Matrix DiagonalBlock::diagonal() const {
  return sum_.size() == dim() ? Matrix(sum_ * inverse_weight()) : Matrix::Zero(1, dim());
}

void DiagonalBlock::accumulate(float ema_old, float ema_new, const BlockBatch &batch) {
  if (sum_.size() != dim())
    reset();
  for_each_gradient_pass(ema_old, ema_new, batch, [&](const Matrix &g, float decay, float weight) {
    ops::diagonal_ema(sum_, g, decay, weight);
  });
}

bool DiagonalBlock::statistics_fit(float ema_old, float ema_new, const BlockBatch &batch) const {
  return gradient_statistics_fit(ema_old, ema_new, batch, max_abs(sum_));
}

void DiagonalBlock::update_inverse(float) {
  inverse_diagonal_ = diagonal();
  have_inverse_ = true;
}

std::vector<Matrix> DiagonalBlock::matpower(const std::vector<Matrix> &vec, int exp,
                                            float diagonal_weight) const {
  if (exp == -1 && !have_inverse_)
    fail("multiply_matpower(-1): update_inverse was never called");
  Matrix u = flatten(vec);
  ops::diagonal_matpower(u, u, exp == -1 ? inverse_diagonal_ : diagonal(), diagonal_weight, exp);
  return unflatten(u);
}

Eigen::MatrixXd DiagonalBlock::full_curvature() const {
  return diagonal().cast<double>().row(0).asDiagonal();
}

ScaleAndShiftDiagonal::ScaleAndShiftDiagonal(const LayerTag &tag,
                                             const std::vector<ParamShape> &shapes)
    : DiagonalBlock(tag, shapes) {
  if (tag.kind != TagKind::scale_and_shift) {
    throw Error("ScaleAndShiftDiagonal: tag '" + tag.name + "' is " + tag_kind_name(tag.kind) +
                ", expected scale_and_shift");
  }
}

} // namespace hkfac::kfac
