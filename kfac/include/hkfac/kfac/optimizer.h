// The K-FAC optimizer: options, the value-function contract, step statistics, and the step.
#pragma once

#include <any>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "hkfac/kfac/communicator.h"
#include "hkfac/kfac/estimator.h"
#include "hkfac/kfac/losses.h"
#include "hkfac/kfac/model.h"

namespace hkfac::kfac {

// What the user's value function may use besides registering losses. rng(), state() and
// set_aux() are only available when the matching value_func_has_* option is set (the same
// contract as kfac_ferminet_alpha's flags); using one without its flag throws hkfac::Error.
class ValueContext {
public:
  ValueContext(LossRegistry &losses, std::mt19937 *rng, std::any *state, bool has_aux)
      : losses_(losses), rng_(rng), state_(state), has_aux_(has_aux) {}
  LossRegistry &losses() { return losses_; }
  std::mt19937 &rng();
  std::any &state();
  void set_aux(const std::string &name, double value);
  const std::map<std::string, double> &aux() const { return aux_; }

private:
  LossRegistry &losses_;
  std::mt19937 *rng_;
  std::any *state_;
  bool has_aux_;
  std::map<std::string, double> aux_;
};

// Registers the losses on the model's outputs for a batch (and may set aux values). The objective
// the optimizer minimises is
//   L(θ) = (1/B) Σ_i Σ_losses loss_i + l2_reg/2 · ||θ||²,
// so l2_reg is both part of the value and added to the curvature's diagonal.
using ValueFunction =
    std::function<void(const Matrix &outputs, const Batch &batch, ValueContext &ctx)>;

// A per-step quantity as a function of the step number (0-based).
using Schedule = std::function<double(int step)>;

struct OptimizerOptions {
  float l2_reg = 0.0f;
  bool value_func_has_aux = false;
  bool value_func_has_state = false;
  bool value_func_has_rng = false;
  // Each quantity comes from its schedule or from StepValues, never both (an error), unless it is
  // adaptive. The momentum is 0 on the first step whatever the schedule says. Each value must be
  // finite within float range, and the learning rate and the damping >= 0 (the update is
  // Δ = -learning_rate · u + momentum · v): step() checks them before it changes any
  // state, with an hkfac::Error naming the value and where it came from.
  Schedule learning_rate_schedule;
  Schedule momentum_schedule;
  Schedule damping_schedule;
  double min_damping = 1e-8;
  double max_damping = std::numeric_limits<double>::infinity();
  // C in: u = F̂⁻¹g, s = lr²⟨u, g⟩, u scaled by min(1, sqrt(C/s)). Not with an adaptive
  // learning rate (an error).
  std::optional<double> norm_constraint;
  int num_burnin_steps = 10;
  EstimationMode estimation_mode = EstimationMode::fisher_gradients;
  double curvature_ema = 0.95;
  int inverse_update_period = 5;
  int curvature_update_period = 1;
  // The curvature batch (the "curvature mini-batch" of Martens' Hessian-free optimisation): the
  // factor statistics (burn-in included) and the exact curvature products of the quadratic model
  // and rho use only the first curvature_batch_size examples of each batch; the loss and the
  // gradient use all of it. 0 = the whole batch. Curvature is an average over examples, so a
  // subset estimates the same matrix with more noise, at a fraction of the cost: the factor
  // backward pass and the Jacobian-vector products scale with it, for one extra forward pass over
  // the subset. The batch should be shuffled (the subset is its head).
  int curvature_batch_size = 0;
  bool register_only_generic = false;
  // Tag name or kind ("dense", "dense_1", ...) -> block type ("NaiveFull", "naive_diagonal", ...).
  std::map<std::string, std::string> layer_tag_to_block;
  // Regexes over tag names; matching tags are treated as generic.
  std::vector<std::string> patterns_to_skip;
  // Applied to every batch pulled from the iterator, burn-in included.
  std::function<Batch(const Batch &)> batch_process_func;
  // Data-parallel K-FAC: the ranks of `communicator` (MPI_COMM_WORLD when unset; builds without
  // MPI refuse the option) each hold the same parameters and step on their shard of the global
  // batch (shards may differ in size; none may be empty). Everything a step decides from is
  // averaged across ranks, weighted by shard size — the loss and aux values, the gradient, every
  // block's curvature statistics, the quadratic model's curvature products and rho's loss — so
  // all ranks take the step one process would take on the whole batch, rejections included.
  // The sampled modes draw by global example index (ExampleSeeds), so that holds for them too.
  // Every rank must call step(), evaluate(), gradient() and the checkpoint functions together,
  // and its value function must set the same aux names.
  // Not with curvature_batch_size (an error); value_func_has_rng draws the same numbers on
  // every rank, not per example.
  bool multi_device = false;
  std::shared_ptr<Communicator> communicator;
  // With multi_device: each rank inverts a share of the blocks (balanced by cost) and broadcasts
  // its inverses, instead of every rank inverting all (the same result; less time for more
  // traffic: see RESULTS.md#mpi-k-fac).
  bool distributed_inverses = false;
  // Single-threaded kernels during the optimizer's calls (as serial_kernels), plus extra checks
  // (shapes every step, finite factors after every update).
  bool debug = false;
  // Run every kernel of the optimizer's calls (step, gradient, evaluate: the model's passes and
  // the curvature's work alike) on the calling thread (hkfac::SerialKernels), and the factor
  // inverses too. For small models: their kernels take microseconds with other work in between,
  // and waking Halide's worker pool for each costs more than the second core gives back (see
  // docs/RESULTS.md#cost-model-kernel-threads). Other threads' kernels are unaffected; the
  // results are the same bits.
  bool serial_kernels = false;

