// Data-parallel K-FAC (multi_device) under `mpirun -np 2`: every rank runs the same training
// twice, once alone on the whole global batch (the reference) and once with the other ranks on
// its shard, and the two must agree step by step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <unistd.h>
#include <utility>

#include "hkfac/error.h"
#include "hkfac/kfac/layers.h"
#include "hkfac/kfac/optimizer.h"

namespace hkfac::kfac {
namespace {

constexpr int kSteps = 20;

std::shared_ptr<Communicator> world() {
  static std::shared_ptr<Communicator> comm = mpi_world_communicator();
  return comm;
}

Matrix random_matrix(Eigen::Index rows, Eigen::Index cols, std::mt19937 &rng) {
  std::normal_distribution<float> n(0.0f, 1.0f);
  return Matrix::NullaryExpr(rows, cols, [&]() { return n(rng); });
}

// A tiny network and a stream of global batches that every rank can rebuild: batch k is drawn
// from its own seed, so a rank's shard is rows of exactly the batch a single process sees.
struct Problem {
  enum Kind { dense, conv } kind = dense;
  enum Loss { squared_error, categorical } loss = squared_error;
  int global_batch = 8;
  // Rows of each rank's shard (sums to global_batch); empty = equal shards.
  std::vector<int> shard_rows;
  // A batch index whose example `bad_row` gets `bad_value` as an input, or -1.
  int bad_batch = -1, bad_row = 0;
  float bad_value = std::nanf("");

  int in_dim() const { return kind == conv ? 5 * 5 * 2 : 6; }
  int out_dim() const { return 3; }
  std::unique_ptr<Sequential> model() const {
    auto m = std::make_unique<Sequential>(in_dim());
    if (kind == conv) {
      m->add<Conv2D>(5, 5, 2, 3, 3, 1, 0, Activation::tanh);
      m->add<Dense>(3 * 3 * 3, out_dim());
    } else {
      m->add<Dense>(in_dim(), 5, Activation::tanh);
      m->add<Dense>(5, out_dim());
    }
    return m;
  }
  Batch global(int k) const {
    std::mt19937 rng(1000 + k);
    Batch b;
    b.inputs = random_matrix(global_batch, in_dim(), rng);
    // A fixed teacher plus noise: something to learn, so that training settles rather than
    // chases noise (where rounding differences would grow step by step).
    std::mt19937 teacher_rng(5);
    const Matrix teacher = random_matrix(in_dim(), out_dim(), teacher_rng) / std::sqrt(in_dim());
    Matrix raw = b.inputs * teacher + 0.1f * random_matrix(global_batch, out_dim(), rng);
    if (loss == categorical) {
      b.targets = Matrix::Zero(global_batch, out_dim());
      for (int i = 0; i < global_batch; ++i) {
        Eigen::Index c = 0;
        raw.row(i).maxCoeff(&c);
        b.targets(i, c) = 1.0f;
      }
    } else {
      b.targets = raw;
    }
    if (k == bad_batch)
      b.inputs(bad_row, 0) = bad_value;
    return b;
  }
  // This rank's rows of batch k.
  Batch shard(int k, int rank, int ranks) const {
    const Batch b = global(k);
    int first = 0, rows = global_batch / ranks;
    if (!shard_rows.empty()) {
      for (int r = 0; r < rank; ++r)
        first += shard_rows[r];
      rows = shard_rows[rank];
    } else {
      first = rank * rows;
    }
    Batch s;
    s.inputs = b.inputs.middleRows(first, rows);
    s.targets = b.targets.middleRows(first, rows);
    return s;
  }
  ValueFunction value() const {
    const Loss l = loss;
    return [l](const Matrix &out, const Batch &batch, ValueContext &ctx) {
      if (l == categorical)
        ctx.losses().register_categorical_predictive_distribution(out, &batch.targets);
      else
        ctx.losses().register_squared_error_loss(out, &batch.targets);
    };
  }
};

struct Trace {
  std::vector<StepStats> stats;
  Params params;
};

// Trains for `steps` from the same initial parameters; with `comm`, on this rank's shards.
struct Training {
  const Problem &problem;
  std::unique_ptr<Sequential> model = problem.model();
  Params params;
  std::unique_ptr<Optimizer> optimizer;
  int next_batch = 0;

