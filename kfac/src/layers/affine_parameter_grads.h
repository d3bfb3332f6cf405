// The parameter gradients of an affine layer y = act(x W + b) without its input gradient, shared
// by Dense and Conv2D for a model's first layer (internal header).
#pragma once

#include <utility>

#include "activation_math.h"
#include "hkfac/kfac/model.h"
#include "kernel_dispatch.h"

namespace hkfac::kfac::detail {

// dz = dy ⊙ act'(y); grads[0] += xᵀ dz, grads[1] += 1ᵀ dz (with a bias); the record's output
// gradients are dz. The fused backward kernel forms dx = dz Wᵀ alongside, as much work again as
// xᵀ dz: here only the elementwise pass and the one product run.
inline void affine_parameter_grads(const Matrix &dy, const Matrix &y, const Matrix &x,
                                   kernels::Activation act, Matrix *grads, bool use_bias,
                                   TagRecord *record) {
  Matrix dz = times_derivative(dy, y, act);
  Matrix dw;
  ops::gemm(dw, x, true, dz, false);
  grads[0] += dw;
  if (use_bias)
    grads[1] += dz.colwise().sum();
  if (record)
    record->output_grads = std::move(dz);
}

} // namespace hkfac::kfac::detail