  // kfac-jax additions.
  bool use_adaptive_damping = false;
  // The starting point of adaptive damping; with it, must lie in [min_damping, max_damping].
  double initial_damping = 1e-3;
  int damping_adaptation_interval = 5;
  // rho costs a forward pass at θ+Δ and a Jacobian-vector product. As in kfac-jax it is computed
  // only where adaptive damping reads it (every damping_adaptation_interval steps), unless this
  // is set (e.g. to log it every step).
  bool always_compute_rho = false;
  // Per-adaptation factor; unset = 0.95^damping_adaptation_interval.
  std::optional<double> damping_adaptation_decay;
  bool use_adaptive_learning_rate = false;
  bool use_adaptive_momentum = false;
  bool use_exact_inverses = false;

  // Factor (finite, > 1) by which damping grows when a step is rejected for the curvature's sake:
  // a non-finite update or loss after it, or a damped curvature block that could not be
  // inverted. Adaptive damping then goes on from the raised value; a scheduled or StepValues
  // damping is multiplied by the product of these raises for the rest of the run. A bad batch
  // raises nothing (see Optimizer).
  double rejected_step_damping_factor = 10.0;
  unsigned seed = 0;
};

// Explicit per-step values, for quantities without a schedule.
struct StepValues {
  std::optional<double> learning_rate;
  std::optional<double> momentum;
  std::optional<double> damping;
};

struct StepTimings {
  double forward_backward_s = 0.0;
  double curvature_update_s = 0.0;
  double inverse_s = 0.0;
  double precondition_s = 0.0;
  // Choosing and checking the update: the quadratic model's curvature products (adaptive learning
  // rate / momentum), rho's second forward pass, and applying Δ.
  double update_s = 0.0;
  double total_s = 0.0;
};

struct StepStats {
  int step = 0; // 0-based index of this step
  double loss = 0.0;
  double learning_rate = 0.0;
  double momentum = 0.0;
  double damping = 0.0;
  // Reduction ratio (L(θ+Δ) - L(θ)) / (q(Δ) - q(0)) on this step's batch, q the quadratic model
  // with the exact curvature (+ l2_reg). Absent on the steps that do not compute it (see
  // always_compute_rho) and where the update is zero (0/0), rather than a NaN stand-in, so it
  // cannot be mistaken for a value; 0 for a rejected step.
  std::optional<double> rho;
  std::map<std::string, double> aux;
  double grad_norm = 0.0;
  double update_norm = 0.0;
  // This step changed no parameters: its batch was bad (a non-finite loss, gradient or curvature
  // statistics at θ; nothing else changes either), or its update or the loss after it was
  // non-finite, or a damped curvature block could not be inverted (see inverse_failures; these
  // raise the damping).
  bool rejected = false;
  int rejected_steps = 0;   // total so far
  int inverse_failures = 0; // total so far: inverse updates refused by a block (each rejected)
  bool burned_in = false;   // burn-in ran in this call
  StepTimings timings;
};

// K-FAC (Martens & Grosse 2015) for a Model with registered losses.
//
// One step(), as the algorithm reads:
//  0. resolve lr, μ and the damping, and check them (before anything changes);
//  1. (first call only) burn-in: pull num_burnin_steps batches and average their curvature
//     (ema_old = 1, ema_new = 1/n), touching nothing else; a batch whose statistics would not be
//     finite is left out of the mean, and an exception partway (from the data iterator, say)
//     drops the partial mean, so the next call starts burn-in afresh;
//  2. pull a batch; forward, register losses, loss and gradient g (+ l2_reg·θ);
//  3. every curvature_update_period steps, update the curvature estimate (ema_old =
//     curvature_ema, ema_new = 1), on the curvature subset if curvature_batch_size is set;
//  4. every inverse_update_period steps (and after a damping raise), refresh the block inverses
//     with diagonal_weight = l2_reg + damping; a block that cannot invert its damped estimate
//     (CurvatureInverseError) rejects the step as in 7;
//  5. precondition: u = F̂⁻¹ g;
//  6. choose the update Δ = -lr·u + μ·v — lr, μ from schedules / StepValues (u norm-constrained),
//     or from the 2x2 quadratic model with exact curvature products (adaptive learning rate /
//     momentum; u = 0, as at a zero gradient, gives lr = 0);
//  7. reject Δ if non-finite; otherwise compute rho (where needed and Δ ≠ 0; a non-finite loss at
//     θ+Δ is then rejected too), apply θ <- θ + Δ and v <- Δ **in place**, and adapt damping
//     (Levenberg–Marquardt) every interval steps where Δ ≠ 0.
// Rejections in 4 and 7 are the curvature's: the damping is raised by
// rejected_step_damping_factor for the next try, or, when it is 0 or at max_damping already,
// step() ends with an hkfac::Error rather than rejecting forever. A batch whose loss or gradient
// at θ (step 2) or curvature statistics (step 3, checked for every block before any takes them:
// NaN or Inf records, or finite ones whose products overflow float) are not finite is rejected
// as a bad batch: nothing changes but the step count, since damping cannot mend data. On 3 bad
// batches in a row the parameters themselves are broken and step() throws an hkfac::Error.
// A step is not a transaction: an exception after step 3 (the value function throwing at θ+Δ,
// say) keeps that curvature update, as one more EMA update from the batch, but leaves θ, v, the
// damping and the step count as they were. Undoing it would need a copy of every factor.
class Optimizer {
public:
  Optimizer(Model &model, ValueFunction value_func, OptimizerOptions options);