  Training(const Problem &p, OptimizerOptions o, bool distributed) : problem(p) {
    std::mt19937 rng(7);
    params = model->init_params(rng);
    o.multi_device = distributed;
    if (distributed)
      o.communicator = world();
    optimizer = std::make_unique<Optimizer>(*model, problem.value(), o);
  }
  void run(int steps, Trace &trace) {
    Communicator *comm = optimizer->communicator();
    auto source = [&]() {
      const int k = next_batch++;
      return comm ? problem.shard(k, comm->rank(), comm->size()) : problem.global(k);
    };
    for (int i = 0; i < steps; ++i)
      trace.stats.push_back(optimizer->step(params, source));
    trace.params = params;
  }
};

Trace train(const Problem &p, const OptimizerOptions &o, bool distributed) {
  Training t(p, o, distributed);
  Trace trace;
  t.run(kSteps, trace);
  return trace;
}

double max_abs_diff(const Params &a, const Params &b, double *scale) {
  double diff = 0.0;
  *scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, double((a[i] - b[i]).cwiseAbs().maxCoeff()));
    *scale = std::max(*scale, double(a[i].cwiseAbs().maxCoeff()));
  }
  return diff;
}

// Within `rel` of the larger magnitude (at least 1). False where either is not finite: NaN
// against NaN is no agreement.
bool close(double a, double b, double rel) {
  if (!std::isfinite(a) || !std::isfinite(b))
    return false;
  return std::abs(a - b) <= rel * std::max(1.0, std::max(std::abs(a), std::abs(b)));
}

// Steps that changed the parameters. Two runs that rejected every step would agree trivially.
int accepted_steps(const Trace &t) {
  int n = 0;
  for (const StepStats &s : t.stats) {
    if (!s.rejected && s.update_norm > 0.0)
      ++n;
  }
  return n;
}

void expect_same_training(const Trace &alone, const Trace &together, const std::string &what) {
  ASSERT_EQ(alone.stats.size(), together.stats.size());
  // The problems here have at most one bad batch; every other step must train.
  const int steps = static_cast<int>(alone.stats.size());
  EXPECT_GE(accepted_steps(alone), steps - 1) << what << ": steps accepted alone";
  EXPECT_EQ(accepted_steps(together), accepted_steps(alone)) << what << ": steps accepted";
  for (size_t i = 0; i < alone.stats.size(); ++i) {
    const StepStats &a = alone.stats[i], &b = together.stats[i];
    EXPECT_EQ(a.rejected, b.rejected) << what << " step " << i;
    // A bad batch's loss is not finite, alone and on shards; such a step must be rejected on both.
    if (a.rejected && b.rejected && !std::isfinite(a.loss)) {
      EXPECT_FALSE(std::isfinite(b.loss)) << what << " step " << i << ": loss " << b.loss;
    } else {
      EXPECT_TRUE(close(a.loss, b.loss, 1e-5))
          << what << " step " << i << ": loss " << a.loss << " alone, " << b.loss << " on shards";
    }
    EXPECT_TRUE(close(a.damping, b.damping, 1e-6))
        << what << " step " << i << ": damping " << a.damping << " vs " << b.damping;
    EXPECT_TRUE(close(a.learning_rate, b.learning_rate, 1e-3))
        << what << " step " << i << ": learning rate " << a.learning_rate << " vs "
        << b.learning_rate;
    EXPECT_TRUE(close(a.momentum, b.momentum, 1e-3))
        << what << " step " << i << ": momentum " << a.momentum << " vs " << b.momentum;
    EXPECT_EQ(a.rho.has_value(), b.rho.has_value()) << what << " step " << i;
    if (a.rho && b.rho) {
      EXPECT_TRUE(close(*a.rho, *b.rho, 1e-3)) << what << " step " << i << ": rho";
    }
  }
  double scale = 0.0;
  const double diff = max_abs_diff(alone.params, together.params, &scale);
  EXPECT_LE(diff, 1e-4 * std::max(1.0, scale)) << what << ": parameters after " << kSteps;
}

