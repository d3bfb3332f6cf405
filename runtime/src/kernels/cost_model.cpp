// Dispatch for the cost model kernels: shape and value checks, then the library built for S.
#include "hkfac/kernels/cost_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <initializer_list>
#include <sstream>
#include <vector>

#include "dispatch.h"
#include "hkfac_k_cost_model_predict_s39_cpu.h"
#include "hkfac_k_cost_model_predict_s73_cpu.h"
#include "hkfac_k_cost_model_train_s39_cpu.h"
#include "hkfac_k_cost_model_train_s73_cpu.h"
#if HKFAC_HAVE_CUDA
#include "hkfac_k_cost_model_predict_s39_cuda.h"
#include "hkfac_k_cost_model_predict_s73_cuda.h"
#include "hkfac_k_cost_model_train_s39_cuda.h"
#include "hkfac_k_cost_model_train_s73_cuda.h"
#endif

namespace hkfac::kernels {
namespace {

constexpr int kHead1 = 8, kHead2 = 24, kConv1 = 32, kRows = 40, kTypes = 7;

// Shapes are compared without building vectors: the plugin checks a dozen arguments on each of
// thousands of calls a second, and only an error needs the shapes as text.
std::string describe_extents(const int *extents, size_t n) {
  std::ostringstream os;
  os << "(";
  for (size_t d = 0; d < n; d++)
    os << (d ? ", " : "") << extents[d];
  os << ")";
  return os.str();
}

std::string describe_extents(std::initializer_list<int> extents) {
  return describe_extents(extents.begin(), extents.size());
}

std::string describe_extents(const halide_buffer_t *b) {
  std::vector<int> e;
  for (int d = 0; d < b->dimensions; d++)
    e.push_back(b->dim[d].extent);
  return describe_extents(e.data(), e.size());
}

bool has_shape(const halide_buffer_t *b, std::initializer_list<int> extents) {
  if (b == nullptr || (b->host == nullptr && b->device == 0) ||
      b->dimensions != int(extents.size())) {
    return false;
  }
  int d = 0;
  for (int e : extents) {
    if (b->dim[d++].extent != e)
      return false;
  }
  return true;
}

// Throws naming the argument, the expected and the found shape (Halide order, dim 0 first).
void expect_shape(const halide_buffer_t *b, std::initializer_list<int> extents, const char *kernel,
                  const char *arg) {
  if (b == nullptr || (b->host == nullptr && b->device == 0)) {
    throw Error(std::string(kernel) + ": argument '" + arg + "' is an empty buffer, expected " +
                "shape " + describe_extents(extents));
  }
  if (!has_shape(b, extents)) {
    throw Error(std::string(kernel) + ": argument '" + arg + "' has shape " + describe_extents(b) +
                ", expected " + describe_extents(extents));
  }
  detail::expect_layout(b, kernel, arg);
}

// Reads the feature count from schedule_features and checks every input against it.
struct Shape {
  int batch, num_features, stages;
};

Shape check_inputs(const Buffer<float> &pipeline_features, const Buffer<float> &schedule_features,
                   const CostModelWeights &w, int num_cores, const char *k) {
  const halide_buffer_t *sf = schedule_features.raw_buffer();
  if (sf == nullptr || (sf->host == nullptr && sf->device == 0)) {
    throw Error(std::string(k) + ": argument 'schedule_features' is an empty buffer");
  }
  if (sf->dimensions != 3) {
    throw Error(std::string(k) +
                ": argument 'schedule_features' must be 3-D (batch, S, stages), "
                "got shape " +
                describe_extents(sf));
  }
  detail::expect_layout(sf, k, "schedule_features");
  const Shape s{sf->dim[0].extent, sf->dim[1].extent, sf->dim[2].extent};
  if (s.num_features != 39 && s.num_features != 73) {
    throw Error(std::string(k) + ": argument 'schedule_features' has " +
                std::to_string(s.num_features) +
                " features in dimension 1, expected 39 (CPU) or 73 (GPU)");
  }
  if (s.batch < 1 || s.stages < 1) {
    throw Error(std::string(k) + ": argument 'schedule_features' has shape " +
                describe_extents(sf) + ", expected batch and stages >= 1");
  }
  if (num_cores < 1) {
    throw Error(std::string(k) + ": argument 'num_cores' must be >= 1, got " +
                std::to_string(num_cores));
  }
  expect_shape(pipeline_features.raw_buffer(), {kRows, kTypes, s.stages}, k, "pipeline_features");
  expect_shape(w.head1_filter.raw_buffer(), {kHead1, kRows, kTypes}, k, "head1_filter");
  expect_shape(w.head1_bias.raw_buffer(), {kHead1}, k, "head1_bias");
  expect_shape(w.head2_filter.raw_buffer(), {kHead2, s.num_features}, k, "head2_filter");
  expect_shape(w.head2_bias.raw_buffer(), {kHead2}, k, "head2_bias");
  expect_shape(w.conv1_filter.raw_buffer(), {kConv1, kConv1}, k, "conv1_filter");
  expect_shape(w.conv1_bias.raw_buffer(), {kConv1}, k, "conv1_bias");
  return s;
}

// The network's inputs as kernel arguments (for expect_disjoint), then up to two more (a null
// buffer where absent). An array, not a vector: the plugin predicts thousands of times a second.
std::array<detail::NamedBuffer, 10> model_inputs(const Buffer<float> &pipeline_features,
                                                 const Buffer<float> &schedule_features,
                                                 const CostModelWeights &w,
                                                 detail::NamedBuffer more0 = {nullptr, ""},
                                                 detail::NamedBuffer more1 = {nullptr, ""}) {
  return {{{pipeline_features.raw_buffer(), "pipeline_features"},
           {schedule_features.raw_buffer(), "schedule_features"},
           {w.head1_filter.raw_buffer(), "head1_filter"},
           {w.head1_bias.raw_buffer(), "head1_bias"},
           {w.head2_filter.raw_buffer(), "head2_filter"},
           {w.head2_bias.raw_buffer(), "head2_bias"},
           {w.conv1_filter.raw_buffer(), "conv1_filter"},
           {w.conv1_bias.raw_buffer(), "conv1_bias"},
           more0,
           more1}};
}

void ensure_shape(Buffer<float> &b, std::initializer_list<int> extents) {
  if (!has_shape(b.raw_buffer(), extents)) {
    b = Buffer<float>(std::vector<int>(extents));
    fill(b, 0.0f);
  }
}

// The loss divides by runtimes: a zero, negative or non-finite one would poison the whole batch.
void check_runtimes(const Buffer<float> &true_runtimes, int batch, const char *k) {
  expect_shape(true_runtimes.raw_buffer(), {batch}, k, "true_runtimes");
  sync_to_host(detail::raw(true_runtimes), "true_runtimes");
  for (int n = 0; n < batch; n++) {
    const float t = true_runtimes(n);
    if (!(std::isfinite(t) && t > 0.0f)) {
      throw Error(std::string(k) + ": argument 'true_runtimes' must be finite and > 0, got " +
                  std::to_string(t) + " at index " + std::to_string(n));
    }
  }
}

// The CPU prediction kernels' vector width in floats (both feature sizes are built for one
// target).
int predict_lanes() {
  static const int lanes = detail::float_lanes(hkfac_k_cost_model_predict_s39_cpu_metadata());
  return lanes;
}

// A batch of fewer schedules than a vector, padded to one vector. The kernel computes whole
// vectors of schedules and reads a partial one through clamped indices, a gather per feature and
// stage, which made a batch of 1 dearer than a batch of 16 (docs/RESULTS.md#cost-model-batch-size).
// The padding repeats the last schedule and its predictions are dropped. The buffers are kept per
// thread, as a search calls this thousands of times a second.
struct PaddedBatch {
  Buffer<float> features, predictions;
};

PaddedBatch &pad_batch(const halide_buffer_t *sf, int lanes) {
  thread_local PaddedBatch p;
  const int batch = sf->dim[0].extent, features = sf->dim[1].extent, stages = sf->dim[2].extent;
  if (!p.features.data() || p.features.dim(0).extent() != lanes ||
      p.features.dim(1).extent() != features || p.features.dim(2).extent() != stages) {
    p.features = Buffer<float>(lanes, features, stages);
    p.predictions = Buffer<float>(lanes);
  }
  // Row by row through strides (the kernels take schedules contiguous in dimension 0).
  const float *in = reinterpret_cast<const float *>(sf->host);
  float *out = p.features.data();
  for (int st = 0; st < stages; ++st) {
    for (int f = 0; f < features; ++f) {
      const float *row =
          in + std::ptrdiff_t(f) * sf->dim[1].stride + std::ptrdiff_t(st) * sf->dim[2].stride;
      float *dst = out + std::ptrdiff_t(f) * p.features.dim(1).stride() +
                   std::ptrdiff_t(st) * p.features.dim(2).stride();
      for (int n = 0; n < batch; ++n)
        dst[n] = row[n];
      const float last = row[batch - 1];
      for (int n = batch; n < lanes; ++n)
        dst[n] = last;
    }
  }
  return p;
}

} // namespace

CostModelWeights make_cost_model_weights(int num_schedule_features) {
  if (num_schedule_features != 39 && num_schedule_features != 73) {
    throw Error("make_cost_model_weights: argument 'num_schedule_features' must be 39 or 73, got " +
                std::to_string(num_schedule_features));
  }
  CostModelWeights w{Buffer<float>(kHead1, kRows, kTypes),
                     Buffer<float>(kHead1),
                     Buffer<float>(kHead2, num_schedule_features),
                     Buffer<float>(kHead2),
                     Buffer<float>(kConv1, kConv1),
                     Buffer<float>(kConv1)};
  for (Buffer<float> *b : {&w.head1_filter, &w.head1_bias, &w.head2_filter, &w.head2_bias,
                           &w.conv1_filter, &w.conv1_bias}) {
    b->fill(0.0f);
  }
  return w;
}

void cost_model_predict(const Buffer<float> &pipeline_features,
                        const Buffer<float> &schedule_features, const CostModelWeights &weights,
                        int num_cores, Buffer<float> &predictions, Device dev) {
  constexpr const char *k = "cost_model_predict";
  const Shape s = check_inputs(pipeline_features, schedule_features, weights, num_cores, k);
  expect_shape(predictions.raw_buffer(), {s.batch}, k, "predictions");
  detail::expect_disjoint(k, {{predictions.raw_buffer(), "predictions"}},
                          model_inputs(pipeline_features, schedule_features, weights));
  detail::AlignedArgs args(dev);
  halide_buffer_t *pf = args.in(pipeline_features), *sf = args.in(schedule_features),
                  *h1f = args.in(weights.head1_filter), *h1b = args.in(weights.head1_bias),
                  *h2f = args.in(weights.head2_filter), *h2b = args.in(weights.head2_bias),
                  *c1f = args.in(weights.conv1_filter), *c1b = args.in(weights.conv1_bias),
                  *out = args.out(predictions), *p = out;
  PaddedBatch *padded = nullptr;
  if (dev == Device::cpu && s.batch < predict_lanes() && sf->host != nullptr &&
      sf->dim[0].stride == 1 && !(sf->flags & halide_buffer_flag_device_dirty)) {
    padded = &pad_batch(sf, predict_lanes());
    sf = padded->features.raw_buffer();
    p = padded->predictions.raw_buffer();
  }
  if (s.num_features == 39) {
    HKFAC_RUN(cost_model_predict_s39, dev, pf, sf, h1f, h1b, h2f, h2b, c1f, c1b, num_cores, p);
  } else {
    HKFAC_RUN(cost_model_predict_s73, dev, pf, sf, h1f, h1b, h2f, h2b, c1f, c1b, num_cores, p);
  }
  if (padded) {
    Buffer<float> kept(*out);
    for (int n = 0; n < s.batch; ++n)
      kept(n) = padded->predictions(n);
  }
  args.commit();
}

void cost_model_train(const Buffer<float> &pipeline_features,
                      const Buffer<float> &schedule_features, const CostModelWeights &weights,
                      int num_cores, const Buffer<float> &true_runtimes,
                      const Buffer<float> &cotangent, float loss_weight, float penalty_weight,
                      CostModelTrainOutputs &out, Device dev) {
  constexpr const char *k = "cost_model_train";
  const Shape s = check_inputs(pipeline_features, schedule_features, weights, num_cores, k);
  check_runtimes(true_runtimes, s.batch, k);
  expect_shape(cotangent.raw_buffer(), {s.batch}, k, "cotangent");
  if (!std::isfinite(loss_weight) || !std::isfinite(penalty_weight)) {
    throw Error(std::string(k) + ": arguments 'loss_weight' and 'penalty_weight' must be finite");
  }

  ensure_shape(out.loss, {2});
  ensure_shape(out.predictions, {s.batch});
  ensure_shape(out.grads.head1_filter, {kHead1, kRows, kTypes});
  ensure_shape(out.grads.head1_bias, {kHead1});
  ensure_shape(out.grads.head2_filter, {kHead2, s.num_features});
  ensure_shape(out.grads.head2_bias, {kHead2});
  ensure_shape(out.grads.conv1_filter, {kConv1, kConv1});
  ensure_shape(out.grads.conv1_bias, {kConv1});
  ensure_shape(out.head1_out_grad, {kHead1, s.batch, s.stages});
  ensure_shape(out.head2_input, {s.num_features, s.batch, s.stages});
  ensure_shape(out.head2_out_grad, {kHead2, s.batch, s.stages});
  ensure_shape(out.conv1_input, {kConv1, s.batch, s.stages});
  ensure_shape(out.conv1_out_grad, {kConv1, s.batch, s.stages});
  // The outputs the caller passed in: checked for shape by reuse (ensure_shape), and here for
  // memory shared with an input or with each other.
  detail::expect_disjoint(k,
                          {{out.loss.raw_buffer(), "loss"},
                           {out.predictions.raw_buffer(), "predictions"},
                           {out.grads.head1_filter.raw_buffer(), "grads.head1_filter"},
                           {out.grads.head1_bias.raw_buffer(), "grads.head1_bias"},
                           {out.grads.head2_filter.raw_buffer(), "grads.head2_filter"},
                           {out.grads.head2_bias.raw_buffer(), "grads.head2_bias"},
                           {out.grads.conv1_filter.raw_buffer(), "grads.conv1_filter"},
                           {out.grads.conv1_bias.raw_buffer(), "grads.conv1_bias"},
                           {out.head1_out_grad.raw_buffer(), "head1_out_grad"},
                           {out.head2_input.raw_buffer(), "head2_input"},
                           {out.head2_out_grad.raw_buffer(), "head2_out_grad"},
                           {out.conv1_input.raw_buffer(), "conv1_input"},
                           {out.conv1_out_grad.raw_buffer(), "conv1_out_grad"}},
                          model_inputs(pipeline_features, schedule_features, weights,
                                       {true_runtimes.raw_buffer(), "true_runtimes"},
                                       {cotangent.raw_buffer(), "cotangent"}));

  detail::AlignedArgs args(dev);
  halide_buffer_t *pf = args.in(pipeline_features), *sf = args.in(schedule_features),
                  *h1f = args.in(weights.head1_filter), *h1b = args.in(weights.head1_bias),
                  *h2f = args.in(weights.head2_filter), *h2b = args.in(weights.head2_bias),
                  *c1f = args.in(weights.conv1_filter), *c1b = args.in(weights.conv1_bias),
                  *t = args.in(true_runtimes), *cot = args.in(cotangent);
  halide_buffer_t *loss = args.out(out.loss), *pred = args.out(out.predictions),
                  *g_h1f = args.out(out.grads.head1_filter),
                  *g_h1b = args.out(out.grads.head1_bias),
                  *g_h2f = args.out(out.grads.head2_filter),
                  *g_h2b = args.out(out.grads.head2_bias),
                  *g_c1f = args.out(out.grads.conv1_filter),
                  *g_c1b = args.out(out.grads.conv1_bias), *h1og = args.out(out.head1_out_grad),
                  *h2in = args.out(out.head2_input), *h2og = args.out(out.head2_out_grad),
                  *c1in = args.out(out.conv1_input), *c1og = args.out(out.conv1_out_grad);
  if (s.num_features == 39) {
    HKFAC_RUN(cost_model_train_s39, dev, pf, sf, h1f, h1b, h2f, h2b, c1f, c1b, num_cores, t, cot,
              loss_weight, penalty_weight, loss, pred, g_h1f, g_h1b, g_h2f, g_h2b, g_c1f, g_c1b,
              h1og, h2in, h2og, c1in, c1og);
  } else {
    HKFAC_RUN(cost_model_train_s73, dev, pf, sf, h1f, h1b, h2f, h2b, c1f, c1b, num_cores, t, cot,
              loss_weight, penalty_weight, loss, pred, g_h1f, g_h1b, g_h2f, g_h2b, g_c1f, g_c1b,
              h1og, h2in, h2og, c1in, c1og);
  }
  args.commit();
}

} // namespace hkfac::kernels