  // One step; updates `params` and the optimizer state in place. `next_batch` is the data
  // iterator (called num_burnin_steps + 1 times on the first step, once afterwards).
  StepStats step(Params &params, const std::function<Batch()> &next_batch,
                 const StepValues &values = {});

  const OptimizerOptions &options() const { return options_; }
  const CurvatureEstimator &estimator() const { return estimator_; }
  CurvatureEstimator &estimator() { return estimator_; }
  int step_count() const { return step_; }
  double damping() const { return damping_; }
  const Params &velocity() const { return velocity_; }
  std::any &value_func_state() { return state_; }
  int inverse_updates() const { return inverse_updates_; }
  int inverse_failures() const { return inverse_failures_; }
  int curvature_updates() const { return curvature_updates_; }

  // The ranks stepping together (multi_device), or null.
  Communicator *communicator() const { return comm_.get(); }

  // Checkpoints. save_checkpoint writes `params` and all of this optimizer's state — step count,
  // burn-in, damping, velocity, counters, both random generators, and every curvature block's
  // estimate and cached inverse — to `path` (replaced atomically; little-endian whatever the
  // host). An optimizer built with the same model structure and options that loads the file
  // takes bit-identical steps on the same batches (on the same host and thread count). The value
  // function's own state (value_func_has_state) and the data position are the caller's to keep.
  // The file ends in a checksum that load_checkpoint verifies, and save refuses state that load
  // would refuse (non-finite values), writing nothing.
  // `metadata` is the caller's, stored with the state and covered by the checksum: e.g. the
  // settings a run was started with (options, batch size, data), which the optimizer cannot
  // check for itself, for the caller to compare before it resumes (checkpoint_metadata).
  void save_checkpoint(const std::string &path, const Params &params,
                       const std::string &metadata = {}) const;
  // Restores a checkpoint into this optimizer and `params`. Everything is checked against this
  // optimizer before anything changes — format, version, checksum, estimation mode, block types,
  // tags and every extent — and a mismatch is an hkfac::Error naming the field, what was
  // expected and what the file holds; on error neither the optimizer nor `params` is modified.
  void load_checkpoint(const std::string &path, Params &params);
  // The metadata a checkpoint was saved with (empty for files of format versions before 3), after
  // the same size and checksum checks as load_checkpoint; changes nothing.
  std::string checkpoint_metadata(const std::string &path) const;

