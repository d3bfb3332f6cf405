// The interface every curvature block implements, and the factory that picks a block per tag.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "hkfac/error.h"
#include "hkfac/kfac/model.h"

namespace hkfac::kfac {

// What one curvature estimation produced for a tag: the forward's recorded inputs and one
// per-example output-gradient matrix per backward pass (the exact modes run one pass per output
// coordinate; the others one). The curvature contribution of the batch is
// Σ_passes (per-example statistic) / batch_size. Conv2d records hold batch_size·locations rows.
struct BlockBatch {
  const Matrix *inputs = nullptr;
  std::vector<Matrix> output_grads;
  int batch_size = 0;
};

// What update_inverse throws when a damped estimate cannot be inverted: the Cholesky
// factorisation found it not positive definite (a float estimate's rounding can dip below the
// damping's reach), or the eigensolver did not converge. More damping may cure it, so the
// optimizer rejects the step and raises the damping instead of ending the run.
class CurvatureInverseError : public Error {
public:
  using Error::Error;
};

// A block of the block-diagonal curvature approximation: the curvature of one tagged layer's
// parameters, estimated as a weighted moving average and inverted with damping.
//
// The moving average is kept unnormalised, as in the spec's Math section: a weight w and a sum S
// updated by w <- ema_old·w + ema_new and S <- ema_old·S + ema_new·X_batch, the estimate being
// S / w. That makes burn-in (ema_old = 1, ema_new = 1/n: a plain mean over n batches) and normal
// steps (ema_old = curvature_ema, ema_new = 1) one operation, and keeps early estimates unbiased.
//
// Vectors are lists of matrices shaped like the tag's parameters (LayerTag::params order).
// multiply_matpower(v, +1, γ) applies the damped curvature the block's inverse inverts, so
// (+1 then -1) is the identity; -1 uses the inverse of the last update_inverse — K-FAC refreshes
// inverses only every inverse_update_period steps, on purpose.
class CurvatureBlock {
public:
  // `model_shapes` are all of the model's parameter shapes; the block keeps its tag's.
  CurvatureBlock(LayerTag tag, const std::vector<ParamShape> &model_shapes);
  virtual ~CurvatureBlock() = default;

  virtual std::string name() const = 0;
  const LayerTag &tag() const { return tag_; }
  const std::vector<ParamShape> &shapes() const { return shapes_; }
  // Number of scalar parameters the block covers.
  int dim() const { return dim_; }
  double ema_weight() const { return weight_; }

  // Resets the estimate to empty (w = 0, S = 0) and drops any inverse.
  void init();
  void update_curvature_estimate(float ema_old, float ema_new, const BlockBatch &batch);
  // Whether update_curvature_estimate(ema_old, ema_new, batch) keeps every sum of the estimate
  // finite, so that a caller can refuse a bad batch before any block takes it: a NaN or Inf in
  // the records fails, and so do finite records whose products would overflow the float sums
  // (inputs of 1e20 give XᵀX = inf). A bound from the largest |entry| of the records and of the
  // sums: one pass over the records, far cheaper than the statistic itself. A malformed batch
  // passes, for update_curvature_estimate to report.
  bool keeps_estimate_finite(float ema_old, float ema_new, const BlockBatch &batch) const;
  // Recomputes the cached inverse of the damped estimate; diagonal_weight = l2_reg + damping.
  virtual void update_inverse(float diagonal_weight) = 0;
  std::vector<Matrix> multiply_matpower(const std::vector<Matrix> &vec, int exp,
                                        float diagonal_weight) const;
  // The undamped estimate as a dense dim() x dim() matrix over the flattened parameters
  // (row-major per tensor, tensors concatenated): for tests and debugging only.
  virtual Eigen::MatrixXd full_curvature() const = 0;