OptimizerOptions fixed_steps(EstimationMode mode) {
  OptimizerOptions o;
  o.estimation_mode = mode;
  o.num_burnin_steps = 2;
  o.inverse_update_period = 3;
  o.learning_rate_schedule = [](int step) { return 0.05 / (1.0 + 0.1 * step); };
  o.momentum_schedule = [](int) { return 0.5; };
  o.damping_schedule = [](int) { return 1e-2; };
  o.l2_reg = 1e-3f;
  return o;
}

// Every adaptive quantity, with rho on every step so its agreement is checked throughout.
OptimizerOptions adaptive_steps(EstimationMode mode) {
  OptimizerOptions o;
  o.estimation_mode = mode;
  o.num_burnin_steps = 2;
  o.inverse_update_period = 2;
  o.use_adaptive_learning_rate = true;
  o.use_adaptive_momentum = true;
  o.use_adaptive_damping = true;
  o.initial_damping = 1.0;
  o.min_damping = 1e-2;
  o.damping_adaptation_interval = 2;
  o.always_compute_rho = true;
  o.l2_reg = 1e-3f;
  return o;
}

class DataParallel : public ::testing::Test {
protected:
  void SetUp() override {
    // A failure, not a skip: run_mpi_test.sh starts two, and one rank alone proves nothing.
    if (world()->size() != 2)
      FAIL() << "needs 2 ranks (mpirun -np 2), has " << world()->size();
  }
};

constexpr EstimationMode kModes[] = {
    EstimationMode::fisher_gradients, EstimationMode::fisher_empirical,
    EstimationMode::fisher_exact,     EstimationMode::fisher_curvature_prop,
    EstimationMode::ggn_exact,        EstimationMode::ggn_curvature_prop,
};

TEST_F(DataParallel, ShardsEqualTheWholeBatchInEveryModeWithFixedAndAdaptiveSteps) {
  for (const Problem::Loss loss : {Problem::squared_error, Problem::categorical}) {
    Problem p;
    p.loss = loss;
    for (EstimationMode mode : kModes) {
      const std::string name = std::string(estimation_mode_name(mode)) +
                               (loss == Problem::categorical ? " categorical" : " squared error");
      expect_same_training(train(p, fixed_steps(mode), false), train(p, fixed_steps(mode), true),
                           name + ", fixed steps");
      expect_same_training(train(p, adaptive_steps(mode), false),
                           train(p, adaptive_steps(mode), true), name + ", adaptive steps");
    }
  }
}

// Shards of 3 and 5 rows: each rank's means weigh by its share of the batch.
TEST_F(DataParallel, UnequalShardsEqualTheWholeBatch) {
  Problem p;
  p.shard_rows = {3, 5};
  for (EstimationMode mode : {EstimationMode::fisher_gradients, EstimationMode::ggn_exact}) {
    expect_same_training(train(p, adaptive_steps(mode), false),
                         train(p, adaptive_steps(mode), true),
                         std::string(estimation_mode_name(mode)) + " on 3 + 5 rows");
  }
}

TEST_F(DataParallel, DistributedInversesEqualTheWholeBatch) {
  for (const bool exact_inverses : {false, true}) {
    Problem p;
    for (auto options : {fixed_steps(EstimationMode::fisher_exact),
                         adaptive_steps(EstimationMode::fisher_gradients)}) {
      options.use_exact_inverses = exact_inverses;
      const Trace alone = train(p, options, false);
      options.distributed_inverses = true;
      expect_same_training(alone, train(p, options, true),
                           std::string("distributed inverses") +
                               (exact_inverses ? ", eigen route" : ", Cholesky route"));
    }
  }
}

