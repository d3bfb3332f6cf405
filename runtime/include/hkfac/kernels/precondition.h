// Kronecker-factored preconditioning of a dense layer's gradient.
#pragma once

#include "hkfac/buffer.h"
#include "hkfac/device.h"

namespace hkfac::kernels {

// U = A_inv * V * G_inv. V and U are (dA x dG) — rows index the (homogeneous) layer input, columns
// the layer output — A_inv is (dA x dA), G_inv is (dG x dG); both inverses symmetric.
// U must not alias V.
void kron_precondition(Buffer<float> &U, const Buffer<float> &A_inv, const Buffer<float> &V,
                       const Buffer<float> &G_inv, Device dev = default_device());

// The eigen route: U = Q_A [ (Q_Aᵀ V Q_G) ⊘ (λ_A λ_Gᵀ + γ) ] Q_Gᵀ, where A = Q_A diag(λ_A) Q_Aᵀ
// and G = Q_G diag(λ_G) Q_Gᵀ (eigenvectors in columns). Eigenvalues are clipped at 0 first.
// With `power` = +1 the division becomes a multiplication (applies (A⊗G + γI) instead).
void kron_precondition_eigen(Buffer<float> &U, const Buffer<float> &Q_A,
                             const Buffer<float> &lambda_A, const Buffer<float> &V,
                             const Buffer<float> &Q_G, const Buffer<float> &lambda_G, float gamma,
                             int power = -1, Device dev = default_device());

} // namespace hkfac::kernels
