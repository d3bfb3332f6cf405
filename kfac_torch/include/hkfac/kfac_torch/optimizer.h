// KfacOptimizer: K-FAC as an optimizer of its own for a LibTorch model (learning rate, momentum,
// damping fixed or adaptive, the KL-clip norm constraint, update periods).
#pragma once

#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "hkfac/kfac_torch/preconditioner.h"

namespace hkfac::kfac_torch {

struct KfacOptimizerOptions {
  double learning_rate = 1e-2;
  double momentum = 0.9;
  // γ: fixed, or adaptive damping's starting point.
  double damping = 1e-3;
  // l2: adds weight_decay·θ to every gradient and weight_decay to the curvature's diagonal, as
  // hkfac::kfac's l2_reg (the objective is the user's loss + weight_decay/2·||θ||²).
  double weight_decay = 0.0;
  // The norm constraint (kfac-pytorch's kl_clip, SPEC-kfac.md's norm_constraint) C: with
  // u = F̂⁻¹g and s = lr²·⟨u, g⟩, u is scaled by min(1, sqrt(C/s)).
  std::optional<double> kl_clip;
  // Levenberg–Marquardt adaptive damping (kfac-jax's): every damping_adaptation_interval steps,
  // ρ = (L(θ+Δ) − L(θ)) / (q(Δ) − q(0)) with the quadratic model q of K-FAC's own curvature
  // (the undamped Kronecker blocks, plus weight_decay; zero for layers left to the base
  // optimizer), and γ is multiplied by the decay when ρ > 0.75 and divided by it when ρ < 0.25,
  // within [min_damping, max_damping]. Needs step(loss, closure).
  bool use_adaptive_damping = false;
  int damping_adaptation_interval = 5;
  std::optional<double> damping_adaptation_decay; // unset: 0.95^interval
  double min_damping = 1e-8;
  double max_damping = std::numeric_limits<double>::infinity();
  // The preconditioner's periods, inverse route, skipped layers and loss reduction (its damping is
  // this struct's).
  PreconditionerOptions preconditioner;
};

struct KfacStepStats {
  int64_t step = 0; // 0-based index of this step
  double learning_rate = 0.0;
  double momentum = 0.0;
  double damping = 0.0; // the damping this step used
  double grad_norm = 0.0;
  double update_norm = 0.0;
  double clip_scale = 1.0;   // the KL-clip factor applied to u (1 when it did not bind)
  std::optional<double> rho; // on the steps adaptive damping measured it
};

// K-FAC as an optimizer: after the user's forward and backward,
//
//   KfacOptimizer opt(*model, options);
//   opt.zero_grad();
//   auto loss = loss_fn(model->forward(x), y);
//   loss.backward();
//   opt.step();                      // or, with adaptive damping:
//   opt.step(loss.item<double>(), [&] { torch::NoGradGuard g; return loss_fn(model->forward(x),
//   y).item<double>(); });
//
// One step, as the algorithm reads (SPEC-kfac.md, "Math"):
//  1. g = ∇L (+ weight_decay·θ);
//  2. the preconditioner's factor and inverse updates (its periods), with diagonal weight
//     γ + weight_decay;
//  3. u = F̂⁻¹ g for the handled layers, u = g for the parameters left to the base optimizer
//     (plain SGD with momentum);
//  4. KL clip: u ← min(1, sqrt(C / (lr²·⟨u, g⟩)))·u;
//  5. Δ = −lr·u + μ·v; v ← Δ; θ ← θ + Δ, in place;
//  6. adaptive damping: every interval steps, ρ from the closure's loss at θ + Δ, and γ updated.
//
// Data parallel (options.preconditioner.communicator; the contract is at Preconditioner): step 1
// averages the gradients across ranks, so g, u, the KL clip's ⟨u, g⟩, Δ and the quadratic model
// are the global batch's and the same on every rank; the two losses of ρ are the shards' losses
// (those given to step() and returned by the closure on each rank's own shard), reduced to the
// global batch's (rows-weighted mean, or sum). Every rank thus takes the same step and the same
// damping decision. A rank's shard rows: set_batch_rows().
class KfacOptimizer {
public:
  KfacOptimizer(torch::nn::Module &model, KfacOptimizerOptions options);

  void zero_grad();
  KfacStepStats step();
  // The same step with adaptive damping's inputs: `loss` is L(θ) of this step's forward, and
  // `closure` returns L at the parameters it is called at (θ + Δ: called after the update, on
  // the steps that measure ρ).
  KfacStepStats step(double loss, const std::function<double()> &closure);
  // Data parallel: the rows of this rank's shard (Preconditioner::set_batch_rows).
  void set_batch_rows(int64_t rows) { preconditioner_.set_batch_rows(rows); }

  const KfacOptimizerOptions &options() const { return options_; }
  Preconditioner &preconditioner() { return preconditioner_; }
  const Preconditioner &preconditioner() const { return preconditioner_; }
  double damping() const { return damping_; }
  int64_t steps() const { return steps_; }

  // The optimizer's state (step count, damping, velocities) and the preconditioner's, under
  // `prefix`, beside the model's (the model itself is the caller's to save). Loading checks the
  // velocities' shapes; a loaded optimizer takes the same steps as the one that saved.
  void save(torch::serialize::OutputArchive &archive,
            const std::string &prefix = "kfac_optimizer") const;
  void load(torch::serialize::InputArchive &archive, const std::string &prefix = "kfac_optimizer");

private:
  KfacStepStats do_step(std::optional<double> loss, const std::function<double()> *closure);

  KfacOptimizerOptions options_;
  Preconditioner preconditioner_;
  std::vector<torch::Tensor> velocity_;
  double damping_;
  int64_t steps_ = 0;
};

} // namespace hkfac::kfac_torch
