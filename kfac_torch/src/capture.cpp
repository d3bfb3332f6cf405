// The dispatcher observer that recognises layer calls, and the hooks that capture their output
// gradients.

// LibTorch is built with NDEBUG, and at::RecordFunction's layout depends on it (a debug-only
// member): this file must see LibTorch's layout whatever the build type.
#ifndef NDEBUG
#define NDEBUG
#endif

#include "capture.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <exception>
#include <mutex>
#include <string_view>
#include <vector>

namespace hkfac::kfac_torch::detail {
namespace {

enum class Op { linear, addmm, matmul, conv2d, embedding };

bool classify(std::string_view name, Op &op) {
  static const std::pair<std::string_view, Op> kOps[] = {{"aten::linear", Op::linear},
                                                         {"aten::addmm", Op::addmm},
                                                         {"aten::matmul", Op::matmul},
                                                         {"aten::conv2d", Op::conv2d},
                                                         {"aten::embedding", Op::embedding}};
  for (const auto &[n, o] : kOps) {
    if (name == n) {
      op = o;
      return true;
    }
  }
  return false;
}

// The layers of every live capture and the global callback, installed while any capture is
// on. A call is matched by its weight's storage (a weight and its transpose share it), read
// at the call: Module::load and to() give a parameter new storage under the same TensorImpl.
struct Registry {
  std::mutex mutex;
  std::vector<std::weak_ptr<LayerState>> layers;
  int enabled_captures = 0;
  at::CallbackHandle handle = 0;
};
Registry &registry() {
  static Registry *r = new Registry; // never destroyed: a callback may run during exit
  return *r;
}

// Depth of recognised calls on this thread: the operators a recognised call runs inside are the
// same layer's, not new calls.
thread_local int t_layer_call_depth = 0;

struct CallContext : at::ObserverContext {
  std::shared_ptr<LayerState> layer;
  LayerCall call;
};

bool same_tensor(const c10::IValue &v, const torch::Tensor &t) {
  return v.isTensor() && v.toTensor().defined() &&
         v.toTensor().unsafeGetTensorImpl() == t.unsafeGetTensorImpl();
}

// Whether `w` is layer.weight itself (linear, conv2d, embedding) or its transpose (addmm, matmul).
bool is_layer_weight(const torch::Tensor &w, const LayerState &layer, Op op) {
  switch (op) {
  case Op::linear:
    return layer.kind == LayerKind::linear &&
           w.unsafeGetTensorImpl() == layer.weight.unsafeGetTensorImpl();
  case Op::conv2d:
    return layer.kind == LayerKind::conv2d &&
           w.unsafeGetTensorImpl() == layer.weight.unsafeGetTensorImpl();
  case Op::embedding:
    return layer.kind == LayerKind::embedding &&
           w.unsafeGetTensorImpl() == layer.weight.unsafeGetTensorImpl();
  case Op::addmm:
  case Op::matmul:
    return layer.kind == LayerKind::linear && w.dim() == 2 && w.size(0) == layer.in &&
           w.size(1) == layer.out && w.stride(0) == 1 && w.stride(1) == layer.in &&
           w.storage_offset() == layer.weight.storage_offset();
  }
  return false;
}

std::shared_ptr<LayerState> find_layer(const torch::Tensor &w, Op op) {
  if (!w.defined() || !w.has_storage())
    return nullptr;
  const c10::StorageImpl *storage = w.storage().unsafeGetStorageImpl();
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const std::weak_ptr<LayerState> &weak : r.layers) {
    std::shared_ptr<LayerState> layer = weak.lock();
    if (layer && layer->capturing.load() && layer->weight.has_storage() &&
        layer->weight.storage().unsafeGetStorageImpl() == storage && is_layer_weight(w, *layer, op))
      return layer;
  }
  return nullptr;
}

// The padding of a conv2d call: its int list, or "valid" / "same" (stride 1, odd kernels: the
// layers discover() accepts).
bool conv_padding(const c10::IValue &v, const LayerState &layer, LayerCall &call) {
  if (v.isString()) {
    const std::string &s = v.toStringRef();
    if (s == "valid")
      return true;
    if (s != "same" || layer.kernel_h % 2 == 0 || layer.kernel_w % 2 == 0)
      return false;
    call.pad_h = (layer.kernel_h - 1) / 2;
    call.pad_w = (layer.kernel_w - 1) / 2;
    return true;
  }
  const std::vector<int64_t> p = v.toIntVector();
  call.pad_h = p.at(0);
  call.pad_w = p.size() > 1 ? p[1] : p[0];
  return true;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction &fn) {
  Op op = Op::linear;
  if (t_layer_call_depth > 0 || !classify(fn.name(), op) || !at::GradMode::is_enabled())
    return nullptr;
  try {
    const auto &args = fn.inputs();
    const size_t weight_arg = op == Op::embedding ? 0 : op == Op::addmm ? 2 : 1;
    const size_t input_arg = op == Op::embedding ? 1 : op == Op::addmm ? 1 : 0;
    if (args.size() <= std::max(weight_arg, input_arg) || !args[weight_arg].isTensor() ||
        !args[input_arg].isTensor()) {
      return nullptr;
    }
    std::shared_ptr<LayerState> layer = find_layer(args[weight_arg].toTensor(), op);
    if (!layer || !layer->weight.requires_grad())
      return nullptr;
    auto ctx = std::make_unique<CallContext>();
    ctx->call.input = args[input_arg].toTensor();
    if (op == Op::addmm && !(layer->has_bias && same_tensor(args[0], layer->bias)))
      return nullptr; // an addmm adding something else than the layer's bias
    if (op == Op::conv2d) {
      if (args.size() < 5)
        return nullptr;
      const std::vector<int64_t> stride = args[3].toIntVector();
      ctx->call.stride_h = stride.at(0);
      ctx->call.stride_w = stride.size() > 1 ? stride[1] : stride[0];
      if (!conv_padding(args[4], *layer, ctx->call))
        return nullptr;
    }
    ctx->layer = std::move(layer);
    ++t_layer_call_depth;
    return ctx;
  } catch (const std::exception &) {
    return nullptr; // an unexpected argument: not a call of a layer we know
  }
}

void on_end(const at::RecordFunction &fn, at::ObserverContext *base) {
  if (!base)
    return;
  --t_layer_call_depth;
  auto *ctx = static_cast<CallContext *>(base);
  const auto &outputs = fn.outputs();
  if (outputs.empty() || !outputs[0].isTensor())
    return;
  torch::Tensor output = outputs[0].toTensor();
  if (!output.defined() || !output.requires_grad())
    return;
  std::weak_ptr<LayerState> weak = ctx->layer;
  LayerCall call = std::move(ctx->call);
  output.register_hook([weak, call](const torch::TensorBase &grad) {
    std::shared_ptr<LayerState> layer = weak.lock();
    if (!layer || !grad.defined())
      return;
    try {
      layer->accumulate(call, torch::Tensor(grad));
    } catch (const std::exception &e) {
      std::lock_guard<std::mutex> lock(layer->mutex);
      if (layer->capture_error.empty())
        layer->capture_error = e.what();
    }
  });
}

} // namespace

