// Data-parallel kfac_torch under `mpirun -np 2`: every rank trains each model twice, alone on the
// whole global batch (the reference) and with the other ranks on its shard of it, and the
// parameters must agree after every step.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "hkfac/error.h"
#include "hkfac/kfac/communicator.h"
#include "hkfac/kfac_torch/optimizer.h"
#include "hkfac/kfac_torch/preconditioner.h"

namespace hkfac::kfac_torch {
namespace {

constexpr int kSteps = 10;
constexpr int64_t kGlobalRows = 16;

std::shared_ptr<kfac::Communicator> world() {
  static std::shared_ptr<kfac::Communicator> comm = kfac::mpi_world_communicator();
  return comm;
}

// An MLP with a LayerNorm (parameters K-FAC leaves to the base optimizer, which must be averaged
// too), a convolutional net, and an embedding model.
enum class ModelKind { mlp, conv, embedding };
const char *model_name(ModelKind kind) {
  return kind == ModelKind::mlp ? "mlp" : kind == ModelKind::conv ? "conv" : "embedding";
}

torch::nn::Sequential make_model(ModelKind kind) {
  namespace nn = torch::nn;
  torch::manual_seed(7); // the same initial parameters in every run on every rank
  switch (kind) {
  case ModelKind::mlp:
    return nn::Sequential(nn::Linear(6, 8), nn::LayerNorm(nn::LayerNormOptions({8})), nn::ReLU(),
                          nn::Linear(8, 3));
  case ModelKind::conv:
    return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(2, 3, 3).padding(1)), nn::ReLU(),
                          nn::Flatten(), nn::Linear(3 * 5 * 5, 3));
  case ModelKind::embedding:
    return nn::Sequential(nn::Embedding(10, 4), nn::Flatten(), nn::Linear(4 * 3, 3));
  }
  return nullptr;
}

struct Batch {
  torch::Tensor x, y;
  Batch rows(int64_t first, int64_t n) const {
    return {x.narrow(0, first, n), y.narrow(0, first, n)};
  }
};

// Global batch k, the same on every rank: each is drawn from its own seed.
Batch global_batch(ModelKind kind, int k) {
  torch::manual_seed(1000 + k);
  switch (kind) {
  case ModelKind::mlp:
    return {torch::randn({kGlobalRows, 6}), torch::randn({kGlobalRows, 3})};
  case ModelKind::conv:
    return {torch::randn({kGlobalRows, 2, 5, 5}), torch::randint(0, 3, {kGlobalRows})};
  case ModelKind::embedding:
    return {torch::randint(0, 10, {kGlobalRows, 3}), torch::randint(0, 3, {kGlobalRows})};
  }
  return {};
}

