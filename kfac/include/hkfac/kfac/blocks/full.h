// Full-covariance curvature blocks: NaiveFull (= DenseFull) and ScaleAndShiftFull.
#pragma once

#include "hkfac/kfac/blocks/curvature_block.h"

namespace hkfac::kfac {

// The full curvature block E[g gᵀ] over per-example parameter gradients g (the covariance_update
// kernel), inverted exactly by Cholesky of (C + γI). Memory and time grow as dim² and dim³, so it
// is for small layers only; it never guesses a structure, which makes it the reference the
// factored blocks are judged against.
class FullBlock : public CurvatureBlock {
public:
  using CurvatureBlock::CurvatureBlock;
  Matrix covariance() const; // the current estimate S / w
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
  Matrix inverse_;
  bool have_inverse_ = false;
};

class NaiveFull : public FullBlock {
public:
  using FullBlock::FullBlock;
  std::string name() const override { return "NaiveFull"; }
};

// Full covariance of [scale; shift] for a scale_and_shift tag (captures their correlation).
class ScaleAndShiftFull : public FullBlock {
public:
  ScaleAndShiftFull(const LayerTag &tag, const std::vector<ParamShape> &shapes);
  std::string name() const override { return "ScaleAndShiftFull"; }
};

} // namespace hkfac::kfac
