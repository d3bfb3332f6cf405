// Inverses of symmetric positive definite matrices: the damped factors of the Kronecker blocks
// and the damped estimates of the full blocks (internal header).
#pragma once

#include <Eigen/Core>

#include "hkfac/kfac/types.h"

namespace hkfac::kfac {

// inv = m⁻¹ for symmetric positive definite m (only its lower triangle is read); false when m is
// not positive definite. On the GPU through cuSOLVER when ops::inverses_on_device(), otherwise on
// the CPU: the Cholesky factorisation in double, in m's storage (hence by value: callers move
// their temporaries in), where damping-sized pivots need the precision, then L⁻¹ and L⁻ᵀL⁻¹ in
// float.
bool spd_inverse(Matrix &inv, Eigen::MatrixXd m);

} // namespace hkfac::kfac
