// Covariance (K-FAC factor) update kernel: C <- a*C + b*X̄ᵀX̄.
#pragma once

#include "hkfac/buffer.h"
#include "hkfac/device.h"

namespace hkfac::kernels {

// C <- a*C + b*X̄ᵀX̄, in place. X is (n rows x d cols), one example per row. With `homogeneous`,
// X̄ = [X, 1] (a column of ones appended, never materialised) and C is (d+1) x (d+1); otherwise
// X̄ = X and C is d x d. C must be symmetric on entry; it is exactly symmetric on exit.
void covariance_update(Buffer<float> &C, const Buffer<float> &X, float a, float b,
                       bool homogeneous, Device dev = default_device());

} // namespace hkfac::kernels
