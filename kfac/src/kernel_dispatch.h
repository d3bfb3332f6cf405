// The one door from the K-FAC library to the generated kernels (internal header).
//
// Every hot loop of the library goes through these functions. Each calls the hkfac::kernels
// function when this build has that kernel group (HKFAC_KFAC_HAVE_<GROUP>, set by
// kfac/CMakeLists.txt from the presence of runtime/src/kernels/<group>.cpp) and otherwise an
// Eigen implementation with the same semantics, so the library works while kernel groups are
// still being written and the tests pass either way. Shapes are checked here, once, with messages
// naming the argument; vectors are 1 x n row matrices.
#pragma once

#include "hkfac/kernels/dense.h"
#include "hkfac/kernels/patch_covariance.h"
#include "hkfac/kfac/types.h"

namespace hkfac::kfac::ops {

using kernels::Activation;

// Y = act(X W + b); `b` may be null (no bias). Y is resized.
void dense_forward(Matrix &Y, const Matrix &X, const Matrix &W, const Matrix *b, Activation act);

// dZ = dY ⊙ act'(Z) (from Y), dX = dZ Wᵀ, dW = Xᵀ dZ, db = Σ_rows dZ. Outputs are resized.
void dense_backward(Matrix &dZ, Matrix &dX, Matrix &dW, Matrix &db, const Matrix &dY,
                    const Matrix &Y, const Matrix &X, const Matrix &W, Activation act);

// C <- a*C + b*X̄ᵀX̄ with X̄ = [X, 1] when `homogeneous`.
void covariance_update(Matrix &C, const Matrix &X, float a, float b, bool homogeneous);

// The same for C's upper triangle (column >= row), which reads only C's upper triangle; the
// strictly lower one is unspecified afterwards (kernels::covariance_update_upper).
void covariance_update_upper(Matrix &C, const Matrix &X, float a, float b, bool homogeneous);

// C = XᵀX for a lower-triangular square X (what lies above its diagonal must be zero): the
// inverse of a Cholesky factorisation, L⁻ᵀL⁻¹. C is resized.
void lower_triangular_gram(Matrix &C, const Matrix &X);

// C <- a*C + b*P̄ᵀP̄ for the patches P of `images` under `g` (Conv2D's input factor), P̄ = [P, 1]
// when `homogeneous`; the patches are never formed when the kernel group is built.
void patch_covariance_update(Matrix &C, const Matrix &images, const kernels::PatchGeometry &g,
                             float a, float b, bool homogeneous);

// U = A_inv V G_inv (U is resized; must not alias V).
void kron_precondition(Matrix &U, const Matrix &A_inv, const Matrix &V, const Matrix &G_inv);

// U = Q_A [(Q_Aᵀ V Q_G) ⊘ (λ_A λ_Gᵀ + γ)] Q_Gᵀ (⊙ for power +1), eigenvalues clipped at 0.
void kron_precondition_eigen(Matrix &U, const Matrix &Q_A, const Matrix &lambda_A, const Matrix &V,
                             const Matrix &Q_G, const Matrix &lambda_G, float gamma, int power);

// C <- alpha op(A) op(B) + beta C (C is resized when beta == 0).
void gemm(Matrix &C, const Matrix &A, bool transpose_a, const Matrix &B, bool transpose_b,
          float alpha = 1.0f, float beta = 0.0f);

// dense_backward without dW and db: dZ = dY ⊙ act'(Y), dX = dZ Wᵀ (for passes that need only
// the per-example output gradients and the input gradient).
void dense_backward_input(Matrix &dZ, Matrix &dX, const Matrix &dY, const Matrix &Y,
                          const Matrix &W, Activation act);

// d <- a*d + b*Σ_rows g², d is 1 x p.
void diagonal_ema(Matrix &d, const Matrix &g, float a, float b);

// u = g ⊙ (d + γ)^power, all 1 x p; u is resized and may alias g.
void diagonal_matpower(Matrix &u, const Matrix &g, const Matrix &d, float gamma, int power);

// Factor inverses: on the GPU through cuSOLVER when the kernels run on CUDA (default_device())
// and cuSOLVER is usable; otherwise the blocks factorise on the CPU with Eigen.
bool inverses_on_device();

// inv = m⁻¹ for symmetric positive definite m, by Cholesky on the device in double; returns false
// when m is not positive definite. Throws unless inverses_on_device().
bool device_spd_inverse(Matrix &inv, const Eigen::MatrixXd &m);

// m = q diag(lambda) qᵀ on the device in double, lambda (1 x n) ascending; returns false when the
// eigensolver did not converge. Throws unless inverses_on_device().
bool device_symmetric_eigen(Matrix &q, Matrix &lambda, const Eigen::MatrixXd &m);

} // namespace hkfac::kfac::ops
