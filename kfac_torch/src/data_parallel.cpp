// Data-parallel K-FAC for LibTorch models: gradients, factor statistics and inverses across ranks.
#include "data_parallel.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <string>
#include <utility>

#include "hkfac/error.h"

namespace hkfac::kfac_torch::detail {
namespace {

std::string rank_name(int rank, int size) {
  return "rank " + std::to_string(rank) + " of " + std::to_string(size);
}

// The tensors' elements, flattened into one contiguous buffer of `dtype` (empty when none).
torch::Tensor concatenate(const std::vector<torch::Tensor> &parts, torch::ScalarType dtype) {
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor &t : parts)
    flat.push_back(t.reshape({-1}).to(dtype));
  return flat.empty() ? torch::empty({0}, dtype) : torch::cat(flat).contiguous();
}

void sum_in_place(kfac::Communicator &comm, torch::Tensor &buffer, const char *phase) {
  if (buffer.scalar_type() == torch::kDouble)
    comm.sum(buffer.data_ptr<double>(), static_cast<size_t>(buffer.numel()), phase);
  else
    comm.sum(buffer.data_ptr<float>(), static_cast<size_t>(buffer.numel()), phase);
}

} // namespace

DataParallel::DataParallel(std::shared_ptr<kfac::Communicator> comm, LossReduction reduction,
                           bool distributed_inverses)
    : comm_(std::move(comm)), reduction_(reduction), distributed_inverses_(distributed_inverses) {}

void DataParallel::check_same_model(int64_t layers, int64_t elements, int64_t options_code) {
  // Returns the first rank whose value differs from rank 0's, or 0.
  auto first_differing = [&](int64_t value, std::vector<int64_t> &all) {
    all = comm_->all_gather(value, "control");
    for (int r = 1; r < size(); ++r) {
      if (all[r] != all[0])
        return r;
    }
    return 0;
  };
  const std::string same = " (every rank must build the same model with the same options)";
  std::vector<int64_t> all;
  for (const auto &[value, what] : {std::pair<int64_t, const char *>{layers, " K-FAC layers"},
                                    {elements, " parameter elements"}}) {
    if (const int r = first_differing(value, all)) {
      throw Error("kfac_torch: data parallel: " + rank_name(r, size()) + " has " +
                  std::to_string(all[r]) + what + ", rank 0 has " + std::to_string(all[0]) + same);
    }
  }
  if (const int r = first_differing(options_code, all)) {
    throw Error("kfac_torch: data parallel: " + rank_name(r, size()) +
                " has other update periods, inverse route, distributed_inverses or loss reduction "
                "than rank 0" +
                same);
  }
}

double DataParallel::shard_weight() {
  const std::vector<int64_t> rows = comm_->all_gather(batch_rows_.value_or(0), "control");
  int64_t total = 0;
  int set = 0;
  for (int64_t r : rows) {
    total += r;
    set += r > 0 ? 1 : 0;
  }
  if (set != 0 && set != size()) {
    const int missing = static_cast<int>(std::find(rows.begin(), rows.end(), 0) - rows.begin());
    throw Error("kfac_torch: data parallel: " + rank_name(missing, size()) +
                " did not call set_batch_rows() while others did: call it on every rank or on "
                "none (equal shards)");
  }
  if (reduction_ == LossReduction::sum)
    return 1.0;
  if (set == 0)
    return 1.0 / static_cast<double>(size());
  return static_cast<double>(rows[static_cast<size_t>(rank())]) / static_cast<double>(total);
}

void DataParallel::average_gradients(const std::vector<torch::Tensor> &params) {
  torch::NoGradGuard no_grad;
  weight_ = shard_weight();
  // float32 parameters travel as float; any other dtype as double. A flag per parameter (after
  // the float gradients) counts the ranks on which its gradient is defined.
  std::vector<torch::Tensor> floats, others;
  torch::Tensor defined = torch::zeros({static_cast<int64_t>(params.size())}, torch::kFloat);
  for (size_t i = 0; i < params.size(); ++i) {
    const torch::Tensor &p = params[i];
    const torch::Tensor g = p.grad();
    if (g.defined())
      defined.data_ptr<float>()[i] = 1.0f;
    torch::Tensor part = g.defined() ? g.mul(weight_) : torch::zeros_like(p);
    (p.scalar_type() == torch::kFloat ? floats : others).push_back(std::move(part));
  }
  floats.push_back(defined);
  torch::Tensor f = concatenate(floats, torch::kFloat);
  torch::Tensor d = concatenate(others, torch::kDouble);
  sum_in_place(*comm_, f, "gradients");
  if (d.numel() > 0) // the same on every rank: the parameters' dtypes are the model's
    sum_in_place(*comm_, d, "gradients");
  const torch::Tensor defined_anywhere = f.narrow(0, f.numel() - defined.numel(), defined.numel());
  int64_t next_f = 0, next_d = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const torch::Tensor &p = params[i];
    const bool in_f = p.scalar_type() == torch::kFloat;
    int64_t &next = in_f ? next_f : next_d;
    const torch::Tensor sum = (in_f ? f : d).narrow(0, next, p.numel()).view(p.sizes());
    next += p.numel();
    if (defined_anywhere.data_ptr<float>()[i] == 0.0f)
      continue;
    if (!p.grad().defined())
      p.mutable_grad() = torch::zeros_like(p);
    p.grad().copy_(sum);
  }
}

