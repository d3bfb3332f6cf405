// The tangent of an affine layer y = act(x W + b), shared by Dense and Conv2D (internal header).
#pragma once

#include "activation_math.h"
#include "kernel_dispatch.h"

namespace hkfac::kfac::detail {

// ds = act'(y) ⊙ (dx W + x dW + db), rows as in x (Conv2D passes its patches). `dx_rows()` gives
// dx in x's layout and is called only when dx is nonzero: the first layer's dx is zero (its
// input is data), and there dx W is the largest GEMM of the pass. isZero stops at the first
// nonzero, so the check costs nothing on the other layers.
template <typename DxRows>
Matrix affine_jvp(const Matrix &dx, DxRows dx_rows, const Matrix &x, const Matrix &W,
                  const Matrix &dW, const Matrix *db, const Matrix &y, kernels::Activation act) {
  Matrix ds;
  const bool dx_zero = dx.isZero(0.0f);
  if (!dx_zero)
    ops::gemm(ds, dx_rows(), false, W, false);
  ops::gemm(ds, x, false, dW, false, 1.0f, dx_zero ? 0.0f : 1.0f);
  if (db || act != kernels::Activation::identity)
    add_bias_times_derivative(ds, db, y, act);
  return ds;
}

} // namespace hkfac::kfac::detail
