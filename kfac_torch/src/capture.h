// The capture of layer calls during a LibTorch model's forward and backward (internal header).
#pragma once

#include <memory>
#include <vector>

#include "layer_state.h"

namespace hkfac::kfac_torch::detail {

// Registers a preconditioner's layers with the process-wide dispatcher observer, and turns their
// capture on and off.
//
// LibTorch's C++ modules have no forward hooks. What every module call does go through is the
// dispatcher, and at::RecordFunction callbacks observe each operator call there with its inputs
// and outputs (the profiler's mechanism). One global callback, installed while any capture is
// on, recognises a layer's call by its weight's storage: aten::linear (weight argument),
// aten::addmm / aten::matmul (the weight's transpose: what torch::nn::functional::linear calls),
// aten::conv2d, aten::embedding. Calls nested inside a recognised one (linear's addmm, conv2d's
// convolution) are not seen again. The callback keeps the call's input in a LayerCall and
// registers a hook on the call's output, which receives the output gradient in the user's
// backward and hands both to LayerState::accumulate.
//
// The hook holds the layer weakly, so a graph that outlives the preconditioner does no harm.
class LayerCapture {
public:
  explicit LayerCapture(std::vector<std::shared_ptr<LayerState>> layers);
  ~LayerCapture();
  LayerCapture(const LayerCapture &) = delete;
  LayerCapture &operator=(const LayerCapture &) = delete;

  void set_enabled(bool on);
  bool enabled() const { return enabled_; }

private:
  std::vector<std::shared_ptr<LayerState>> layers_;
  bool enabled_ = false;
};

} // namespace hkfac::kfac_torch::detail
