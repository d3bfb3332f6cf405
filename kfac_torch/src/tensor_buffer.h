// hkfac buffers over LibTorch tensors' own memory, for the kernels (internal header).
#pragma once

#include <torch/torch.h>

#include <climits>
#include <string>

#include "hkfac/buffer.h"
#include "hkfac/error.h"

namespace hkfac::kfac_torch::detail {

// A view of a float32, contiguous CPU tensor of 1 or 2 dimensions as an hkfac buffer (a matrix
// rows x cols is dimension 0 = column, 1 = row, as hkfac/buffer.h lays it out), without copying.
// The tensor must outlive the buffer. Throws hkfac::Error naming `what` otherwise.
inline Buffer<float> buffer_of(const torch::Tensor &t, const char *what) {
  if (!t.defined() || t.scalar_type() != torch::kFloat || !t.device().is_cpu() ||
      !t.is_contiguous() || t.dim() < 1 || t.dim() > 2) {
    throw Error(std::string("kfac_torch: ") + what +
                " must be a contiguous float32 CPU tensor of 1 or 2 dimensions");
  }
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) < 1 || t.size(d) > INT_MAX) {
      throw Error(std::string("kfac_torch: ") + what + " has extent " + std::to_string(t.size(d)) +
                  " in dimension " + std::to_string(d) + " (the kernels take 1 to 2^31-1)");
    }
  }
  float *data = t.data_ptr<float>();
  if (t.dim() == 1)
    return Buffer<float>(data, static_cast<int>(t.size(0)));
  return Buffer<float>(data, static_cast<int>(t.size(1)), static_cast<int>(t.size(0)));
}

// The tensor itself when it already is float32 and contiguous, else the copy the layout needs.
inline torch::Tensor contiguous_float(const torch::Tensor &t) {
  return t.to(torch::kFloat).contiguous();
}

} // namespace hkfac::kfac_torch::detail
