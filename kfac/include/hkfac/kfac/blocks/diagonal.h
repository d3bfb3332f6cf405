// Diagonal curvature blocks: NaiveDiagonal (any tag) and ScaleAndShiftDiagonal.
#pragma once

#include "hkfac/kfac/blocks/curvature_block.h"

namespace hkfac::kfac {

// The diagonal of the curvature, E[g ⊙ g] over per-example parameter gradients g (each batch
// contributing Σ_passes Σ_i g_i² / B, the diagonal_ema kernel). Inversion is elementwise,
// (d + γ)⁻¹ (the diagonal_matpower kernel), so any parameter can have one: it is the default for
// generic tags and for tags listed in patterns_to_skip or under register_only_generic.
class DiagonalBlock : public CurvatureBlock {
public:
  using CurvatureBlock::CurvatureBlock;
  Matrix diagonal() const; // the current estimate S / w (1 x dim)
  void update_inverse(float diagonal_weight) override;
  Eigen::MatrixXd full_curvature() const override;

protected:
  void reset() override;
  OwnState own_state() override;
  void accumulate(float ema_old, float ema_new, const BlockBatch &batch) override;
  bool statistics_fit(float ema_old, float ema_new, const BlockBatch &batch) const override;
  std::vector<Matrix> matpower(const std::vector<Matrix> &vec, int exp,
                               float diagonal_weight) const override;

private:
  Matrix sum_;
  Matrix inverse_diagonal_; // the estimate frozen at the last update_inverse
  bool have_inverse_ = false;
};

class NaiveDiagonal : public DiagonalBlock {
public:
  using DiagonalBlock::DiagonalBlock;
  std::string name() const override { return "NaiveDiagonal"; }
};

// Diagonal for a scale_and_shift tag: E[(x ⊙ dy)²] for the scale and E[dy²] for the shift.
class ScaleAndShiftDiagonal : public DiagonalBlock {
public:
  ScaleAndShiftDiagonal(const LayerTag &tag, const std::vector<ParamShape> &shapes);
  std::string name() const override { return "ScaleAndShiftDiagonal"; }
};

} // namespace hkfac::kfac
