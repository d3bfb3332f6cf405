// K-FAC for any LibTorch model: finds its Linear, Conv2d and Embedding layers, captures what they
// see during the user's own forward and backward, and preconditions their gradients in place.
#pragma once

#include <torch/nn/module.h>
#include <torch/serialize/archive.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hkfac/kfac/communicator.h"

namespace hkfac::kfac_torch {

// How the user's loss reduces over the batch. K-FAC's G factor is the covariance of the
// per-example output gradients of the *summed* loss (SPEC-kfac.md, "Dense layer"); a mean over
// the batch scales every captured gradient by 1/B, which `mean` undoes by counting each one B
// times, B being the size of the layer output's leading dimension.
enum class LossReduction { mean, sum };

enum class LayerKind { linear, conv2d, embedding };
const char *layer_kind_name(LayerKind kind);

struct PreconditionerOptions {
  // γ, added to the curvature's diagonal: pi-adjusted between the two factors (Cholesky route) or
  // exactly (eigen route). KfacOptimizer passes its own, possibly adaptive, value to step().
  double damping = 1e-3;
  // The factors' moving average: S <- factor_decay·S + batch statistic, w <- factor_decay·w + 1,
  // factor = S / w (so the first update is the batch statistic itself).
  double factor_decay = 0.95;
  // Factors are captured and averaged on steps 0, p, 2p, ... (p = factor_update_period): only then
  // do the forward and backward of the user pay for the capture.
  int factor_update_period = 1;
  // Inverses (or eigendecompositions) are refreshed on steps 0, q, 2q, ..., and whenever the
  // damping given to step() differs from the one they were formed with.
  int inverse_update_period = 5;
  // Eigendecompose A and G and apply (A ⊗ G + γI)⁻¹ exactly, instead of pi-adjusted damping and
  // Cholesky inverses (hkfac::kfac's use_exact_inverses).
  bool use_exact_inverses = false;
  // ECMAScript regexes matched against whole module names (as named_modules() gives them, e.g.
  // "encoder.0"): matching layers are left to the base optimizer.
  std::vector<std::string> skip_layers;
  LossReduction loss_reduction = LossReduction::mean;
  // Where the one message about layers left to the base optimizer goes (std::cerr when unset).
  std::function<void(const std::string &)> log;
  // Data parallelism: the group of processes that train the model together, each on its shard of
  // the global batch (see Preconditioner, "Data parallel"); null, or a group of one, is one
  // process. kfac::mpi_world_communicator() gives every rank of an MPI job.
  std::shared_ptr<kfac::Communicator> communicator;
  // With a communicator: each layer's inverse (or eigendecomposition) is computed on rank
  // (layer index % ranks) only and broadcast, instead of on every rank.
  bool distributed_inverses = false;
};

// A layer K-FAC preconditions: its module name and kind, and its factors' sizes (A is
// a_dim x a_dim, or a diagonal of a_dim entries for an embedding; G is g_dim x g_dim).
struct LayerInfo {
  std::string name;
  LayerKind kind;
  int64_t a_dim = 0;
  int64_t g_dim = 0;
};

// A module with parameters that K-FAC leaves to the base optimizer, and why.
struct UnhandledModule {
  std::string name;
  std::string type;   // the module's C++ type, e.g. "torch::nn::LayerNormImpl"
  std::string reason; // "a layer kind K-FAC does not know", "skipped by name", ...
};

namespace detail {
struct LayerState;
class LayerCapture;
class DataParallel;
} // namespace detail

// The K-FAC preconditioner of a torch::nn::Module, as a step before any torch::optim optimizer:
//
//   hkfac::kfac_torch::Preconditioner kfac(*model);
//   for (...) {
//     sgd.zero_grad();
//     auto loss = torch::mse_loss(model->forward(x), y);
//     loss.backward();
//     kfac.step();   // replaces each known layer's .grad() with F̂⁻¹ g
//     sgd.step();
//   }
//
// Layers. At construction it walks model.named_modules(): each torch::nn::Linear, Conv2d (groups
// 1, dilation 1) and Embedding (dense gradients) holding float32 CPU parameters gets a
// Kronecker-factored block, F ≈ A ⊗ G:
//  - Linear: A = E[x̄ x̄ᵀ] over its inputs x̄ = [x; 1] (the 1 with a bias), G = E[g gᵀ] over the
//    gradients of its output (leading dimensions flattened into rows);
//  - Conv2d (KFC, Grosse & Martens 2016): A over input patches, summed over an example's output
//    locations and averaged over examples; G over the output gradients at every location;
//  - Embedding: A = diag(token counts) / tokens (a one-hot input's covariance), G as for Linear.
// Any other module with parameters of its own is left to the base optimizer, and so are layers
// matching skip_layers; the constructor says so once (options.log), and unhandled() lists them.
//
// Capture. LibTorch's modules have no forward hooks, so the preconditioner observes the
// dispatcher: while a capture is on (a factor-update step is next), a RecordFunction callback
// sees every operator call, recognises a layer's call by its weight (aten::linear / addmm /
// matmul with the weight or its transpose, aten::conv2d, aten::embedding), keeps the call's input
// and registers a hook on its output; during the user's backward that hook receives the output
// gradient and accumulates both statistics with hkfac's covariance and patch-covariance kernels,
// reading the tensors' own memory (a copy only where the layout needs one: NCHW images to NHWC,
// non-contiguous inputs). The callback is process-wide, so a forward on any thread is seen;
// forwards without grad mode are ignored, and so are calls whose output gets no gradient. A
// layer applied twice in one forward contributes both calls' rows, as several backward passes
// (gradient accumulation) do: a factor step averages everything captured since the last one.
//
// step(): on factor steps folds the captured statistics into the moving averages, on inverse
// steps refreshes the damped inverses, then replaces each handled layer's gradient with the
// preconditioned one, in place. A layer with no estimate yet keeps its gradient.
//
// Data parallel. With options.communicator of two or more ranks, every rank builds the same model
// (same initial parameters), runs the user's forward and backward on its own shard of the global
// batch (shards may differ in size) and calls step() on the same steps, with the same damping;
// every rank then takes exactly the step one process would take on the whole batch, to float
// rounding:
//  - gradients of every parameter in params() (handled or not) are averaged across ranks, each
//    shard weighted by its rows / the global rows under LossReduction::mean (a shard's mean loss
//    gives that shard's mean gradient), summed under LossReduction::sum;
//  - the captured factor statistics are summed across ranks with their row counts before they are
//    folded into the moving averages, so the fold sees the global batch's statistics;
//  - inverses are computed on every rank, or with distributed_inverses each on one rank and
//    broadcast.
// A rank's shard rows come from set_batch_rows(); where no rank called it the shards are taken as
// equal. Every step is a fixed sequence of collectives (phases "control", "gradients",
// "curvature", "inverses"; KfacOptimizer's losses "rho"), called by all ranks in the same order;
// the constructor checks that the ranks agree on the layers, the parameters' sizes and the
// options that decide that sequence. A failure on one rank (a capture error, a failed inverse) is
// made known to all, which all throw. The state is the same on every rank, so save()/load() work
// as in one process (every rank may load the same file).
//
// The preconditioner must not outlive the model. It is not copyable.
class Preconditioner {
public:
  explicit Preconditioner(torch::nn::Module &model, PreconditionerOptions options = {});
  ~Preconditioner();
  Preconditioner(const Preconditioner &) = delete;
  Preconditioner &operator=(const Preconditioner &) = delete;

