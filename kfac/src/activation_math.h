// Elementwise activations and their derivatives from the output (internal header).
#pragma once

#include <algorithm>

#include "hkfac/kernels/dense.h"
#include "hkfac/kfac/types.h"
#include "parallel_chunks.h"

namespace hkfac::kfac::detail {

inline Matrix apply_activation(const Matrix &z, kernels::Activation act) {
  using kernels::Activation;
  switch (act) {
  case Activation::identity:
    return z;
  case Activation::tanh:
    return z.array().tanh().matrix();
  case Activation::relu:
    return z.cwiseMax(0.0f);
  case Activation::sigmoid:
    return (1.0f / (1.0f + (-z.array()).exp())).matrix();
  }
  return z;
}

// Row r of add_bias_times_derivative.
inline void add_bias_times_derivative_row(Matrix &d, const Matrix *bias, const Matrix &y,
                                          kernels::Activation act, Eigen::Index r) {
  using kernels::Activation;
  auto row = d.row(r).array();
  if (bias)
    row += bias->row(0).array();
  const auto out = y.row(r).array();
  switch (act) {
  case Activation::identity:
    break;
  case Activation::tanh:
    row *= 1.0f - out.square();
    break;
  case Activation::relu:
    row *= (out > 0.0f).cast<float>();
    break;
  case Activation::sigmoid:
    row *= out * (1.0f - out);
    break;
  }
}

// d <- (d + 1 bᵀ) ⊙ act'(z) in place, with act'(z) written in terms of y = act(z), which is what
// the backward pass keeps; no bias when `bias` is null. One pass over d, row by row, with no
// temporaries: as separate Eigen expressions (derivative matrix, product, bias add) the tangent
// and input-gradient epilogues cost three passes and an allocation. Rows are independent, so
// ranges of them run on the kernels' thread pool when d is large (a convolution's tangent has a
// row per output location; serial, this pass showed in the CNN's profile: see
// docs/RESULTS.md#cnn-classifier).
inline void add_bias_times_derivative(Matrix &d, const Matrix *bias, const Matrix &y,
                                      kernels::Activation act) {
  for_row_ranges(d.rows(), d.cols(), [&](Eigen::Index first, Eigen::Index end) {
    for (Eigen::Index r = first; r < end; ++r)
      add_bias_times_derivative_row(d, bias, y, act, r);
  });
}

// d ⊙ act'(z), from y = act(z): the backward and tangent step of an activation.
inline Matrix times_derivative(Matrix d, const Matrix &y, kernels::Activation act) {
  add_bias_times_derivative(d, nullptr, y, act);
  return d;
}

} // namespace hkfac::kfac::detail
