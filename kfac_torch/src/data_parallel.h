// Data-parallel K-FAC for LibTorch models: the collectives of a preconditioner's step across ranks
// (internal header).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hkfac/kfac/communicator.h"
#include "layer_state.h"

namespace hkfac::kfac_torch::detail {

// The cross-rank half of a Preconditioner's step over a communicator of two or more ranks (the
// user-facing contract is at Preconditioner, "Data parallel").
//
// Every rank holds the same state (moving averages, inverses, parameters) and each method leaves
// it the same on every rank: reductions hand every rank the same bits, and whatever is computed
// after them is computed from identical inputs. Each method is a collective, called by every rank
// in the same order, and takes its decisions (an error, a skipped fold) from reduced values only,
// so no rank waits for a collective that another has abandoned.
//
// Why the factor statistics are summed rather than averaged: a rank's captured accumulators are
// sums over its rows (the rows counted beside them), so summing both across ranks and dividing
// gives the global batch's statistic exactly — the rows-weighted average of the shards'
// statistics — for every layer kind (an embedding's rows are its non-padding tokens, which the
// user's batch rows do not tell).
class DataParallel {
public:
  DataParallel(std::shared_ptr<kfac::Communicator> comm, LossReduction reduction,
               bool distributed_inverses);

  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }

  // Refuses ranks that disagree on what decides the sizes and order of later collectives: the
  // K-FAC layers, the parameters' element count, and `options_code` (periods, routes).
  void check_same_model(int64_t layers, int64_t elements, int64_t options_code);

  void set_batch_rows(int64_t rows) { batch_rows_ = rows; }

  // Gathers every rank's rows, then replaces each gradient of `params` by the global one:
  // Σ_r weight_r·g_r with weight_r = rows_r / global rows (LossReduction::mean) or 1 (sum). A
  // gradient undefined on every rank stays undefined; one defined on any rank becomes defined on
  // every rank (zero where it was missing), as one process would see it.
  void average_gradients(const std::vector<torch::Tensor> &params);

  // Σ_r weight_r·value_r, with the weights of the last average_gradients().
  std::vector<double> global_losses(std::vector<double> values) const;

  // Throws on every rank when capturing failed on any: that rank with its own message.
  void check_captures(const std::string &local_error);

  // Sums the statistics captured since the last fold, and their rows, across ranks.
  void sum_statistics(const std::vector<std::shared_ptr<LayerState>> &layers);

  // Inverts layers[i] for each i in `stale`: on every rank, or with distributed inverses on rank
  // i % size only and broadcast from there.
  void invert(const std::vector<std::shared_ptr<LayerState>> &layers,
              const std::vector<size_t> &stale, double damping, bool exact);

private:
  double shard_weight();

  std::shared_ptr<kfac::Communicator> comm_;
  LossReduction reduction_;
  bool distributed_inverses_;
  std::optional<int64_t> batch_rows_;
  double weight_ = 1.0; // this rank's weight in the last gradient average
};

} // namespace hkfac::kfac_torch::detail
