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

// The same update of C's upper triangle (column >= row, row-major: C(i, j) for j >= i), as
// BLAS's ssyrk with uplo = upper: those entries depend only on the upper triangle of C on entry,
// whatever the lower one holds. The strictly lower triangle is unspecified on exit (small C may
// get the mirrored values, large C keeps most of its old ones). For consumers that read one
// triangle (Cholesky, a symmetric eigensolver, Eigen's selfadjointView<Upper>); large updates
// skip the mirrored half's memory traffic.
void covariance_update_upper(Buffer<float> &C, const Buffer<float> &X, float a, float b,
                             bool homogeneous, Device dev = default_device());

} // namespace hkfac::kernels
