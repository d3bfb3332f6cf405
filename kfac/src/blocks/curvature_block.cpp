// The curvature-block base (moving-average bookkeeping, flattening) and the block factory.
#include "hkfac/kfac/blocks/curvature_block.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "hkfac/error.h"
#include "hkfac/kfac/blocks/dense_two_kronecker_factored.h"
#include "hkfac/kfac/blocks/diagonal.h"
#include "hkfac/kfac/blocks/full.h"

namespace hkfac::kfac {

CurvatureBlock::CurvatureBlock(LayerTag tag, const std::vector<ParamShape> &model_shapes)
    : tag_(std::move(tag)) {
  if (tag_.params.empty())
    throw Error("curvature block: tag '" + tag_.name + "' has no params");
  validate_tag_geometry(tag_);
  for (int i : tag_.params) {
    if (i < 0 || i >= static_cast<int>(model_shapes.size())) {
      throw Error("curvature block: tag '" + tag_.name + "' names parameter " + std::to_string(i) +
                  ", the model has " + std::to_string(model_shapes.size()));
    }
    shapes_.push_back(model_shapes[i]);
    dim_ += model_shapes[i].rows * model_shapes[i].cols;
  }
}

void CurvatureBlock::fail(const std::string &what) const {
  throw Error(name() + " '" + tag_.name + "': " + what);
}

void CurvatureBlock::fail_inverse(const std::string &what) const {
  throw CurvatureInverseError(name() + " '" + tag_.name + "': " + what);
}

void CurvatureBlock::for_each_gradient_pass(
    float ema_old, float ema_new, const BlockBatch &batch,
    const std::function<void(const Matrix &g, float decay, float weight)> &update) const {
  const float per_example = ema_new / static_cast<float>(batch.batch_size);
  const Matrix no_inputs;
  // Images are turned into patches once for all passes; the passes then see a patch record.
  Matrix patches;
  const Matrix &inputs = tag_input_rows(tag(), batch.inputs ? *batch.inputs : no_inputs, patches);
  LayerTag patch_tag = tag();
  patch_tag.geometry.reset();
  float decay = ema_old;
  for (const Matrix &dy : batch.output_grads) {
    const Matrix g = per_example_gradients(patch_tag, inputs, dy, batch.batch_size);
    if (g.cols() != dim()) {
      fail("update_curvature_estimate: per-example gradients have " + std::to_string(g.cols()) +
           " columns, the block covers " + std::to_string(dim()) + " parameters");
    }
    update(g, decay, per_example);
    decay = 1.0f;
  }
}

bool CurvatureBlock::sum_fits(double largest, float ema_old, double raw, double added) {
  // Headroom below FLT_MAX for the kernels' rounding and for what is formed from the sums later
  // (averages S / w, traces, damped factors).
  constexpr double kLimit = std::numeric_limits<float>::max() / 16.0;
  return raw <= kLimit && ema_old * largest + added <= kLimit;
}

double CurvatureBlock::max_abs(const Matrix &m) {
  if (m.size() == 0)
    return 0.0;
  const float a = m.cwiseAbs().maxCoeff<Eigen::PropagateNaN>();
  return std::isnan(a) ? std::numeric_limits<double>::infinity() : a;
}

double CurvatureBlock::max_diagonal(const Matrix &sum) {
  if (sum.size() == 0)
    return 0.0;
  const float a = sum.diagonal().cwiseAbs().maxCoeff<Eigen::PropagateNaN>();
  return std::isnan(a) ? std::numeric_limits<double>::infinity() : a;
}

bool CurvatureBlock::gradient_statistics_fit(float ema_old, float ema_new, const BlockBatch &batch,
                                             double largest) const {
  // A per-example gradient entry is dy, x·dy or (x = 1) a bias's dy — for conv2d summed over the
  // example's T locations (per_example_gradients); a generic tag's is dy alone.
  const bool conv = tag_.kind == TagKind::conv2d;
  const double x = tag_.kind == TagKind::generic
                       ? 1.0
                       : std::max(batch.inputs ? max_abs(*batch.inputs) : 0.0, 1.0);
  double raw = 0.0, added = 0.0;
  for (const Matrix &dy : batch.output_grads) {
    const double locations = conv ? static_cast<double>(dy.rows()) / batch.batch_size : 1.0;
    const double examples = conv ? batch.batch_size : static_cast<double>(dy.rows());
    const double g = locations * x * max_abs(dy);
    const double pass = examples * g * g;
    raw = std::max(raw, pass);
    added += ema_new / batch.batch_size * pass;
  }
  return sum_fits(largest, ema_old, raw, added);
}

bool CurvatureBlock::keeps_estimate_finite(float ema_old, float ema_new,
                                           const BlockBatch &batch) const {
  if (batch.batch_size < 1 || batch.output_grads.empty() || batch.output_grads.front().rows() < 1)
    return true;
  return statistics_fit(ema_old, ema_new, batch);
}

CurvatureBlock::State CurvatureBlock::state() {
  OwnState own = own_state();
  return {&weight_, own.have_inverse, std::move(own.matrices)};
}

CurvatureBlock::ConstState CurvatureBlock::state() const {
  // own_state() only takes the addresses of members, so calling it on a const block changes
  // nothing; the view it yields is handed out read-only.
  const State s = const_cast<CurvatureBlock *>(this)->state();
  ConstState view{s.ema_weight, s.have_inverse, {}};
  view.matrices.reserve(s.matrices.size());
  for (const StateMatrix &m : s.matrices)
    view.matrices.push_back({m.name, m.matrix, m.rows, m.cols, m.inverse, m.optional});
  return view;
}

void CurvatureBlock::init() {
  weight_ = 0.0;
  reset();
}

void CurvatureBlock::update_curvature_estimate(float ema_old, float ema_new,
                                               const BlockBatch &batch) {
  if (!(ema_old >= 0.0f) || !(ema_new > 0.0f) || !std::isfinite(ema_old) ||
      !std::isfinite(ema_new)) {
    fail("update_curvature_estimate: need finite ema_old >= 0 and ema_new > 0, got " +
         std::to_string(ema_old) + " and " + std::to_string(ema_new));
  }
  if (batch.batch_size < 1)
    fail("update_curvature_estimate: 'batch.batch_size' must be >= 1");
  if (batch.output_grads.empty()) {
    fail("update_curvature_estimate: 'batch.output_grads' holds no backward pass");
  }
  // With per-batch locations (0) the first pass fixes this batch's row count.
  const Eigen::Index rows = tag_.locations > 0
                                ? static_cast<Eigen::Index>(batch.batch_size) * tag_.locations
                                : batch.output_grads.front().rows();
  if (tag_.locations == 0 && (rows < 1 || rows % batch.batch_size != 0)) {
    fail("update_curvature_estimate: output gradients have " + std::to_string(rows) +
         " rows, not a multiple of the batch size " + std::to_string(batch.batch_size));
  }
  for (const Matrix &g : batch.output_grads) {
    if (g.rows() != rows) {
      fail("update_curvature_estimate: output gradients have " + std::to_string(g.rows()) +
           " rows, expected batch_size x locations = " + std::to_string(rows));
    }
  }
  accumulate(ema_old, ema_new, batch);
  weight_ = ema_old * weight_ + ema_new;
}

std::vector<Matrix> CurvatureBlock::multiply_matpower(const std::vector<Matrix> &vec, int exp,
                                                      float diagonal_weight) const {
  if (exp != 1 && exp != -1)
    fail("multiply_matpower: 'exp' must be +1 or -1");
  if (!(diagonal_weight >= 0.0f) || !std::isfinite(diagonal_weight)) {
    fail("multiply_matpower: 'diagonal_weight' must be finite and >= 0, got " +
         std::to_string(diagonal_weight));
  }
  if (vec.size() != shapes_.size()) {
    fail("multiply_matpower: 'vec' has " + std::to_string(vec.size()) + " tensors, expected " +
         std::to_string(shapes_.size()));
  }
  for (size_t i = 0; i < vec.size(); ++i) {
    if (vec[i].rows() != shapes_[i].rows || vec[i].cols() != shapes_[i].cols) {
      fail("multiply_matpower: vec[" + std::to_string(i) + "] must be " +
           std::to_string(shapes_[i].rows) + " x " + std::to_string(shapes_[i].cols));
    }
  }
  return matpower(vec, exp, diagonal_weight);
}

Matrix CurvatureBlock::flatten(const std::vector<Matrix> &vec) const {
  Matrix flat(1, dim_);
  Eigen::Index at = 0;
  for (const Matrix &m : vec) {
    std::copy(m.data(), m.data() + m.size(), flat.data() + at);
    at += m.size();
  }
  return flat;
}

std::vector<Matrix> CurvatureBlock::unflatten(const Matrix &flat) const {
  std::vector<Matrix> out;
  Eigen::Index at = 0;
  for (const ParamShape &s : shapes_) {
    Matrix m(s.rows, s.cols);
    std::copy(flat.data() + at, flat.data() + at + m.size(), m.data());
    at += m.size();
    out.push_back(std::move(m));
  }
  return out;
}

const char *block_kind_name(BlockKind kind) {
  switch (kind) {
  case BlockKind::dense_two_kronecker_factored:
    return "dense_two_kronecker_factored";
  case BlockKind::naive_diagonal:
    return "naive_diagonal";
  case BlockKind::scale_and_shift_diagonal:
    return "scale_and_shift_diagonal";
  case BlockKind::scale_and_shift_full:
    return "scale_and_shift_full";
  case BlockKind::naive_full:
    return "naive_full";
  case BlockKind::conv2d_two_kronecker_factored:
    return "conv2d_two_kronecker_factored";
  }
  return "unknown";
}

BlockKind parse_block_kind(const std::string &text) {
  struct Name {
    const char *name;
    BlockKind kind;
  };
  static const Name names[] = {
      {"dense_two_kronecker_factored", BlockKind::dense_two_kronecker_factored},
      {"DenseTwoKroneckerFactored", BlockKind::dense_two_kronecker_factored},
      {"naive_diagonal", BlockKind::naive_diagonal},
      {"NaiveDiagonal", BlockKind::naive_diagonal},
      {"scale_and_shift_diagonal", BlockKind::scale_and_shift_diagonal},
      {"ScaleAndShiftDiagonal", BlockKind::scale_and_shift_diagonal},
      {"scale_and_shift_full", BlockKind::scale_and_shift_full},
      {"ScaleAndShiftFull", BlockKind::scale_and_shift_full},
      {"naive_full", BlockKind::naive_full},
      {"NaiveFull", BlockKind::naive_full},
      {"dense_full", BlockKind::naive_full},
      {"conv2d_two_kronecker_factored", BlockKind::conv2d_two_kronecker_factored},
      {"Conv2DTwoKroneckerFactored", BlockKind::conv2d_two_kronecker_factored},
      {"DenseFull", BlockKind::naive_full},
  };
  for (const Name &n : names) {
    if (text == n.name)
      return n.kind;
  }
  throw Error("parse_block_kind: unknown block type '" + text + "'");
}

BlockKind default_block_kind(TagKind kind) {
  switch (kind) {
  case TagKind::dense:
    return BlockKind::dense_two_kronecker_factored;
  case TagKind::scale_and_shift:
    return BlockKind::scale_and_shift_diagonal;
  case TagKind::conv2d:
    return BlockKind::conv2d_two_kronecker_factored;
  case TagKind::generic:
    break;
  }
  return BlockKind::naive_diagonal;
}

std::unique_ptr<CurvatureBlock> make_block(BlockKind kind, const LayerTag &tag,
                                           const std::vector<ParamShape> &shapes,
                                           const BlockOptions &options) {
  switch (kind) {
  case BlockKind::dense_two_kronecker_factored:
    return std::make_unique<DenseTwoKroneckerFactored>(tag, shapes, options);
  case BlockKind::naive_diagonal:
    return std::make_unique<NaiveDiagonal>(tag, shapes);
  case BlockKind::scale_and_shift_diagonal:
    return std::make_unique<ScaleAndShiftDiagonal>(tag, shapes);
  case BlockKind::scale_and_shift_full:
    return std::make_unique<ScaleAndShiftFull>(tag, shapes);
  case BlockKind::naive_full:
    return std::make_unique<NaiveFull>(tag, shapes);
  case BlockKind::conv2d_two_kronecker_factored:
    return std::make_unique<Conv2DTwoKroneckerFactored>(tag, shapes, options);
  }
  throw Error("make_block: unknown block kind");
}

} // namespace hkfac::kfac
