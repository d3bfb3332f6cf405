// General matrix multiply with transposes, for the optimizer where no fused kernel fits.
#pragma once

#include "hkfac/buffer.h"
#include "hkfac/device.h"

namespace hkfac::kernels {

enum class Transpose { no, yes };

// C <- alpha * op(A) * op(B) + beta * C, op(M) = M or Mᵀ. C is (m x n), op(A) (m x k),
// op(B) (k x n). With beta == 0, C's old contents are ignored (may be uninitialised, even NaN).
void gemm(Buffer<float> &C, const Buffer<float> &A, Transpose ta, const Buffer<float> &B,
          Transpose tb, float alpha = 1.0f, float beta = 0.0f, Device dev = default_device());

} // namespace hkfac::kernels