torch::Tensor loss_of(ModelKind kind, const torch::Tensor &out, const Batch &b,
                      LossReduction reduction) {
  const torch::Tensor per_row =
      kind == ModelKind::mlp
          ? (out - b.y).pow(2).sum(1)
          : torch::nn::functional::cross_entropy(
                out, b.y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  return reduction == LossReduction::mean ? per_row.mean() : per_row.sum();
}

enum class Trainer { preconditioner_and_sgd, kfac_optimizer };

struct Case {
  ModelKind model = ModelKind::mlp;
  Trainer trainer = Trainer::preconditioner_and_sgd;
  bool unequal_shards = false; // rank 0 gets 5 rows, the others split the rest
  LossReduction reduction = LossReduction::mean;
  bool distributed_inverses = false;
  bool exact_inverses = false;

  std::string describe() const {
    std::ostringstream s;
    s << model_name(model) << ", "
      << (trainer == Trainer::kfac_optimizer ? "KfacOptimizer" : "Preconditioner+SGD") << ", "
      << (unequal_shards ? "unequal" : "equal") << " shards"
      << (reduction == LossReduction::sum ? ", summed loss" : "")
      << (distributed_inverses ? ", distributed inverses" : "")
      << (exact_inverses ? ", exact inverses" : "");
    return s.str();
  }
};

// Rows [first, first + n) of the global batch are this rank's.
struct Shard {
  int64_t first = 0, n = kGlobalRows;
};

// Equal shards (the first ranks one row more where it does not divide), or rank 0 with 5 rows
// and the others sharing the rest equally.
Shard shard_of(const Case &c, const kfac::Communicator &comm) {
  const int64_t size = comm.size();
  const int64_t first_rows =
      c.unequal_shards ? 5 : kGlobalRows / size + (kGlobalRows % size ? 1 : 0);
  std::vector<int64_t> rows(static_cast<size_t>(size), first_rows);
  const int64_t rest = kGlobalRows - first_rows;
  for (int64_t r = 1; r < size; ++r)
    rows[r] = rest / (size - 1) + (r - 1 < rest % (size - 1) ? 1 : 0);
  Shard s;
  s.first = 0;
  for (int r = 0; r < comm.rank(); ++r)
    s.first += rows[r];
  s.n = rows[comm.rank()];
  return s;
}

// The parameters after each step, flattened, and what the run's decisions were.
struct Trace {
  std::vector<torch::Tensor> params;
  std::vector<double> damping;
  std::vector<double> clip_scale;
};

torch::Tensor flat_params(torch::nn::Module &m) {
  std::vector<torch::Tensor> parts;
  for (const torch::Tensor &p : m.parameters())
    parts.push_back(p.detach().reshape({-1}).clone());
  return torch::cat(parts);
}

// kSteps steps of `c`: alone on the global batch without `comm`, on this rank's shard with it.
Trace train(const Case &c, const std::shared_ptr<kfac::Communicator> &comm) {
  torch::set_num_threads(1);
  torch::nn::Sequential model = make_model(c.model);
  PreconditionerOptions po;
  po.damping = 1e-2;
  po.inverse_update_period = 3;
  po.use_exact_inverses = c.exact_inverses;
  po.loss_reduction = c.reduction;
  po.communicator = comm;
  po.distributed_inverses = c.distributed_inverses;
  po.log = [](const std::string &) {};
  const Shard shard = comm ? shard_of(c, *comm) : Shard{};
  // Equal shards rely on the default; unequal ones must be told.
  const bool tell_rows = comm && c.unequal_shards;
  Trace run;
  auto shard_loss = [&](const Batch &b) {
    return loss_of(c.model, model->forward(b.x), b, c.reduction);
  };
  if (c.trainer == Trainer::preconditioner_and_sgd) {
    Preconditioner kfac(*model, po);
    if (tell_rows)
      kfac.set_batch_rows(shard.n);
    // A summed loss's gradient is the global rows times the mean's: the same steps need that
    // much less learning rate.
    const double lr = c.reduction == LossReduction::sum ? 0.1 / kGlobalRows : 0.1;
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(lr).momentum(0.5));
    for (int k = 0; k < kSteps; ++k) {
      const Batch b = global_batch(c.model, k).rows(shard.first, shard.n);
      sgd.zero_grad();
      shard_loss(b).backward();
      kfac.step();
      sgd.step();
      run.params.push_back(flat_params(*model));
    }
    return run;
  }
  KfacOptimizerOptions o;
  o.learning_rate = 0.2;
  o.momentum = 0.5;
  o.damping = 1e-2;
  o.weight_decay = 1e-3;
  o.kl_clip = 1e-3;
  o.use_adaptive_damping = true;
  o.damping_adaptation_interval = 2;
  o.damping_adaptation_decay = 0.5;
  o.preconditioner = po;
  KfacOptimizer opt(*model, o);
  if (tell_rows)
    opt.set_batch_rows(shard.n);
  for (int k = 0; k < kSteps; ++k) {
    const Batch b = global_batch(c.model, k).rows(shard.first, shard.n);
    opt.zero_grad();
    torch::Tensor loss = shard_loss(b);
    loss.backward();
    const KfacStepStats st = opt.step(loss.item<double>(), [&] {
      torch::NoGradGuard no_grad;
      return shard_loss(b).item<double>();
    });
    run.params.push_back(flat_params(*model));
    run.damping.push_back(opt.damping());
    run.clip_scale.push_back(st.clip_scale);
  }
  return run;
}

