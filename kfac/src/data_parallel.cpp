// Data-parallel K-FAC (multi_device): batch shards, averages across ranks, shared-out inverses.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "hkfac/error.h"
#include "hkfac/kfac/estimator.h"
#include "hkfac/kfac/optimizer.h"

namespace hkfac::kfac {
namespace {

// Relative cost of inverting a block: the cube of each square matrix of its inverse.
double inverse_cost(const CurvatureBlock &b) {
  double cost = 0.0;
  for (const auto &m : b.state().matrices) {
    if (m.inverse)
      cost += m.rows == m.cols ? std::pow(double(m.rows), 3.0) : double(m.rows) * m.cols;
  }
  return cost;
}

} // namespace

BatchShard Optimizer::shard_of(const Batch &batch) {
  BatchShard shard;
  if (!comm_)
    return shard;
  shard.communicator = comm_.get();
  const std::vector<int64_t> rows = comm_->all_gather(batch.size(), "control");
  int64_t total = 0;
  for (int r = 0; r < comm_->size(); ++r) {
    // Every rank sees every size, so all of them refuse together.
    if (rows[r] <= 0) {
      throw Error("multi_device: rank " + std::to_string(r) + " of " +
                  std::to_string(comm_->size()) + " has an empty batch; every rank needs examples");
    }
    if (r < comm_->rank())
      shard.first_example += rows[r];
    total += rows[r];
  }
  shard.fraction = static_cast<double>(batch.size()) / static_cast<double>(total);
  return shard;
}

void Optimizer::average(double *values, size_t n, const BatchShard &shard, const char *phase) {
  for (size_t i = 0; i < n; ++i)
    values[i] *= shard.fraction;
  comm_->sum(values, n, phase);
}

void Optimizer::average(Params &values, const BatchShard &shard, const char *phase) {
  exchange_.clear();
  for (const Matrix &m : values)
    exchange_.insert(exchange_.end(), m.data(), m.data() + m.size());
  const float fraction = static_cast<float>(shard.fraction);
  for (float &x : exchange_)
    x *= fraction;
  comm_->sum(exchange_.data(), exchange_.size(), phase);
  const float *next = exchange_.data();
  for (Matrix &m : values) {
    std::copy(next, next + m.size(), m.data());
    next += m.size();
  }
}

void CurvatureEstimator::average_estimates(const BatchShard &shard) {
  // Every rank started from the same sums S, so Σ_r fraction_r·(ema_old·S + ema_new·X_r) is
  // the update by the global batch's statistic X = Σ_r fraction_r·X_r, in one allreduce.
  exchange_.clear();
  for (auto &b : blocks_) {
    for (const auto &m : b->state().matrices) {
      if (!m.inverse)
        exchange_.insert(exchange_.end(), m.matrix->data(), m.matrix->data() + m.matrix->size());
    }
  }
  const float fraction = static_cast<float>(shard.fraction);
  for (float &x : exchange_)
    x *= fraction;
  shard.communicator->sum(exchange_.data(), exchange_.size(), "curvature");
  const float *next = exchange_.data();
  for (auto &b : blocks_) {
    for (auto &m : b->state().matrices) {
      if (!m.inverse) {
        std::copy(next, next + m.matrix->size(), m.matrix->data());
        next += m.matrix->size();
      }
    }
  }
}

void CurvatureEstimator::update_inverse_distributed(float diagonal_weight, Communicator &comm) {
  // Longest first onto the least loaded rank: every rank computes the same assignment.
  std::vector<size_t> order(blocks_.size());
  std::vector<double> cost(blocks_.size());
  for (size_t b = 0; b < blocks_.size(); ++b) {
    order[b] = b;
    cost[b] = inverse_cost(*blocks_[b]);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return cost[a] > cost[b]; });
  std::vector<double> load(static_cast<size_t>(comm.size()), 0.0);
  std::vector<int> owner(blocks_.size());
  for (size_t b : order) {
    const auto least = std::min_element(load.begin(), load.end()) - load.begin();
    owner[b] = static_cast<int>(least);
    load[least] += cost[b];
  }
  std::vector<CurvatureBlock *> mine;
  for (size_t b = 0; b < blocks_.size(); ++b) {
    if (owner[b] == comm.rank())
      mine.push_back(blocks_[b].get());
  }
  // Every rank learns of a failure before any waits for a broadcast that would not come.
  std::exception_ptr error;
  double failures[2] = {0.0, 0.0}; // inverse failures (more damping may cure), other errors
  try {
    invert(mine, diagonal_weight);
  } catch (const CurvatureInverseError &) {
    error = std::current_exception();
    failures[0] = 1.0;
  } catch (...) {
    error = std::current_exception();
    failures[1] = 1.0;
  }
  comm.sum(failures, 2, "inverses");
  if (failures[0] > 0.0 || failures[1] > 0.0) {
    if (error)
      std::rethrow_exception(error);
    const std::string what = "a curvature block inverted on another rank failed";
    if (failures[1] > 0.0)
      throw Error("CurvatureEstimator::update_inverse: " + what);
    throw CurvatureInverseError("CurvatureEstimator::update_inverse: " + what);
  }
  // One broadcast per rank, of all the inverses it computed.
  for (int root = 0; root < comm.size(); ++root) {
    exchange_.clear();
    for (size_t b = 0; b < blocks_.size(); ++b) {
      if (owner[b] != root)
        continue;
      for (auto &m : blocks_[b]->state().matrices) {
        if (!m.inverse)
          continue;
        if (root != comm.rank())
          m.matrix->resize(m.rows, m.cols);
        exchange_.insert(exchange_.end(), m.matrix->data(), m.matrix->data() + m.matrix->size());
      }
    }
    comm.broadcast(exchange_.data(), exchange_.size(), root, "inverses");
    const float *next = exchange_.data();
    for (size_t b = 0; b < blocks_.size(); ++b) {
      if (owner[b] != root)
        continue;
      CurvatureBlock::State st = blocks_[b]->state();
      for (auto &m : st.matrices) {
        if (m.inverse) {
          std::copy(next, next + m.matrix->size(), m.matrix->data());
          next += m.matrix->size();
        }
      }
      *st.have_inverse = true;
    }
  }
}

} // namespace hkfac::kfac
