// How the cost model is trained: the optimizer, its settings and the batches, with their checks.
#pragma once

#include <optional>
#include <string>

#include "hkfac/device.h"

namespace hkfac::cost_model {

enum class OptimizerKind { kfac, adam };
// Throws naming the value unless it is "kfac" or "adam".
OptimizerKind parse_optimizer(const std::string &text);

struct TrainOptions {
  OptimizerKind optimizer = OptimizerKind::kfac;
  int epochs = 50;
  double rate = 1e-4; // Adam's learning rate

  int batch_size = 128; // most schedules of one pipeline per step (a random subset)
  // 0: every pipeline is one step per epoch, whatever its size. k > 0: a pipeline of n training
  // schedules is ceil(n / k) steps per epoch, so pipelines weigh by their schedules; a few apps
  // searched over many rounds are otherwise outvoted by thousands of random pipelines of 8.
  int schedules_per_visit = 0;
  unsigned seed = 0;
  int num_cores = 2;            // the machine the samples were benchmarked on
  double penalty_weight = 1e-4; // Adam: on the mean squared negative conv1 pre-activation
  double max_seconds = 0;       // stop after this much training time (0: no limit)
  // K-FAC. The defaults are fixed values found stable on this loss: the adaptive variant
  // (kfac-jax's damping, learning rate and momentum from the quadratic model) fits the training
  // schedules fast but trusts the Gauss–Newton model of a loss in 1/p too far, and predictions
  // of held-out schedules collapse (docs/RESULTS.md#cost-model-k-fac-settings).
  bool kfac_adaptive = false;
  double kfac_rate = 0.3;
  // When set, the rate falls from kfac_rate to this along a half cosine over `epochs` (kfac-jax
  // ships the same shape of schedule): a fixed rate leaves the steps' noise at a floor the
  // training loss cannot get under (docs/cost_model.md).
  std::optional<double> kfac_final_rate;
  double kfac_damping = 0.1; // initial damping when adaptive
  double kfac_momentum = 0.5;
  int kfac_inverse_period = 5;
  int kfac_curvature_period = 1;
  double kfac_l2 = 1e-5;
  // K-FAC: TopChoiceLoss at this weight and temperature added to L_rel (0: L_rel alone). L_rel
  // orders many pairs right and can still rate a slow schedule fastest; this term is about the
  // pick alone.
  double top_choice_weight = 0.0;
  double top_choice_temperature = 0.25;
  std::optional<double> kfac_norm_constraint = 3e-4;
  // OptimizerOptions::serial_kernels: the network's kernels take microseconds with the
  // optimizer's work between them, and the pool's workers, asleep by the next call, cost more to
  // wake than the second core saves; Adam's back-to-back kernel calls gain nothing from it (see
  // docs/RESULTS.md#cost-model-kernel-threads).
  bool kfac_serial_kernels = true;
  Device device = default_device();
};

// Throws hkfac::Error unless every option is in its range and the options agree with each
// other. The message starts with the option's name, which is also the command-line flag's of
// retrain_cost_model (which prefixes "--").
void validate(const TrainOptions &options);

// K-FAC's learning rate at a 0-based step of a run of `total_steps`: kfac_rate throughout, or
// with kfac_final_rate the half cosine from kfac_rate at step 0 to kfac_final_rate at the last.
double scheduled_kfac_rate(const TrainOptions &options, int step, int total_steps);

} // namespace hkfac::cost_model
