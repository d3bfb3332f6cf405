// DenseTwoKroneckerFactored: factor updates on covariance_update, products on kron_precondition.
#include "hkfac/kfac/blocks/dense_two_kronecker_factored.h"

#include <Eigen/Eigenvalues>
#include <algorithm>
#include <cmath>
#include <utility>

#include "hkfac/error.h"
#include "kernel_dispatch.h"
#include "spd_inverse.h"

namespace hkfac::kfac {

DampedFactors pi_adjusted_damped_factors(Eigen::MatrixXd A, Eigen::MatrixXd G,
                                         double diagonal_weight) {
  // The factors arrive by value and are damped in place: update_inverse moves its (up to
  // 1001 x 1001, 8 MB) temporaries in instead of paying for a copy of each.
  const Eigen::Index da = A.rows(), dg = G.rows();
  const double gamma = diagonal_weight, sqrt_gamma = std::sqrt(diagonal_weight);
  const double tr_a = A.trace(), tr_g = G.trace();
  DampedFactors f;
  if (!(tr_a * tr_g > 0.0)) {
    A.setIdentity();
    A *= sqrt_gamma;
    G.setIdentity();
    G *= sqrt_gamma;
  } else if (da == 1 && dg == 1) {
    A(0, 0) = A(0, 0) * G(0, 0) + gamma;
    G(0, 0) = 1.0;
  } else if (da == 1) {
    G.diagonal().array() += gamma / A(0, 0);
  } else if (dg == 1) {
    A.diagonal().array() += gamma / G(0, 0);
  } else {
    f.pi = std::sqrt((tr_a / static_cast<double>(da)) / (tr_g / static_cast<double>(dg)));
    A.diagonal().array() += f.pi * sqrt_gamma;
    G.diagonal().array() += sqrt_gamma / f.pi;
  }
  f.A = std::move(A);
  f.G = std::move(G);
  return f;
}

DenseTwoKroneckerFactored::DenseTwoKroneckerFactored(const LayerTag &tag,
                                                     const std::vector<ParamShape> &shapes,
                                                     const BlockOptions &options)
    : DenseTwoKroneckerFactored(tag, shapes, options, TagKind::dense) {}

DenseTwoKroneckerFactored::DenseTwoKroneckerFactored(const LayerTag &tag,
                                                     const std::vector<ParamShape> &shapes,
                                                     const BlockOptions &options, TagKind expected)
    : CurvatureBlock(tag, shapes), options_(options) {
  if (tag.kind != expected) {
    throw Error(std::string(expected == TagKind::dense ? "DenseTwoKroneckerFactored"
                                                       : "Conv2DTwoKroneckerFactored") +
                ": tag '" + tag.name + "' is " + tag_kind_name(tag.kind) + ", expected " +
                tag_kind_name(expected));
  }
  if (tag.locations < 0 || (tag.locations == 0 && tag.kind != TagKind::conv2d))
    throw Error("tag '" + tag.name + "': locations must be >= 1 (0, per batch, for conv2d)");
  const std::vector<ParamShape> &s = this->shapes();
  if (s.size() != (tag.has_bias ? 2u : 1u) ||
      (tag.has_bias && (s[1].rows != 1 || s[1].cols != s[0].cols))) {
    throw Error("DenseTwoKroneckerFactored: tag '" + tag.name +
                "' must have params {W (d_in x d_out)} or {W, b (1 x d_out)}");
  }
  d_in_ = s[0].rows;
  d_out_ = s[0].cols;
  if (tag.geometry && tag.geometry->patch_size() != d_in_) {
    throw Error("Conv2DTwoKroneckerFactored: tag '" + tag.name + "': the kernel has " +
                std::to_string(d_in_) + " rows, its geometry's patches " +
                std::to_string(tag.geometry->patch_size()) + " columns");
  }
  reset();
}

void DenseTwoKroneckerFactored::reset() {
  const int da = d_in_ + (tag().has_bias ? 1 : 0);
  a_sum_ = Matrix::Zero(da, da);
  g_sum_ = Matrix::Zero(d_out_, d_out_);
  have_inverse_ = false;
}

CurvatureBlock::OwnState DenseTwoKroneckerFactored::own_state() {
  // The sums are set from construction on (reset), the inverses from the first update_inverse.
  const int da = d_in_ + (tag().has_bias ? 1 : 0);
  if (options_.use_exact_inverses) {
    return {&have_inverse_,
            {{"a_sum", &a_sum_, da, da, false, false},
             {"g_sum", &g_sum_, d_out_, d_out_, false, false},
             {"a_eigenvectors", &q_a_, da, da, true, true},
             {"a_eigenvalues", &lambda_a_, 1, da, true, true},
             {"g_eigenvectors", &q_g_, d_out_, d_out_, true, true},
             {"g_eigenvalues", &lambda_g_, 1, d_out_, true, true}}};
  }
  return {&have_inverse_,
          {{"a_sum", &a_sum_, da, da, false, false},
           {"g_sum", &g_sum_, d_out_, d_out_, false, false},
           {"a_inverse", &a_inv_, da, da, true, true},
           {"g_inverse", &g_inv_, d_out_, d_out_, true, true}}};
}

namespace {

// The sums are kept in their upper triangles (accumulate); the factors are symmetric.
Matrix symmetric_from_upper(const Matrix &sum, float weight) {
  Matrix m = sum.selfadjointView<Eigen::Upper>();
  m *= weight;
  return m;
}

} // namespace

Matrix DenseTwoKroneckerFactored::factor_a() const {
  return symmetric_from_upper(a_sum_, inverse_weight());
}
Matrix DenseTwoKroneckerFactored::factor_g() const {
  return symmetric_from_upper(g_sum_, inverse_weight());
}

void DenseTwoKroneckerFactored::accumulate(float ema_old, float ema_new, const BlockBatch &batch) {
  const Eigen::Index rows = batch.output_grads.front().rows();
  // A conv2d tag with a geometry records one image per example, other tags one input row per
  // output-gradient row.
  const kernels::PatchGeometry *images = tag().geometry ? &*tag().geometry : nullptr;
  const Eigen::Index in_rows = images ? batch.batch_size : rows;
  const Eigen::Index in_cols = images ? images->image_size() : d_in_;
  if (!batch.inputs || batch.inputs->rows() != in_rows || batch.inputs->cols() != in_cols) {
    fail(std::string("update_curvature_estimate: 'batch.inputs' must be ") +
         (images ? "the images, " : "") + std::to_string(in_rows) + " x " +
         std::to_string(in_cols));
  }
  // KFC (Grosse & Martens 2016): A sums over an example's locations and averages over examples;
  // G averages over both. Weighting each batch by its own T keeps this right when T varies.
  const float per_example_a = ema_new / static_cast<float>(batch.batch_size);
  const float per_example = ema_new / static_cast<float>(rows);
  // The sums' upper triangles are what the factors are read from (factor_a, factor_g): the
  // dense updates write that triangle alone, which at large d and small batches skips half of
  // the update's memory traffic. (The patch update writes both.)
  if (images) {
    ops::patch_covariance_update(a_sum_, *batch.inputs, *images, ema_old, per_example_a,
                                 tag().has_bias);
  } else {
    ops::covariance_update_upper(a_sum_, *batch.inputs, ema_old, per_example_a, tag().has_bias);
  }
  float decay = ema_old;
  for (const Matrix &ds : batch.output_grads) {
    if (ds.cols() != d_out_) {
      fail("update_curvature_estimate: output gradients must have " + std::to_string(d_out_) +
           " columns");
    }
    ops::covariance_update_upper(g_sum_, ds, decay, per_example, false);
    decay = 1.0f; // later passes add to this batch's contribution
  }
  if (options_.debug_checks && (!a_sum_.allFinite() || !g_sum_.allFinite())) {
    fail("a factor became non-finite after update_curvature_estimate");
  }
}

bool DenseTwoKroneckerFactored::statistics_fit(float ema_old, float ema_new,
                                               const BlockBatch &batch) const {
  // As accumulate: A sums x̄ x̄ᵀ over every row (patch) and weighs by 1 / batch_size, G sums
  // ds dsᵀ over every row of each pass and weighs by 1 / rows.
  const double rows = static_cast<double>(batch.output_grads.front().rows());
  const double x =
      std::max(batch.inputs ? max_abs(*batch.inputs) : 0.0, tag().has_bias ? 1.0 : 0.0);
  const double a_raw = rows * x * x;
  double g_raw = 0.0, g_added = 0.0;
  for (const Matrix &ds : batch.output_grads) {
    const double m = max_abs(ds);
    const double raw = static_cast<double>(ds.rows()) * m * m;
    g_raw = std::max(g_raw, raw);
    g_added += ema_new / rows * raw;
  }
  return sum_fits(max_diagonal(a_sum_), ema_old, a_raw, ema_new / batch.batch_size * a_raw) &&
         sum_fits(max_diagonal(g_sum_), ema_old, g_raw, g_added);
}

namespace {

// m = Q diag(λ) Qᵀ with λ a row clipped at 0 (a factor is PSD; rounding can dip below), on the
// GPU when the kernels run there; false when the eigensolver did not converge.
bool eigen_decompose(Matrix &q, Matrix &lambda, const Eigen::MatrixXd &m) {
  if (ops::inverses_on_device()) {
    if (!ops::device_symmetric_eigen(q, lambda, m))
      return false;
  } else {
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> e(m);
    if (e.info() != Eigen::Success)
      return false;
    q = e.eigenvectors().cast<float>();
    lambda = e.eigenvalues().transpose().cast<float>();
  }
  lambda = lambda.cwiseMax(0.0f);
  return true;
}

} // namespace

void DenseTwoKroneckerFactored::update_inverse(float diagonal_weight) {
  if (!(diagonal_weight >= 0.0f) || !std::isfinite(diagonal_weight)) {
    fail("update_inverse: 'diagonal_weight' must be finite and >= 0, got " +
         std::to_string(diagonal_weight));
  }
  Eigen::MatrixXd A = factor_a().cast<double>(), G = factor_g().cast<double>();
  if (!A.allFinite() || !G.allFinite())
    fail("update_inverse: factor A or G is not finite");
  if (options_.use_exact_inverses) {
    if (!eigen_decompose(q_a_, lambda_a_, A) || !eigen_decompose(q_g_, lambda_g_, G))
      fail_inverse("update_inverse: eigendecomposition did not converge");
  } else {
    DampedFactors f = pi_adjusted_damped_factors(std::move(A), std::move(G), diagonal_weight);
    if (!spd_inverse(a_inv_, std::move(f.A)) || !spd_inverse(g_inv_, std::move(f.G))) {
      fail_inverse("update_inverse: damped factor is not positive definite (diagonal_weight " +
                   std::to_string(diagonal_weight) + " too small?)");
    }
  }
  have_inverse_ = true;
}

Matrix DenseTwoKroneckerFactored::stack(const std::vector<Matrix> &vec) const {
  if (!tag().has_bias)
    return vec[0];
  Matrix v(d_in_ + 1, d_out_);
  v.topRows(d_in_) = vec[0];
  v.bottomRows(1) = vec[1];
  return v;
}

std::vector<Matrix> DenseTwoKroneckerFactored::unstack(Matrix &&v) const {
  // Built by push_back: a braced list would copy its elements into the vector.
  std::vector<Matrix> out;
  if (!tag().has_bias) {
    out.push_back(std::move(v));
    return out;
  }
  // Row-major: the weight's rows are a prefix of v's storage, and shrinking v in place (a
  // realloc to less) keeps them where they are, saving a copy of the whole weight per call.
  Matrix b = v.bottomRows(1);
  v.conservativeResize(d_in_, Eigen::NoChange);
  out.push_back(std::move(v));
  out.push_back(std::move(b));
  return out;
}

std::vector<Matrix> DenseTwoKroneckerFactored::matpower(const std::vector<Matrix> &vec, int exp,
                                                        float diagonal_weight) const {
  const Matrix v = stack(vec);
  Matrix u;
  if (exp == -1) {
    if (!have_inverse_)
      fail("multiply_matpower(-1): update_inverse was never called");
    if (options_.use_exact_inverses) {
      ops::kron_precondition_eigen(u, q_a_, lambda_a_, v, q_g_, lambda_g_, diagonal_weight, -1);
    } else {
      ops::kron_precondition(u, a_inv_, v, g_inv_);
    }
    return unstack(std::move(u));
  }
  if (options_.use_exact_inverses) {
    // (A ⊗ G + γI) v = A V G + γ V, from the current estimate.
    ops::kron_precondition(u, factor_a(), v, factor_g());
    u += diagonal_weight * v;
  } else {
    const DampedFactors f = pi_adjusted_damped_factors(factor_a().cast<double>(),
                                                       factor_g().cast<double>(), diagonal_weight);
    ops::kron_precondition(u, f.A.cast<float>(), v, f.G.cast<float>());
  }
  return unstack(std::move(u));
}

Eigen::MatrixXd DenseTwoKroneckerFactored::full_curvature() const {
  const Eigen::MatrixXd A = factor_a().cast<double>(), G = factor_g().cast<double>();
  Eigen::MatrixXd F(A.rows() * G.rows(), A.cols() * G.cols());
  for (Eigen::Index i = 0; i < A.rows(); ++i) {
    for (Eigen::Index j = 0; j < A.cols(); ++j) {
      F.block(i * G.rows(), j * G.cols(), G.rows(), G.cols()) = A(i, j) * G;
    }
  }
  return F;
}

} // namespace hkfac::kfac