TEST_F(DataParallel, Conv2DShardsEqualTheWholeBatch) {
  Problem p;
  p.kind = Problem::conv;
  for (const bool distributed_inverses : {false, true}) {
    for (auto options : {fixed_steps(EstimationMode::fisher_curvature_prop),
                         adaptive_steps(EstimationMode::ggn_exact)}) {
      const Trace alone = train(p, options, false);
      options.distributed_inverses = distributed_inverses;
      expect_same_training(alone, train(p, options, true),
                           std::string("conv2d") +
                               (distributed_inverses ? ", distributed inverses" : ""));
    }
  }
}

// The NaN sits in rank 1's half of batch 6 (a step's batch: burn-in takes 0 and 1), so rank 0's
// own shard is fine; both ranks must reject that step, as the whole batch is rejected alone.
TEST_F(DataParallel, ANonFiniteShardIsRejectedOnEveryRank) {
  Problem p;
  p.bad_batch = 6;
  p.bad_row = 6;
  const OptimizerOptions o = adaptive_steps(EstimationMode::fisher_exact);
  const Trace alone = train(p, o, false), together = train(p, o, true);
  ASSERT_TRUE(alone.stats[4].rejected) << "the reference must meet the bad batch at step 4";
  EXPECT_TRUE(together.stats[4].rejected) << "rank " << world()->rank();
  EXPECT_EQ(together.stats.back().rejected_steps, 1);
  expect_same_training(alone, together, "a NaN on rank 1");
}

// An input of 1e20 saturates the tanh, so the loss and the gradient stay finite, but the first
// layer's input factor (x xᵀ = 1e40) overflows: only the curvature check on rank 1 sees it, and
// rank 0 must reject the step with it.
TEST_F(DataParallel, OverflowingCurvatureOnOneRankIsRejectedOnEveryRank) {
  Problem p;
  p.bad_batch = 6;
  p.bad_row = 6;
  p.bad_value = 1e20f;
  const OptimizerOptions o = fixed_steps(EstimationMode::fisher_exact);
  const Trace alone = train(p, o, false), together = train(p, o, true);
  ASSERT_TRUE(alone.stats[4].rejected) << "the reference must reject the batch at step 4";
  ASSERT_TRUE(std::isfinite(alone.stats[4].loss)) << "the loss must pass, for the curvature check";
  EXPECT_TRUE(together.stats[4].rejected) << "rank " << world()->rank();
  expect_same_training(alone, together, "an overflow on rank 1");
}

// A run saved at step 10 (rank 0 writes) and resumed by new optimizers on every rank takes the
// same steps as the run that went on.
TEST_F(DataParallel, AResumedRunContinuesIdentically) {
  Problem p;
  const OptimizerOptions o = adaptive_steps(EstimationMode::fisher_gradients);
  // Rank 0's name for the file, which every rank then reads.
  char name[64];
  std::vector<float> path_id(1, world()->rank() == 0 ? static_cast<float>(getpid()) : 0.0f);
  world()->broadcast(path_id.data(), 1, 0, "test");
  std::snprintf(name, sizeof name, "/tmp/hkfac_kfac_mpi_%d.ckpt", static_cast<int>(path_id[0]));
  const std::string path = name;

  Training first(p, o, true);
  Trace head, tail;
  first.run(10, head);
  first.optimizer->save_checkpoint(path, first.params);
  first.run(10, tail);

  Training resumed(p, o, true);
  resumed.optimizer->load_checkpoint(path, resumed.params);
  resumed.next_batch = first.next_batch - 10;
  Trace again;
  resumed.run(10, again);
  world()->barrier();
  if (world()->rank() == 0)
    std::remove(path.c_str());
  ASSERT_EQ(tail.stats.size(), again.stats.size());
  EXPECT_EQ(accepted_steps(again), 10) << "a resumed run that rejects its steps continues nothing";
  for (size_t i = 0; i < tail.stats.size(); ++i) {
    EXPECT_EQ(tail.stats[i].loss, again.stats[i].loss) << "step " << 10 + i;
    EXPECT_EQ(tail.stats[i].damping, again.stats[i].damping) << "step " << 10 + i;
  }
  for (size_t i = 0; i < tail.params.size(); ++i)
    EXPECT_TRUE(tail.params[i] == again.params[i]) << "params[" << i << "]";
}

