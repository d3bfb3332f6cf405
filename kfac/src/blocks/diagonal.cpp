// Diagonal blocks on the diagonal_ema / diagonal_matpower kernels.
#include "hkfac/kfac/blocks/diagonal.h"

#include "hkfac/error.h"
#include "ops.h"

namespace hkfac::kfac {

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
  const float per_example = ema_new / static_cast<float>(batch.batch_size);
  const Matrix no_inputs;
  float decay = ema_old;
  for (const Matrix &dy : batch.output_grads) {
    const Matrix g = per_example_gradients(tag(), batch.inputs ? *batch.inputs : no_inputs, dy);
    if (g.cols() != dim()) {
      fail("update_curvature_estimate: per-example gradients have " + std::to_string(g.cols()) +
           " columns, the block covers " + std::to_string(dim()) + " parameters");
    }
    ops::diagonal_ema(sum_, g, decay, per_example);
    decay = 1.0f;
  }
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