  // Checkpoints (Optimizer::save_checkpoint) save and restore a block through this view of
  // everything its later results depend on: the moving-average weight, whether an inverse is
  // cached, and the named matrices holding the estimate's sums and the cached inverse (those of
  // the inverse route in use, so a checkpoint of the other route does not fit). A matrix is
  // rows x cols, or 0 x 0 where `optional` says it may not be set yet.
  // Restoring writes through a State; saving reads through a ConstState, so a const block can
  // be saved.
  template <bool Const> struct StateMatrixOf {
    const char *name;
    std::conditional_t<Const, const Matrix, Matrix> *matrix;
    int rows, cols;
    bool inverse;  // part of the cached inverse: never 0 x 0 while an inverse is cached
    bool optional; // may be 0 x 0 (for an inverse: while none is cached)
  };
  template <bool Const> struct StateOf {
    std::conditional_t<Const, const double, double> *ema_weight;
    std::conditional_t<Const, const bool, bool> *have_inverse;
    std::vector<StateMatrixOf<Const>> matrices;
  };
  using StateMatrix = StateMatrixOf<false>;
  using State = StateOf<false>;
  using ConstState = StateOf<true>;
  State state();
  ConstState state() const;

protected:
  struct OwnState {
    bool *have_inverse;
    std::vector<StateMatrix> matrices;
  };
  virtual OwnState own_state() = 0;
  virtual void reset() = 0;
  // S <- ema_old·S + ema_new·X_batch (the base class updates w).
  virtual void accumulate(float ema_old, float ema_new, const BlockBatch &batch) = 0;
  // keeps_estimate_finite for a well-formed batch (batch_size >= 1, at least one pass).
  virtual bool statistics_fit(float ema_old, float ema_new, const BlockBatch &batch) const = 0;
  // Whether a sum whose largest |entry| is `largest` stays within float range after
  // S <- ema_old·S + C, where the kernel's unweighted row sums have entries up to `raw` and the
  // weighted contribution C entries up to `added`. NaN anywhere fails.
  static bool sum_fits(double largest, float ema_old, double raw, double added);
  // The largest |entry| of m (0 when empty), +inf when it holds a NaN: either poisons a sum.
  static double max_abs(const Matrix &m);
  // The largest diagonal entry of a sum of outer products (PSD, so it bounds every entry).
  static double max_diagonal(const Matrix &sum);
  // statistics_fit for blocks built on for_each_gradient_pass, whose sums (largest |entry|
  // `largest`) take squares or outer products of the per-example gradients.
  bool gradient_statistics_fit(float ema_old, float ema_new, const BlockBatch &batch,
                               double largest) const;
  virtual std::vector<Matrix> matpower(const std::vector<Matrix> &vec, int exp,
                                       float diagonal_weight) const = 0;
  // 1/w, or 0 before the first update (an empty estimate reads as zero curvature).
  float inverse_weight() const { return weight_ > 0.0 ? static_cast<float>(1.0 / weight_) : 0.0f; }
  [[noreturn]] void fail(const std::string &what) const;
  // The same message as fail's, as a CurvatureInverseError.
  [[noreturn]] void fail_inverse(const std::string &what) const;
  // For blocks estimated from per-example gradients (diagonal, full): calls
  // update(g, decay, weight) once per backward pass of `batch`, with g the (batch x dim())
  // per-example gradients, decay = ema_old on the first pass and 1 after, and
  // weight = ema_new / batch size.
  void for_each_gradient_pass(
      float ema_old, float ema_new, const BlockBatch &batch,
      const std::function<void(const Matrix &g, float decay, float weight)> &update) const;

  // Flattening used by the full and diagonal blocks (1 x dim()).
  Matrix flatten(const std::vector<Matrix> &vec) const;
  std::vector<Matrix> unflatten(const Matrix &flat) const;

private:
  LayerTag tag_;
  std::vector<ParamShape> shapes_;
  int dim_ = 0;
  double weight_ = 0.0;
};

// The block types a tag can get; layer_tag_to_block overrides the defaults.
enum class BlockKind {
  dense_two_kronecker_factored, // default for dense
  naive_diagonal,               // default for generic
  scale_and_shift_diagonal,     // default for scale_and_shift
  scale_and_shift_full,
  naive_full, // a.k.a. DenseFull: the full covariance of any tag's per-example gradients
  conv2d_two_kronecker_factored, // default for conv2d (KFC)
};
const char *block_kind_name(BlockKind kind);
// Accepts the names above plus the class-style spellings ("DenseTwoKroneckerFactored",
// "NaiveDiagonal", "ScaleAndShiftDiagonal", "ScaleAndShiftFull", "NaiveFull", "DenseFull").
BlockKind parse_block_kind(const std::string &text);
BlockKind default_block_kind(TagKind kind);

struct BlockOptions {
  // DenseTwoKroneckerFactored: eigendecomposition route (exact damping) instead of pi-adjusted
  // Cholesky inverses.
  bool use_exact_inverses = false;
  // Check factors for symmetry / finiteness after every update (the optimizer's debug mode).
  bool debug_checks = false;
};

// A block of `kind` for `tag`; `shapes` are the model's parameter shapes. Throws hkfac::Error when
// the kind cannot handle the tag (e.g. a Kronecker-factored block for a generic tag).
std::unique_ptr<CurvatureBlock> make_block(BlockKind kind, const LayerTag &tag,
                                           const std::vector<ParamShape> &shapes,
                                           const BlockOptions &options = {});

} // namespace hkfac::kfac
