// Inverses of symmetric positive definite matrices, by Cholesky: (L Lᵀ)⁻¹ = L⁻ᵀ L⁻¹.
#include "spd_inverse.h"

#include <Eigen/Cholesky>
#include <algorithm>
#include <utility>

#include "kernel_dispatch.h"

namespace hkfac::kfac {
namespace {

// m = L Lᵀ in place (L in the lower triangle; the upper keeps m's values), right-looking by blocks
// of 64 columns: each block's diagonal part on Eigen's LLT, the panel below it by a triangular
// solve, the trailing matrix by a symmetric rank-64 update. Faster than Eigen's own blocked LLT
// (see docs/RESULTS.md#factor-inverses), and it needs no copy of m. False when m is not positive
// definite.
bool cholesky_in_place(Eigen::MatrixXd &m) {
  const Eigen::Index n = m.rows();
  constexpr Eigen::Index kBlock = 64;
  for (Eigen::Index k = 0; k < n; k += kBlock) {
    const Eigen::Index b = std::min(kBlock, n - k), rest = n - k - b;
    auto diagonal = m.block(k, k, b, b);
    Eigen::LLT<Eigen::Ref<Eigen::MatrixXd>> llt(diagonal);
    if (llt.info() != Eigen::Success)
      return false;
    if (rest > 0) {
      auto panel = m.block(k + b, k, rest, b);
      diagonal.triangularView<Eigen::Lower>().transpose().solveInPlace<Eigen::OnTheRight>(panel);
      m.block(k + b, k + b, rest, rest).selfadjointView<Eigen::Lower>().rankUpdate(panel, -1.0);
    }
  }
  return true;
}

// L⁻¹ for lower-triangular L, one block of columns at a time. Column block j of L⁻¹ is zero
// above its diagonal block, so it is a solve with the trailing part of L only: a third of the
// work of solving against the whole identity (Eigen's solve does not know its right-hand side
// is triangular). Blocks of 64 columns were the fastest of those timed (see
// docs/RESULTS.md#factor-inverses).
Matrix lower_triangular_inverse(const Eigen::MatrixXf &L) {
  const Eigen::Index m = L.rows();
  constexpr Eigen::Index kBlockCols = 64;
  Matrix inv = Matrix::Zero(m, m);
  for (Eigen::Index j = 0; j < m; j += kBlockCols) {
    const Eigen::Index w = std::min(kBlockCols, m - j);
    auto block = inv.block(j, j, m - j, w);
    block.topRows(w).setIdentity();
    L.bottomRightCorner(m - j, m - j).triangularView<Eigen::Lower>().solveInPlace(block);
  }
  return inv;
}

} // namespace

bool spd_inverse(Matrix &inv, Eigen::MatrixXd m) {
  if (ops::inverses_on_device())
    return ops::device_spd_inverse(inv, m);
  if (!cholesky_in_place(m))
    return false;
  const Eigen::MatrixXf L = m.cast<float>(); // the solves read only the lower triangle
  // The result goes to a fresh allocation made after the temporaries, not into inv's storage.
  // Reusing inv left the freed temporaries on top of the inverting thread's heap, where glibc
  // hands them back to the system; the kernels of the following steps then faulted their buffers
  // in again (see docs/RESULTS.md#factor-inverses).
  Matrix product;
  ops::lower_triangular_gram(product, lower_triangular_inverse(L));
  inv = std::move(product);
  return true;
}

} // namespace hkfac::kfac