std::vector<double> DataParallel::global_losses(std::vector<double> values) const {
  for (double &v : values)
    v *= weight_;
  comm_->sum(values.data(), values.size(), "rho");
  return values;
}

void DataParallel::check_captures(const std::string &local_error) {
  if (comm_->all(local_error.empty(), "control"))
    return;
  if (!local_error.empty())
    throw Error(local_error + " (on " + rank_name(rank(), size()) + ")");
  throw Error("kfac_torch: data parallel: capturing a layer failed on another rank (its error "
              "names it)");
}

void DataParallel::sum_statistics(const std::vector<std::shared_ptr<LayerState>> &layers) {
  std::vector<torch::Tensor> statistics;
  torch::Tensor rows = torch::empty({2 * static_cast<int64_t>(layers.size())}, torch::kDouble);
  double *r = rows.data_ptr<double>();
  for (const auto &l : layers) {
    std::lock_guard<std::mutex> lock(l->mutex);
    statistics.push_back(l->a_acc);
    statistics.push_back(l->g_acc);
    *r++ = static_cast<double>(l->a_rows);
    *r++ = static_cast<double>(l->g_rows);
  }
  torch::Tensor sums = concatenate(statistics, torch::kFloat);
  sum_in_place(*comm_, sums, "curvature");
  sum_in_place(*comm_, rows, "curvature");
  int64_t next = 0;
  r = rows.data_ptr<double>();
  for (const auto &l : layers) {
    std::lock_guard<std::mutex> lock(l->mutex);
    for (torch::Tensor *t : {&l->a_acc, &l->g_acc}) {
      t->view({-1}).copy_(sums.narrow(0, next, t->numel()));
      next += t->numel();
    }
    l->a_rows = std::llround(*r++);
    l->g_rows = std::llround(*r++);
  }
}

void DataParallel::invert(const std::vector<std::shared_ptr<LayerState>> &layers,
                          const std::vector<size_t> &stale, double damping, bool exact) {
  if (!distributed_inverses_) {
    for (size_t i : stale)
      layers[i]->invert(damping, exact);
    return;
  }
  auto owner = [&](size_t i) { return static_cast<int>(i % static_cast<size_t>(size())); };
  // Each rank inverts its own; every rank learns which failed before any waits on a broadcast.
  std::exception_ptr error;
  std::vector<double> failed(stale.size(), 0.0);
  for (size_t k = 0; k < stale.size() && !error; ++k) {
    if (owner(stale[k]) != rank())
      continue;
    try {
      layers[stale[k]]->invert(damping, exact);
    } catch (...) {
      error = std::current_exception();
      failed[k] = 1.0;
    }
  }
  comm_->sum(failed.data(), failed.size(), "inverses");
  for (size_t k = 0; k < stale.size(); ++k) {
    if (failed[k] == 0.0)
      continue;
    if (error)
      std::rethrow_exception(error);
    throw Error("kfac_torch: data parallel: inverting layer '" + layers[stale[k]]->name +
                "' failed on " + rank_name(owner(stale[k]), size()) + " (its error says why)");
  }
  // One broadcast per rank of all the inverses it computed. A layer without an estimate yet
  // (ema_weight 0, the same on every rank) has none to send.
  for (int root = 0; root < size(); ++root) {
    std::vector<LayerState *> sent;
    for (size_t i : stale) {
      if (owner(i) == root && layers[i]->ema_weight > 0)
        sent.push_back(layers[i].get());
    }
    if (sent.empty())
      continue;
    const bool receiving = root != rank();
    std::vector<torch::Tensor *> parts;
    for (LayerState *l : sent) {
      for (torch::Tensor *t : l->inverse_tensors(exact, receiving))
        parts.push_back(t);
    }
    std::vector<torch::Tensor> values;
    int64_t total = 0;
    for (torch::Tensor *t : parts) {
      values.push_back(*t);
      total += t->numel();
    }
    torch::Tensor buffer =
        receiving ? torch::empty({total}, torch::kFloat) : concatenate(values, torch::kFloat);
    comm_->broadcast(buffer.data_ptr<float>(), static_cast<size_t>(total), root, "inverses");
    if (!receiving)
      continue;
    int64_t next = 0;
    for (torch::Tensor *t : parts) {
      t->view({-1}).copy_(buffer.narrow(0, next, t->numel()));
      next += t->numel();
    }
    for (LayerState *l : sent)
      l->have_inverse = true;
  }
}

} // namespace hkfac::kfac_torch::detail
