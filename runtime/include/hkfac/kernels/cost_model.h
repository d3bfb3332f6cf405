// The Hkfac autoscheduler's cost model network: inference and training kernels.
//
// Buffers use Halide's dimension order (dimension 0 innermost, contiguous):
//   pipeline_features (40, 7, stages), schedule_features (batch, S, stages) with S = 39 (CPU
//   features) or 73 (GPU features), raw and uncompressed; the six weight buffers have the shapes
//   of Halide 14's Adams2019 .weights files: head1_filter (8, 40, 7), head1_bias (8),
//   head2_filter (24, S), head2_bias (24), conv1_filter (32, 32) indexed (out, in), conv1_bias
//   (32).
// The network and its 32 cost terms are documented in generators/cost_model.h (terms are
// evaluated in double, negative features count as 0, each term is capped at 1e20); the feature
// indices are in generators/cost_model_features.h. num_cores only enters the CPU (S = 39) terms.
#pragma once

#include "hkfac/buffer.h"
#include "hkfac/device.h"

namespace hkfac::kernels {

struct CostModelWeights {
  Buffer<float> head1_filter, head1_bias, head2_filter, head2_bias, conv1_filter, conv1_bias;
};

// Zero-filled weights (host) of the right shapes for S schedule features (39 or 73).
CostModelWeights make_cost_model_weights(int num_schedule_features);

// predictions(n) = Σ_s stage_cost(n, s): the predicted runtime of each schedule in the batch.
// `predictions` must have `batch` elements. S is schedule_features' dimension 1 extent.
void cost_model_predict(const Buffer<float> &pipeline_features,
                        const Buffer<float> &schedule_features, const CostModelWeights &weights,
                        int num_cores, Buffer<float> &predictions, Device dev = default_device());

// What the training kernel produces for one batch of schedules of one pipeline.
struct CostModelTrainOutputs {
  Buffer<float> loss;           // (2): L_rel, Pen
  Buffer<float> predictions;    // (batch)
  CostModelWeights grads;       // ∂J/∂ each weight buffer, same shapes
  Buffer<float> head1_out_grad; // (8, batch, stages): ∂J/∂algo(c, s) through schedule n
  Buffer<float> head2_input;    // (S, batch, stages): log(1 + schedule features)
  Buffer<float> head2_out_grad; // (24, batch, stages): ∂J/∂ head2 pre-activation
  Buffer<float> conv1_input;    // (32, batch, stages): [algo; ReLU(head2)]
  Buffer<float> conv1_out_grad; // (32, batch, stages): ∂J/∂ conv1 pre-activation
};

// Loss, predictions, gradients and K-FAC records of
//   J = loss_weight L_rel + penalty_weight Pen + Σ_n cotangent(n) p_n,
//   L_rel = Σ_n (1 / max(p_n / p_r, 1e-10) - t_r / t_n)²,  r = argmin_n t_n (first on ties),
//   Pen = Σ_{o,n,s} min(conv1 pre-activation, 0)²,
// differentiated fully (through p_r too; p_r is floored at 1e-10, below which it carries no
// gradient). loss_weight = 1, cotangent = 0 is training; loss_weight = penalty_weight = 0 is a
// plain backward pass of `cotangent`. true_runtimes (ms) must be finite and > 0. Allocates
// `out`'s buffers (host) with the right shapes if they are empty or mis-shaped.
void cost_model_train(const Buffer<float> &pipeline_features,
                      const Buffer<float> &schedule_features, const CostModelWeights &weights,
                      int num_cores, const Buffer<float> &true_runtimes,
                      const Buffer<float> &cotangent, float loss_weight, float penalty_weight,
                      CostModelTrainOutputs &out, Device dev = default_device());

} // namespace hkfac::kernels
