// The curvature estimator: one block per layer tag, and the six ways of feeding them.
#pragma once

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "hkfac/kfac/blocks/curvature_block.h"
#include "hkfac/kfac/communicator.h"
#include "hkfac/kfac/losses.h"
#include "hkfac/kfac/model.h"

namespace hkfac::kfac {

// How the estimator produces the output-side cotangents it backpropagates. With M_i the
// output-space curvature of example i (Fisher F_i or loss Hessian H_i) and J_i the Jacobian of the
// network output, each mode estimates a block of (1/B) Σ_i J_iᵀ M_i J_i:
//  - fisher_gradients:      one pass, cotangent √w·∇ NLL(t̃) with t̃ sampled from the model's
//                           predictive distribution (unbiased for the Fisher);
//  - fisher_empirical:      one pass with the real targets (the empirical Fisher; needs targets);
//  - fisher_exact:          one pass per output coordinate k, cotangent L_F e_k (exact);
//  - fisher_curvature_prop: one pass, cotangent L_F v with random ±1 entries v (unbiased);
//  - ggn_exact / ggn_curvature_prop: the same with the loss Hessian's square root L_H.
enum class EstimationMode {
  fisher_gradients,
  fisher_empirical,
  fisher_exact,
  fisher_curvature_prop,
  ggn_exact,
  ggn_curvature_prop,
};
const char *estimation_mode_name(EstimationMode mode);
EstimationMode parse_estimation_mode(const std::string &text);
// True for the ggn_* modes (their exact curvature products use the loss Hessian).
bool is_ggn_mode(EstimationMode mode);

// Which block each tag gets (the optimizer's register_only_generic, layer_tag_to_block and
// patterns_to_skip). A tag is treated as generic when register_only_generic is set or its name
// matches one of patterns_to_skip (ECMAScript regex, whole-name match). Its block is then
// layer_tag_to_block[tag name] if present, else layer_tag_to_block[kind name] ("dense",
// "scale_and_shift", "generic", ...), else the default for its (effective) kind. A key that is
// neither a tag name of the model nor a kind name is an error (a typo would otherwise leave the
// tag on its default block without a word).
struct BlockSelection {
  bool register_only_generic = false;
  std::map<std::string, std::string> layer_tag_to_block;
  std::vector<std::string> patterns_to_skip;
  BlockOptions block_options;
};

// Where a batch sits when a global batch is split across ranks (OptimizerOptions::multi_device).
// Each rank's statistic of its rows, weighted by `fraction`, sums to the global batch's: the
// per-rank means of unequal shards average to the whole batch's mean.
struct BatchShard {
  Communicator *communicator = nullptr; // null: the batch is the whole batch
  int64_t first_example = 0;            // the global index of the batch's first row
  double fraction = 1.0;                // this batch's rows over the global batch's
};

// Owns the curvature blocks of a model and updates them from a batch.
//
// The model must have run forward on the batch and the losses must be registered on its output;
// update_curvature_estimate then drives the model's backward once per pass of the chosen mode
// and hands each block the recorded inputs and per-example output gradients. Every parameter
// must be covered by exactly one tag (a parameter K-FAC knows nothing about cannot be
// preconditioned), which the constructor checks.
class CurvatureEstimator {
public:
  CurvatureEstimator(const Model &model, EstimationMode mode, const BlockSelection &selection = {});

  EstimationMode mode() const { return mode_; }
  const std::vector<std::unique_ptr<CurvatureBlock>> &blocks() const { return blocks_; }
  CurvatureBlock &block(size_t i) { return *blocks_.at(i); }

  void init();
  // One estimate from the model's last forward: w <- ema_old·w + ema_new, S <- ema_old·S +
  // ema_new·X for every block. `rng` drives the sampled modes. Returns false, having changed no
  // block, when the batch would make some block's estimate non-finite (NaN or Inf records, or
  // finite ones whose statistics overflow float; see CurvatureBlock::keeps_estimate_finite):
  // every block is checked before any accumulates, so one bad batch cannot poison the moving
  // averages for good. `rng` gives one key per estimate; each example's draws come from its
  // global index (ExampleSeeds). With a shard's communicator, the ranks' statistics are averaged
  // (every rank ends with the global batch's estimate) and a bad batch on one rank is refused
  // by all.
  [[nodiscard]] bool update_curvature_estimate(Model &model, const LossRegistry &losses,
                                               float ema_old, float ema_new, std::mt19937 &rng,
                                               const BatchShard &shard = {});
  // With `distribute`, each rank inverts its share of the blocks (balanced by the cube of their
  // factors' sizes) and broadcasts the result; a block that fails on one rank fails on all.
  void update_inverse(float diagonal_weight, Communicator *distribute = nullptr);
  // Applies every block's multiply_matpower to the matching parameters of `vec`.
  Params multiply_matpower(const Params &vec, int exp, float diagonal_weight) const;

private:
  void invert(const std::vector<CurvatureBlock *> &blocks, float diagonal_weight) const;
  // The multi_device halves of update_curvature_estimate and update_inverse (data_parallel.cpp):
  // the blocks' estimates averaged across the shard's ranks, and the inverses shared out.
  void average_estimates(const BatchShard &shard);
  void update_inverse_distributed(float diagonal_weight, Communicator &comm);

  EstimationMode mode_;
  bool serial_inverses_ = false; // debug mode: one thread, as the optimizer's debug promises
  std::vector<std::unique_ptr<CurvatureBlock>> blocks_;
  std::vector<int> block_tag_; // the model tag index of each block
  size_t num_params_ = 0;
  std::vector<float> exchange_; // the collectives' staging buffer, kept to reuse its storage
};

// Σ_losses M (Jv) row-wise — the output-space curvature applied to a Jacobian-vector product —
// with M the Fisher (ggn = false) or the loss Hessian (ggn = true).
Matrix multiply_output_curvature(const LossRegistry &losses, const Matrix &jv, bool ggn);

} // namespace hkfac::kfac