// The data-parallel run of `c` must take the reference's steps, step by step.
void expect_same_steps(const Case &c) {
  SCOPED_TRACE(c.describe() + ", rank " + std::to_string(world()->rank()));
  const Trace reference = train(c, nullptr);
  const Trace parallel = train(c, world());
  for (int k = 0; k < kSteps; ++k) {
    const torch::Tensor &want = reference.params[k], &got = parallel.params[k];
    const double diff = (got - want).abs().max().item<double>();
    ASSERT_TRUE(torch::allclose(got, want, /*rtol=*/1e-5, /*atol=*/1e-5))
        << "step " << k << ": parameters differ by up to " << diff;
  }
  EXPECT_EQ(parallel.damping, reference.damping);
  for (int k = 0; k < static_cast<int>(reference.clip_scale.size()); ++k)
    EXPECT_NEAR(parallel.clip_scale[k], reference.clip_scale[k], 1e-4) << "step " << k;
}

const ModelKind kModels[] = {ModelKind::mlp, ModelKind::conv, ModelKind::embedding};

TEST(KfacTorchDataParallel, PreconditionerAndSgd_ShardsEqualTheWholeBatch) {
  for (ModelKind m : kModels) {
    for (bool unequal : {false, true}) {
      Case c;
      c.model = m;
      c.unequal_shards = unequal;
      expect_same_steps(c);
    }
  }
}

TEST(KfacTorchDataParallel, PreconditionerAndSgd_SummedLoss_ShardsEqualTheWholeBatch) {
  Case c;
  c.unequal_shards = true;
  c.reduction = LossReduction::sum;
  expect_same_steps(c);
}

TEST(KfacTorchDataParallel, KfacOptimizer_ClipAndAdaptiveDamping_ShardsEqualTheWholeBatch) {
  for (ModelKind m : kModels) {
    for (bool unequal : {false, true}) {
      Case c;
      c.model = m;
      c.trainer = Trainer::kfac_optimizer;
      c.unequal_shards = unequal;
      expect_same_steps(c);
    }
  }
}

TEST(KfacTorchDataParallel, KfacOptimizer_ExercisesTheClipAndTheDampingDecisions) {
  // Otherwise the comparisons above could pass without the global ρ and ⟨u, g⟩ mattering.
  Case c;
  c.trainer = Trainer::kfac_optimizer;
  const Trace reference = train(c, nullptr);
  EXPECT_LT(*std::min_element(reference.clip_scale.begin(), reference.clip_scale.end()), 1.0);
  EXPECT_NE(reference.damping.front(), reference.damping.back());
}

TEST(KfacTorchDataParallel, KfacOptimizer_DistributedInverses_ShardsEqualTheWholeBatch) {
  for (ModelKind m : kModels) {
    for (bool exact : {false, true}) {
      Case c;
      c.model = m;
      c.trainer = Trainer::kfac_optimizer;
      c.unequal_shards = true;
      c.distributed_inverses = true;
      c.exact_inverses = exact;
      expect_same_steps(c);
    }
  }
}

TEST(KfacTorchDataParallel, RanksWithDifferentModels_AreRefusedOnEveryRank) {
  torch::nn::Sequential model = world()->rank() == 0
                                    ? make_model(ModelKind::mlp)
                                    : torch::nn::Sequential(torch::nn::Linear(6, 3));
  PreconditionerOptions po;
  po.communicator = world();
  po.log = [](const std::string &) {};
  try {
    Preconditioner kfac(*model, po);
    FAIL() << "expected hkfac::Error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("K-FAC layers"), std::string::npos) << e.what();
  }
}

TEST(KfacTorchDataParallel, BatchRowsSetOnSomeRanksOnly_AreRefusedOnEveryRank) {
  torch::nn::Sequential model = make_model(ModelKind::mlp);
  PreconditionerOptions po;
  po.communicator = world();
  po.log = [](const std::string &) {};
  Preconditioner kfac(*model, po);
  if (world()->rank() == 0)
    kfac.set_batch_rows(8);
  const Batch b = global_batch(ModelKind::mlp, 0);
  loss_of(ModelKind::mlp, model->forward(b.x), b, LossReduction::mean).backward();
  try {
    kfac.step();
    FAIL() << "expected hkfac::Error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("set_batch_rows"), std::string::npos) << e.what();
  }
}

} // namespace
} // namespace hkfac::kfac_torch
