// Dense layer kernels: forward with fused bias and activation, backward with fused derivative.
#pragma once

#include "hkfac/buffer.h"
#include "hkfac/device.h"

namespace hkfac::kernels {

enum class Activation { identity, tanh, relu, sigmoid };

// Y = act(X W + b). X is (batch x d_in), W is (d_in x d_out), b has d_out elements, Y is
// (batch x d_out).
void dense_forward(Buffer<float> &Y, const Buffer<float> &X, const Buffer<float> &W,
                   const Buffer<float> &b, Activation act, Device dev = default_device());

// Given dY (batch x d_out), the forward's output Y and input X:
//   dZ = dY ⊙ act'(Z) (computed from Y), dX = dZ Wᵀ, dW = Xᵀ dZ, db = Σ_rows dZ.
// dZ is what K-FAC's G factor is built from (per-example pre-activation gradients).
void dense_backward(Buffer<float> &dZ, Buffer<float> &dX, Buffer<float> &dW, Buffer<float> &db,
                    const Buffer<float> &dY, const Buffer<float> &Y, const Buffer<float> &X,
                    const Buffer<float> &W, Activation act, Device dev = default_device());

} // namespace hkfac::kernels
