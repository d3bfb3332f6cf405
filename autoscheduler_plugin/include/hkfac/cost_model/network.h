// The cost-model network as a K-FAC model: the generated training kernel behind the layer-tag
// interface, so hkfac::kfac can train it.
#pragma once

#include <vector>

#include "hkfac/cost_model/training_data.h"
#include "hkfac/cost_model/weights.h"
#include "hkfac/device.h"
#include "hkfac/kernels/cost_model.h"
#include "hkfac/kfac/model.h"

namespace hkfac::cost_model {

// Parameters in kfac's row-major layout. Each is exactly the memory of the matching Halide weight
// buffer, so converting is a copy of the floats:
//   0 head1_filter 280 x 8  (row j·40 + i, column c: Halide (8, 40, 7))
//   1 head1_bias   1 x 8
//   2 head2_filter S x 24   (Halide (24, S))
//   3 head2_bias   1 x 24
//   4 conv1_filter 32 x 32  (row = input k, column = output o: Halide conv1_filter(o, k))
//   5 conv1_bias   1 x 32
kfac::Params params_from_weights(const Weights &w);
// The same buffers as the kernels take them (no copy).
kernels::CostModelWeights kernel_weights(const Weights &w);
Weights weights_from_params(const kfac::Params &p, int schedule_features);

// Batches name their schedules (schedule_batch.h).
// Tags (stages play the role of conv2d locations, their number varying per pipeline):
//  - "head1" generic: its filter goes through a sigmoid, so it is not linear in its parameters;
//    it records per-example gradients (B x 2248) for a diagonal block;
//  - "head2" conv2d over log(1 + schedule features) -> 24, "conv1" conv2d over the 32-wide
//    embedding -> 32 (Kronecker-factored blocks).
//
// forward() runs the training kernel once with a cotangent of ones, which yields the predictions
// and ∂p_n/∂(layer output) for every schedule; since each schedule's output is a scalar, any
// cotangent's layer gradients are those rows scaled by its entries, and backward() and jvp()
// finish with Eigen products.
// Examples (schedules) do not interact inside the network, as the Model contract requires; the
// reference-schedule coupling lives in the loss.
class CostModelNet : public kfac::Model {
public:
  CostModelNet(const TrainingData &data, int num_cores, Device device = default_device());

  std::vector<kfac::ParamShape> param_shapes() const override;
  const std::vector<kfac::LayerTag> &tags() const override { return tags_; }
  kfac::Matrix forward(const kfac::Params &params, const kfac::Batch &batch) override;
  kfac::Params backward(const kfac::Matrix &output_cotangent) override;
  // The records alone (the curvature passes): the per-example rows, without the parameter
  // gradients' reductions and products.
  void backward_records(const kfac::Matrix &output_cotangent) override;
  kfac::Matrix jvp(const kfac::Params &tangent) override;
  const kfac::TagRecord &record(int tag) const override { return records_.at(tag); }

private:
  // (F, batch, stages) kernel output -> (batch·stages) x F with row n·T + s.
  kfac::Matrix example_major(const Buffer<float> &b) const;
  // The training kernel with a cotangent of ones: predictions, activations and the ones_*
  // members below.
  void run_ones_pass();

  const TrainingData &data_;
  int num_cores_;
  Device device_;
  int S_;
  std::vector<kfac::LayerTag> tags_;
  std::vector<kfac::TagRecord> records_;

  // State of the last forward.
  const kfac::Params *params_ = nullptr;
  const PipelineData *pipeline_ = nullptr;
  Buffer<float> schedule_features_, runtimes_;
  int B_ = 0, T_ = 0;
  Weights weights_view_;
  kernels::CostModelTrainOutputs out_;
  // The ones pass: ∂p_n / ∂(layer output) for every schedule n.
  kfac::Matrix dp_dc1_;     // (B·T) x 32: conv1 pre-activation
  kfac::Matrix ones_head2_; // (B·T) x 24: head2 pre-activation
  kfac::Matrix ones_head1_; // B x 2248: head1's per-example parameter gradients
};

} // namespace hkfac::cost_model