  // With multi_device, rank 0 writes the file and every rank loads it (a shared file system);
  // a failure on any rank is an error on all.
  //
  // The objective's value (and gradient) at `params` on `batch`, as the optimizer sees it; with
  // multi_device, `batch` is this rank's shard and the result the global batch's.
  double evaluate(const Params &params, const Batch &batch,
                  std::map<std::string, double> *aux = nullptr);
  Params gradient(const Params &params, const Batch &batch);

private:
  struct Resolved {
    double learning_rate = 0.0, momentum = 0.0, damping = 0.0;
  };
  Resolved resolve(const StepValues &values) const;
  Batch pull(const std::function<Batch()> &next_batch);
  // Forward + value function; fills `losses`; returns the objective (when `with_value`).
  // `params_squared_norm`, when given, is Σ params² already known (for the L2 term).
  double forward(const Params &params, const Batch &batch, LossRegistry &losses,
                 std::map<std::string, double> *aux, bool with_value,
                 const double *params_squared_norm = nullptr);
  Params backward_gradient(const Params &params, const LossRegistry &losses);
  // Whether curvature is estimated on a head of `batch` (curvature_batch_size is set and smaller
  // than the batch), and that head; call curvature_subset only when it is.
  bool uses_curvature_subset(const Batch &batch) const;
  Batch curvature_subset(const Batch &batch) const;
  void burn_in(const Params &params, const std::function<Batch()> &next_batch);

  // step()'s phases, in the order it runs them (the numbers of the comment above the class).
  // They hand one step's values on in a StepState; a phase that rejects the step returns the
  // rejected step's stats, and step() returns them.
  struct StepState;                                         // defined in optimizer.cpp
  std::optional<StepStats> loss_and_gradient(StepState &s); // 2
  std::optional<StepStats> curvature_update(StepState &s);  // 3
  std::optional<StepStats> inverses_update(StepState &s);   // 4
  void precondition(StepState &s);                          // 5
  void step_coefficients(StepState &s);                     // 6
  std::optional<StepStats> parameters_update(StepState &s); // 7
  void damping_update(StepState &s);                        // 7, its last part
  StepStats accepted(StepState &s);
  // The rejections: of the step alone, of a bad batch, and of a step too long for the damping.
  StepStats reject(StepState &s);
  StepStats reject_batch(StepState &s, const std::string &what, const char *was);
  StepStats reject_for_damping(StepState &s, const std::string &why);
  // The exact curvature at the curvature point, which is measured on first use.
  const LossRegistry &at_curvature_point(StepState &s);
  Matrix jvp(StepState &s, const Params &tangent);
  double curvature_form(const StepState &s, const Matrix &ja, const Matrix &jb) const;
  void write_checkpoint(const std::string &path, const Params &params,
                        const std::string &metadata) const;
  void read_checkpoint(const std::string &path, Params &params);
  // This rank's place in the global batch (multi_device; the whole batch otherwise). It and
  // average() are defined in data_parallel.cpp.
  BatchShard shard_of(const Batch &batch);
  // Σ_r fraction_r·x_r across ranks, in place (multi_device only).
  void average(double *values, size_t n, const BatchShard &shard, const char *phase);
  void average(Params &values, const BatchShard &shard, const char *phase);
  // The most bytes a checkpoint of this optimizer can have, so a larger file is refused unread.
  size_t checkpoint_size_limit() const;
  // Throws unless `params` fit the model; errors start with `what`.
  void check_params(const Params &params, const char *what = "Optimizer::step") const;

  Model &model_;
  ValueFunction value_func_;
  OptimizerOptions options_;
  std::shared_ptr<Communicator> comm_; // multi_device's ranks; null on a single device
  CurvatureEstimator estimator_;
  std::mt19937 rng_;
  std::mt19937 value_rng_;
  std::any state_;
  Params velocity_;
  int step_ = 0;
  bool burned_in_ = false;
  double damping_ = 0.0;     // adaptive damping's current value
  double damping_boost_ = 1; // multiplier from curvature rejections (non-adaptive damping)
  bool force_inverse_update_ = false;
  int rejected_steps_ = 0;
  int inverse_failures_ = 0;
  // Consecutive bad batches (loss, gradient or curvature statistics at the current parameters
  // not finite); at kMaxNonfiniteBatches step() throws instead of rejecting.
  int nonfinite_batches_ = 0;
  static constexpr int kMaxNonfiniteBatches = 3;
  int inverse_updates_ = 0;
  int curvature_updates_ = 0;
  // The step under test: its update and the parameters it leads to, written in one pass and
  // swapped in when accepted. Kept between steps so that pass reuses their storage.
  Params next_velocity_;
  Params next_params_;
  std::vector<float> exchange_; // average()'s staging buffer
};

} // namespace hkfac::kfac