// The ranks' parameters agree bit for bit after training: every rank applies the same update.
TEST_F(DataParallel, RanksHoldIdenticalParameters) {
  Problem p;
  const Trace t = train(p, adaptive_steps(EstimationMode::fisher_gradients), true);
  EXPECT_EQ(accepted_steps(t), kSteps) << "ranks that never move agree trivially";
  for (const Matrix &m : t.params) {
    Matrix mine = m, rank0 = m;
    world()->broadcast(rank0.data(), rank0.size(), 0, "test");
    EXPECT_TRUE(mine == rank0) << "rank " << world()->rank();
  }
}

// evaluate() and gradient() on shards give the whole batch's value and gradient.
TEST_F(DataParallel, EvaluateAndGradientOnShardsAreTheWholeBatchs) {
  Problem p;
  Training alone(p, fixed_steps(EstimationMode::fisher_exact), false);
  Training together(p, fixed_steps(EstimationMode::fisher_exact), true);
  const Batch whole = p.global(3), mine = p.shard(3, world()->rank(), world()->size());
  const double want = alone.optimizer->evaluate(alone.params, whole);
  EXPECT_TRUE(close(together.optimizer->evaluate(together.params, mine), want, 1e-6));
  double scale = 0.0;
  const double diff = max_abs_diff(alone.optimizer->gradient(alone.params, whole),
                                   together.optimizer->gradient(together.params, mine), &scale);
  EXPECT_LE(diff, 1e-6 * std::max(1.0, scale));
}

// The traffic the communicator reports (RESULTS.md#mpi-k-fac) is what a step has to move: the
// gradient and the loss every step, every factor sum on a curvature update.
TEST_F(DataParallel, TrafficCountsTheGradientAndTheFactorSums) {
  Problem p;
  OptimizerOptions o = fixed_steps(EstimationMode::fisher_exact);
  o.inverse_update_period = 100; // no inverse traffic in the steps counted
  Training t(p, o, true);
  Trace trace;
  t.run(1, trace); // burn-in
  world()->reset_traffic();
  t.run(3, trace);
  uint64_t parameters = 0;
  for (const Matrix &m : t.params)
    parameters += m.size();
  uint64_t sums = 0; // the factor sums of the two dense blocks: (in + 1)² + out² each
  for (const auto &b : t.optimizer->estimator().blocks()) {
    for (const auto &m : std::as_const(*b).state().matrices)
      sums += m.inverse ? 0 : static_cast<uint64_t>(m.rows) * m.cols;
  }
  EXPECT_EQ(sums, 7u * 7 + 5 * 5 + 6 * 6 + 3 * 3);
  const auto &traffic = world()->traffic();
  EXPECT_EQ(traffic.at("loss_and_gradient").bytes, 3 * (4 * parameters + 8));
  EXPECT_EQ(traffic.at("curvature").bytes, 3 * (4 * sums + 8)); // + the finite-batch vote
  EXPECT_EQ(traffic.count("inverses"), 0u);
}

TEST_F(DataParallel, AnEmptyShardIsAnErrorNamingTheRank) {
  Problem p;
  p.shard_rows = {8, 0};
  Training t(p, fixed_steps(EstimationMode::fisher_exact), true);
  Trace trace;
  try {
    t.run(1, trace);
    FAIL() << "an empty shard was accepted";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 of 2 has an empty batch"), std::string::npos)
        << e.what();
  }
}

} // namespace
} // namespace hkfac::kfac