  // One K-FAC step over the gradients the user's backward left in .grad(), with the options'
  // damping or `damping` when given (>= 0, finite).
  void step();
  void step(double damping);

  // The rows of this rank's shard of the global batch, for weighting its gradients (data
  // parallel; without a communicator it has no effect). It holds until set again; rows >= 1. Set
  // it on every rank or on none (none: equal shards); a mix is an error at the next step.
  void set_batch_rows(int64_t rows);

  // The phases of step(), for KfacOptimizer. average_gradients() replaces every .grad() of
  // params() by the global batch's gradient (with a communicator; otherwise it does nothing).
  // update_curvature() updates the factors and inverses as step() does,
  // then write F̂^exp g (exp -1: the preconditioned gradient; +1: the damped curvature applied to
  // g) for every handled layer into `out`, one tensor per parameter of params() (unhandled
  // parameters get g itself for -1 and nothing, zeros, for +1).
  void average_gradients();
  void update_curvature(double damping);
  std::vector<torch::Tensor> multiply(const std::vector<torch::Tensor> &vectors, int exp,
                                      double damping) const;
  // The model's parameters in the order multiply() takes them: handled layers' (weight, then bias)
  // first, in discovery order, then every other parameter that requires a gradient.
  const std::vector<torch::Tensor> &params() const { return params_; }
  // How many of params() belong to handled layers (the rest are left to the base optimizer).
  size_t num_preconditioned_params() const { return num_preconditioned_; }

  // The global batch's value of per-shard losses: with a communicator, Σ_r weight_r·loss_r over
  // ranks with the weights average_gradients() last used (rows / global rows, or 1 under
  // LossReduction::sum); without one, the losses themselves. Collective.
  std::vector<double> global_losses(std::vector<double> shard_losses) const;

  const std::vector<LayerInfo> &layers() const { return infos_; }
  const std::vector<UnhandledModule> &unhandled() const { return unhandled_; }
  int64_t steps() const { return steps_; }
  // Whether the next forward/backward is captured (a factor step is next).
  bool capturing() const;

  // The current factor estimates of layer i (S / w): A (a_dim x a_dim; for an embedding the
  // a_dim diagonal) and G, as new tensors; undefined before the layer's first update.
  torch::Tensor factor_a(size_t i) const;
  torch::Tensor factor_g(size_t i) const;

  // The preconditioner's state (step count, every layer's moving averages and cached inverses,
  // the damping they were formed with) under `prefix` in a LibTorch archive, beside the model's
  // own (torch::save(model, ...) or module.save(archive)). load() checks the layer names, kinds
  // and sizes against this preconditioner and throws hkfac::Error naming the first mismatch,
  // before changing anything. A preconditioner that loads a state takes the same steps as the one
  // that saved it.
  void save(torch::serialize::OutputArchive &archive,
            const std::string &prefix = "kfac_torch") const;
  void load(torch::serialize::InputArchive &archive, const std::string &prefix = "kfac_torch");
  void save(const std::string &path) const;
  void load(const std::string &path);

private:
  void discover(torch::nn::Module &model);
  void check_captures();
  void fold_captured();
  void refresh_inverses(double damping);
  void precondition_grads();
  void set_capture(bool on);

  PreconditionerOptions options_;
  std::vector<std::shared_ptr<detail::LayerState>> layers_;
  std::vector<LayerInfo> infos_;
  std::vector<UnhandledModule> unhandled_;
  std::vector<torch::Tensor> params_;
  size_t num_preconditioned_ = 0;
  int64_t steps_ = 0;
  double inverse_damping_ = -1.0;
  std::unique_ptr<detail::LayerCapture> capture_;
  std::unique_ptr<detail::DataParallel> parallel_; // null in one process
};

} // namespace hkfac::kfac_torch
