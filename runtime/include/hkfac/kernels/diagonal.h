// Diagonal-block kernels: squared-gradient EMA and elementwise damped products.
#pragma once

#include "hkfac/buffer.h"
#include "hkfac/device.h"

namespace hkfac::kernels {

// d <- a*d + b*Σ_k g(k,:)², in place. d has p elements; g is (n rows x p cols), one per-example
// gradient per row.
void diagonal_ema(Buffer<float> &d, const Buffer<float> &g, float a, float b,
                  Device dev = default_device());

// u = g ⊙ (d + γ)^power elementwise, power ∈ {+1, -1}; u may alias g.
void diagonal_matpower(Buffer<float> &u, const Buffer<float> &g, const Buffer<float> &d,
                       float gamma, int power, Device dev = default_device());

} // namespace hkfac::kernels
