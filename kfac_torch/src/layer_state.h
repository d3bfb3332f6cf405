// One Kronecker-factored layer of a LibTorch model: what a call captured, the moving averages of
// its factors, their damped inverses and the products with them (internal header).
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "hkfac/kfac_torch/preconditioner.h"

namespace hkfac::kfac_torch::detail {

// What one call of a layer left for its backward: the input it saw and, for a convolution, the
// geometry of that call (stride and padding come from the call's own arguments, so a padding mode
// that pads the input first, with padding 0 in the call, is seen as it ran).
struct LayerCall {
  torch::Tensor input; // Linear: (..., in); Conv2d: (B, C, H, W) or (C, H, W); Embedding: indices
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
};

// A layer's K-FAC block. Torch stores a Linear weight as (out x in), so the block works in that
// orientation: the gradient matrix is V = [∇W | ∇b] (out x (in+1)), F ≈ A ⊗ G reads
// (G ⊗ A) on V's row-major flattening, and F̂⁻¹ applied to it is G_d⁻¹ V A_d⁻¹ — the
// kron_precondition kernel with G in the left place and A in the right. A conv kernel is
// reordered to (out, kh, kw, C), the column order of the patch-covariance kernel's patches; an
// embedding's A is diagonal, so only its diagonal (the token counts) is kept.
struct LayerState {
  std::string name;
  LayerKind kind = LayerKind::linear;
  torch::Tensor weight, bias; // the module's own parameters (same TensorImpl)
  bool has_bias = false;
  int64_t in = 0, out = 0;            // Linear: features; Conv2d: channels; Embedding: rows, dim
  int64_t kernel_h = 1, kernel_w = 1; // Conv2d
  std::optional<int64_t> padding_idx; // Embedding
  LossReduction reduction = LossReduction::mean;
  int64_t a_dim = 0, g_dim = 0;

  // Set when the capture is on for this layer's preconditioner; read by the dispatcher callback.
  std::atomic<bool> capturing{false};

  // Statistics captured since the last fold, and the rows they were summed over (A's rows are
  // examples for a convolution, whose A sums over an example's locations).
  std::mutex mutex;
  torch::Tensor a_acc, g_acc;
  int64_t a_rows = 0, g_rows = 0;
  std::string capture_error; // the first exception a hook caught, for step() to report

  // The moving averages S_A, S_G and their weight w (factor = S / w).
  torch::Tensor a_sum, g_sum;
  double ema_weight = 0.0;

  // The cached inverse: Cholesky route a_inv, g_inv (an embedding's a_inv is a vector); eigen
  // route eigenvectors in columns and eigenvalues clipped at 0 (an embedding's A: eigenvalues
  // only).
  bool have_inverse = false;
  torch::Tensor a_inv, g_inv;
  torch::Tensor q_a, lambda_a, q_g, lambda_g;

  LayerInfo info() const { return {name, kind, a_dim, g_dim}; }
  void reset_statistics();

  // Called from the output's gradient hook, during the user's backward.
  void accumulate(const LayerCall &call, const torch::Tensor &output_grad);
  // Folds what was captured into the moving averages; false when nothing was.
  bool fold(double decay);
  torch::Tensor factor_a() const;
  torch::Tensor factor_g() const;
  void invert(double damping, bool exact);
  // The tensors of the cached inverse on the given route (to move one between ranks), with fresh
  // ones of their sizes when `allocate` (on a rank about to receive it).
  std::vector<torch::Tensor *> inverse_tensors(bool exact, bool allocate);
  // {∇W, ∇b} -> F̂^exp {∇W, ∇b} (new tensors shaped like the parameters); exp -1 uses the cached
  // inverse, +1 applies A ⊗ G + γI from the current estimate.
  std::vector<torch::Tensor> multiply(const std::vector<torch::Tensor> &grads, int exp,
                                      double damping, bool exact) const;

private:
  torch::Tensor stack(const std::vector<torch::Tensor> &grads) const;
  std::vector<torch::Tensor> unstack(const torch::Tensor &u) const;
};

} // namespace hkfac::kfac_torch::detail