LayerCapture::LayerCapture(std::vector<std::shared_ptr<LayerState>> layers)
    : layers_(std::move(layers)) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.layers.insert(r.layers.end(), layers_.begin(), layers_.end());
}

LayerCapture::~LayerCapture() {
  set_enabled(false);
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.layers.erase(std::remove_if(r.layers.begin(), r.layers.end(),
                                [&](const std::weak_ptr<LayerState> &weak) {
                                  const std::shared_ptr<LayerState> layer = weak.lock();
                                  return !layer || std::find(layers_.begin(), layers_.end(),
                                                             layer) != layers_.end();
                                }),
                 r.layers.end());
}

void LayerCapture::set_enabled(bool on) {
  if (on == enabled_)
    return;
  enabled_ = on;
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto &layer : layers_)
    layer->capturing.store(on);
  if (on && r.enabled_captures++ == 0) {
    at::RecordFunctionCallback callback(&on_start, &on_end);
    callback.needsInputs(true).needsOutputs(true).scopes({at::RecordScope::FUNCTION});
    r.handle = at::addGlobalCallback(std::move(callback));
  } else if (!on && --r.enabled_captures == 0) {
    at::removeCallback(r.handle);
    r.handle = 0;
  }
}

} // namespace hkfac::kfac_torch::detail
