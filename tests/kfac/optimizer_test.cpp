// Optimizer semantics: burn-in, moving averages, update periods, schedules, norm constraint,
// rejection of non-finite steps, adaptive damping / learning rate, and K-FAC against SGD.
#include <HalideRuntime.h>

#include <atomic>
#include <gtest/gtest.h>
#include <stdexcept>

#include "hkfac/error.h"
#include "hkfac/kfac/blocks/dense_two_kronecker_factored.h"
#include "hkfac/kfac/optimizer.h"
#include "hkfac/serial_kernels.h"
#include "reference.h"

namespace hkfac::kfac {
namespace {

using namespace testref;

// Regression onto a fixed random teacher; inputs with very different feature scales make the
// problem ill-conditioned, which is where curvature information pays off.
struct Regression {
  Sequential model;
  Params params;
  std::mt19937 data_rng{99};
  Matrix teacher;
  int batch_size;
  int batches_pulled = 0;

  explicit Regression(int hidden = 8, int batch = 32, unsigned seed = 1)
      : model(4), batch_size(batch) {
    if (hidden > 0) {
      model.add<Dense>(4, hidden, Activation::tanh);
      model.add<Dense>(hidden, 2);
    } else {
      model.add<Dense>(4, 2);
    }
    std::mt19937 rng(seed);
    params = model.init_params(rng);
    teacher = random_matrix(4, 2, rng);
  }

  Batch next() {
    ++batches_pulled;
    Batch b;
    b.inputs = random_matrix(batch_size, 4, data_rng);
    const float scales[4] = {3.0f, 1.0f, 0.3f, 0.1f};
    for (int c = 0; c < 4; ++c)
      b.inputs.col(c) *= scales[c];
    b.targets = b.inputs * teacher;
    return b;
  }
  std::function<Batch()> source() {
    return [this]() { return next(); };
  }
  // A source that also keeps every batch it hands out in `seen`.
  std::function<Batch()> recording(std::vector<Batch> &seen) {
    return [this, &seen]() {
      seen.push_back(next());
      return seen.back();
    };
  }
  static void value(const Matrix &out, const Batch &batch, ValueContext &ctx) {
    ctx.losses().register_squared_error_loss(out, &batch.targets);
  }
};

OptimizerOptions basic_options() {
  OptimizerOptions o;
  o.num_burnin_steps = 2;
  o.estimation_mode = EstimationMode::fisher_exact;
  o.inverse_update_period = 1;
  return o;
}

// Levenberg–Marquardt every step, from 1e-2, halving or doubling the damping each time.
OptimizerOptions adapted_damping_options() {
  OptimizerOptions o = basic_options();
  o.use_adaptive_damping = true;
  o.initial_damping = 1e-2;
  o.damping_adaptation_interval = 1;
  o.damping_adaptation_decay = 0.5;
  return o;
}

StepValues values(double lr, double momentum, double damping) {
  StepValues v;
  v.learning_rate = lr;
  v.momentum = momentum;
  v.damping = damping;
  return v;
}

// The first m examples of a batch (what a curvature subset of m sees).
Batch head(const Batch &b, int m) {
  Batch h;
  h.inputs = b.inputs.topRows(m);
  h.targets = b.targets.topRows(m);
  return h;
}

// A(batch) = X̄ᵀX̄ / B for the single dense layer, in double.
MatrixXd input_factor(const Batch &b) {
  MatrixXd x(b.inputs.rows(), b.inputs.cols() + 1);
  x.leftCols(b.inputs.cols()) = b.inputs.cast<double>();
  x.rightCols(1).setOnes();
  return x.transpose() * x / static_cast<double>(b.inputs.rows());
}

// A dense block's factors A and G, in double, and the indices of the W and b it covers (b = -1
// without a bias).
struct DenseFactors {
  MatrixXd A, G;
  int w = 0, b = -1;
};

// Every block's current factors (the models here have dense layers only).
std::vector<DenseFactors> dense_factors(const Optimizer &opt) {
  std::vector<DenseFactors> out;
  for (const auto &block : opt.estimator().blocks()) {
    const auto &dense = dynamic_cast<const DenseTwoKroneckerFactored &>(*block);
    const LayerTag &tag = block->tag();
    out.push_back({dense.factor_a().cast<double>(), dense.factor_g().cast<double>(), tag.params[0],
                   tag.has_bias ? tag.params[1] : -1});
  }
  return out;
}

bool same_factors(const std::vector<DenseFactors> &a, const std::vector<DenseFactors> &b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].A != b[i].A || a[i].G != b[i].G)
      return false;
  }
  return true;
}

// The update a step must apply at θ, in double, from the gradient g at θ, the previous update v
// and the factors the step's inverses were computed from: Δ = -lr·u + μ·v with
// u = A_d⁻¹ [∇W; ∇b] G_d⁻¹ per dense block, A_d = A + π√γ I, G_d = G + (√γ/π) I,
// π² = (tr A / dim A) / (tr G / dim G) (pi-adjusted damping), γ = l2_reg + damping.
std::vector<MatrixXd> expected_update(const std::vector<DenseFactors> &factors, const Params &g,
                                      const Params &v, double lr, double momentum, double gamma) {
  std::vector<MatrixXd> delta(g.size());
  for (const DenseFactors &f : factors) {
    const Eigen::Index din = g[f.w].rows(), n = f.A.rows(), m = f.G.rows();
    MatrixXd stacked(n, m);
    stacked.topRows(din) = g[f.w].cast<double>();
    if (f.b >= 0)
      stacked.bottomRows(1) = g[f.b].cast<double>();
    const double pi = std::sqrt((f.A.trace() / n) / (f.G.trace() / m));
    const MatrixXd a_d = f.A + pi * std::sqrt(gamma) * MatrixXd::Identity(n, n);
    const MatrixXd g_d = f.G + std::sqrt(gamma) / pi * MatrixXd::Identity(m, m);
    const MatrixXd u = a_d.inverse() * stacked * g_d.inverse();
    delta[f.w] = -lr * u.topRows(din) + momentum * v[f.w].cast<double>();
    if (f.b >= 0)
      delta[f.b] = -lr * u.bottomRows(1) + momentum * v[f.b].cast<double>();
  }
  return delta;
}

// max |(after - before) - Δ| / max |Δ| over every parameter tensor.
double update_error(const Params &before, const Params &after, const std::vector<MatrixXd> &delta) {
  double err = 0.0, size = 0.0;
  for (size_t i = 0; i < delta.size(); ++i) {
    const MatrixXd moved = after[i].cast<double>() - before[i].cast<double>();
    err = std::max(err, (moved - delta[i]).cwiseAbs().maxCoeff());
    size = std::max(size, delta[i].cwiseAbs().maxCoeff());
  }
  return err / std::max(size, 1e-30);
}

TEST(kfacOptimizer, BurnInAveragesItsBatchesThenStepsUseTheEma) {
  Regression r(0, 16);
  OptimizerOptions o = basic_options();
  o.num_burnin_steps = 3;
  o.curvature_ema = 0.9;
  std::vector<Batch> seen;
  auto source = r.recording(seen);
  Optimizer opt(r.model, Regression::value, o);
  opt.step(r.params, source, values(0.1, 0.0, 1e-3));
  ASSERT_EQ(seen.size(), 4u); // 3 burn-in batches + the step's own
  const auto &block = dynamic_cast<const DenseTwoKroneckerFactored &>(*opt.estimator().blocks()[0]);
  const MatrixXd burn = (input_factor(seen[0]) + input_factor(seen[1]) + input_factor(seen[2])) / 3;
  MatrixXd expected = (0.9 * burn + input_factor(seen[3])) / 1.9;
  EXPECT_NEAR(block.ema_weight(), 1.9, 1e-6);
  EXPECT_LT(rel_err(block.factor_a().cast<double>(), expected), 1e-5);

  opt.step(r.params, source, values(0.1, 0.0, 1e-3));
  ASSERT_EQ(seen.size(), 5u);
  expected = (0.9 * 1.9 * expected + input_factor(seen[4])) / (0.9 * 1.9 + 1);
  EXPECT_NEAR(block.ema_weight(), 0.9 * 1.9 + 1, 1e-5);
  EXPECT_LT(rel_err(block.factor_a().cast<double>(), expected), 1e-5);
}

// The estimate moves on curvature steps (0, 2, 4, 6) only, and each step's update is
// preconditioned with the inverses of the last inverse step (0, 3, 6): the parameters move by the
// update the factors recorded at that step give, stale ones included.
TEST(kfacOptimizer, InversesAndCurvatureFollowTheirPeriods) {
  Regression r;
  OptimizerOptions o = basic_options();
  o.inverse_update_period = 3;
  o.curvature_update_period = 2;
  Optimizer opt(r.model, Regression::value, o);
  const double lr = 0.05, momentum = 0.5, damping = 1e-2;
  std::vector<DenseFactors> previous, inverted;
  Params moved = zeros_like(r.params); // the last step's update: the velocity
  for (int s = 0; s < 7; ++s) {
    const Params before = r.params;
    std::vector<Batch> seen;
    ASSERT_FALSE(opt.step(r.params, r.recording(seen), values(lr, momentum, damping)).rejected);
    const std::vector<DenseFactors> now = dense_factors(opt);
    if (s > 0)
      EXPECT_EQ(same_factors(now, previous), s % 2 == 1) << "step " << s;
    if (s % 3 == 0)
      inverted = now;
    const std::vector<MatrixXd> want =
        expected_update(inverted, opt.gradient(before, seen.back()), moved, lr,
                        s == 0 ? 0.0 : momentum, o.l2_reg + damping);
    EXPECT_LT(update_error(before, r.params, want), 1e-3) << "step " << s;
    previous = now;
    moved = combine(1.0f, r.params, -1.0f, before);
  }
  EXPECT_EQ(opt.inverse_updates(), 3);                        // steps 0, 3, 6
  EXPECT_EQ(opt.curvature_updates(), o.num_burnin_steps + 4); // steps 0, 2, 4, 6
}

// The first step has no velocity to carry: it reports momentum 0 and moves by -lr·u alone; the
// second moves by -lr·u plus the schedule's 0.9 times the first step's update.
TEST(kfacOptimizer, MomentumIsZeroOnTheFirstStep) {
  Regression r;
  OptimizerOptions o = basic_options();
  o.momentum_schedule = [](int) { return 0.9; };
  Optimizer opt(r.model, Regression::value, o);
  StepValues v;
  v.learning_rate = 0.1;
  v.damping = 1e-2;
  Params moved = zeros_like(r.params);
  for (const double momentum : {0.0, 0.9}) {
    const Params before = r.params;
    std::vector<Batch> seen;
    const StepStats st = opt.step(r.params, r.recording(seen), v);
    EXPECT_EQ(st.momentum, momentum);
    // inverse_update_period = 1: the factors now are those the step's inverses came from.
    const std::vector<MatrixXd> want =
        expected_update(dense_factors(opt), opt.gradient(before, seen.back()), moved,
                        *v.learning_rate, momentum, o.l2_reg + *v.damping);
    EXPECT_LT(update_error(before, r.params, want), 1e-3) << "momentum " << momentum;
    moved = combine(1.0f, r.params, -1.0f, before);
  }
}

TEST(kfacOptimizer, ScheduleAndExplicitValueForTheSameQuantityIsAnError) {
  Regression r;
  OptimizerOptions o = basic_options();
  o.learning_rate_schedule = [](int) { return 0.1; };
  Optimizer opt(r.model, Regression::value, o);
  try {
    opt.step(r.params, r.source(), values(0.1, 0.0, 1e-2));
    FAIL() << "expected hkfac::Error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("learning_rate"), std::string::npos) << e.what();
  }
  StepValues missing;
  missing.momentum = 0.0;
  Optimizer opt2(r.model, Regression::value, basic_options());
  EXPECT_THROW(opt2.step(r.params, r.source(), missing), Error);
  OptimizerOptions bad = basic_options();
  bad.use_adaptive_damping = true;
  bad.damping_schedule = [](int) { return 1.0; };
  EXPECT_THROW(Optimizer(r.model, Regression::value, bad), Error);
}

// multi_device's option errors name the options; a build without MPI refuses it outright. (The
// equivalence of ranks and one process is tests/kfac_mpi's, under mpirun.)
TEST(kfacOptimizer, MultiDeviceOptionErrorsNameTheOptions) {
  Regression r;
  auto message = [&](const OptimizerOptions &o) {
    try {
      Optimizer opt(r.model, Regression::value, o);
    } catch (const Error &e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  OptimizerOptions inverses = basic_options();
  inverses.distributed_inverses = true;
  EXPECT_NE(message(inverses).find("distributed_inverses needs multi_device"), std::string::npos)
      << message(inverses);
  OptimizerOptions subset = basic_options();
  subset.multi_device = true;
  subset.curvature_batch_size = 4;
  EXPECT_NE(message(subset).find("curvature_batch_size and multi_device are mutually exclusive"),
            std::string::npos)
      << message(subset);
  if (!mpi_available()) {
    OptimizerOptions multi = basic_options();
    multi.multi_device = true;
    EXPECT_NE(message(multi).find("this build of hkfac::kfac has no MPI"), std::string::npos)
        << message(multi);
  }
}

// u = F̂⁻¹g is scaled so that the update's squared norm in the damped curvature, lr²·⟨u, F̂ u⟩ =
// lr²·⟨u, g⟩, is at most C (exactly C when the constraint is active).
TEST(kfacOptimizer, NormConstraintBoundsTheUpdate) {
  Regression r;
  OptimizerOptions o = basic_options();
  const double C = 1e-4, lr = 1.0, damping = 1e-3;
  o.norm_constraint = C;
  Optimizer opt(r.model, Regression::value, o);
  for (int s = 0; s < 3; ++s) {
    const Params before = r.params;
    opt.step(r.params, r.source(), values(lr, 0.0, damping));
    Params delta = r.params;
    axpy(-1.0f, before, delta);
    const Params f_delta = opt.estimator().multiply_matpower(delta, 1, static_cast<float>(damping));
    EXPECT_NEAR(dot(delta, f_delta), C, 0.01 * C) << "step " << s;
  }
}

// A bad batch is a data problem: it is rejected, and more damping could not mend it, so neither
// an explicit damping (for the rest of the run) nor adaptive damping is raised.
TEST(kfacOptimizer, BadBatchIsRejectedAndLeavesTheDampingAlone) {
  for (bool adaptive : {false, true}) {
    Regression r;
    OptimizerOptions o = basic_options();
    o.use_adaptive_damping = adaptive;
    o.initial_damping = 1e-2;
    o.damping_adaptation_interval = 1000;
    Optimizer opt(r.model, Regression::value, o);
    StepValues given = values(0.1, 0.0, 1e-2);
    if (adaptive)
      given.damping.reset();
    opt.step(r.params, r.source(), given);
    const Params before = r.params;
    auto poisoned = [&]() {
      Batch b = r.next();
      b.targets(0, 0) = std::numeric_limits<float>::infinity();
      return b;
    };
    const StepStats st = opt.step(r.params, poisoned, given);
    EXPECT_TRUE(st.rejected);
    EXPECT_EQ(st.rejected_steps, 1);
    EXPECT_EQ(st.rho, 0.0); // a rejected step reduced nothing
    for (size_t i = 0; i < before.size(); ++i)
      EXPECT_EQ(r.params[i], before[i]);
    for (int s = 0; s < 3; ++s) {
      const StepStats next = opt.step(r.params, r.source(), given);
      EXPECT_FALSE(next.rejected);
      EXPECT_EQ(next.rejected_steps, 1);
      EXPECT_EQ(next.damping, 1e-2) << "adaptive " << adaptive << " step " << s;
    }
    EXPECT_TRUE(all_finite(r.params));
  }
}

// A non-finite update is the curvature's failure (the step was too long for it): rejected, and
// the damping raised tenfold for the next try, with inverses refreshed.
TEST(kfacOptimizer, NonFiniteUpdateIsRejectedAndRaisesDamping) {
  Regression r;
  OptimizerOptions o = basic_options();
  o.inverse_update_period = 100;
  Optimizer opt(r.model, Regression::value, o);
  opt.step(r.params, r.source(), values(0.1, 0.0, 1e-2));
  const Params before = r.params;
  // Within float range, but lr·u is not.
  const StepStats st = opt.step(r.params, r.source(), values(3e38, 0.0, 1e-2));
  ASSERT_TRUE(st.rejected);
  EXPECT_EQ(st.rejected_steps, 1);
  for (size_t i = 0; i < before.size(); ++i)
    EXPECT_EQ(r.params[i], before[i]);
  const int inverses = opt.inverse_updates();
  const StepStats next = opt.step(r.params, r.source(), values(0.1, 0.0, 1e-2));
  EXPECT_FALSE(next.rejected);
  EXPECT_EQ(next.rejected_steps, 1);
  EXPECT_NEAR(next.damping, 1e-1, 1e-9);
  EXPECT_EQ(opt.inverse_updates(), inverses + 1);
  EXPECT_TRUE(all_finite(r.params));
}

// NaiveDiagonal blocks with zero damping and a feature that is always 0: its curvature is 0 and
// u = 0/0. Raising a damping of 0 tenfold leaves it 0, so rejecting would repeat forever; the
// step says so instead, as a failed inverse does.
TEST(kfacOptimizer, NonFiniteUpdateWithADampingThatCannotRiseIsAnError) {
  Regression r(0, 16);
  OptimizerOptions o = basic_options();
  o.min_damping = 0.0;
  o.register_only_generic = true;
  Optimizer opt(r.model, Regression::value, o);
  auto dead_feature = [&]() {
    Batch b = r.next();
    b.inputs.col(3).setZero();
    return b;
  };
  try {
    opt.step(r.params, dead_feature, values(0.1, 0.0, 0.0));
    FAIL() << "a non-finite update at zero damping was rejected, to be retried at zero damping";
  } catch (const Error &e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the update was not finite; the damping (0) cannot be raised further"),
              std::string::npos)
        << what;
  }
}

// Two bad batches in a row are two rejections; a third means the parameters are what is broken
// (here: NaN weights, as a blown-up update leaves them), and step() says so instead of rejecting
// forever.
TEST(kfacOptimizer, ParametersThatFailOnThreeBatchesInARowAreAnError) {
  Regression r;
  Optimizer opt(r.model, Regression::value, basic_options());
  opt.step(r.params, r.source(), values(0.1, 0.0, 1e-2));
  auto poisoned = [&]() {
    Batch b = r.next();
    b.targets(0, 0) = std::numeric_limits<float>::quiet_NaN();
    return b;
  };
  for (int i = 0; i < 2; ++i)
    EXPECT_TRUE(opt.step(r.params, poisoned, values(0.1, 0.0, 1e-2)).rejected);
  EXPECT_FALSE(opt.step(r.params, r.source(), values(0.1, 0.0, 1e-2)).rejected); // count reset
  r.params[0](0, 0) = std::numeric_limits<float>::quiet_NaN();
  for (int i = 0; i < 2; ++i)
    EXPECT_TRUE(opt.step(r.params, r.source(), values(0.1, 0.0, 1e-2)).rejected);
  try {
    opt.step(r.params, r.source(), values(0.1, 0.0, 1e-2));
    FAIL() << "a third non-finite loss at the same parameters was rejected again";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("not finite on 3 batches in a row (steps 4-6)"),
              std::string::npos)
        << e.what();
  }
}

// Finite inputs of 1e20 give a finite loss and gradient (the tanh saturates, so the first
// layer's gradient is 1e20 · 0) but A = X̄ᵀX̄ / B = inf in float. The batch is a bad batch: rejected
// before it enters the moving average, which stays as it was, and later steps go on as if it
// had never come.
TEST(kfacOptimizer, BatchWhoseCurvatureWouldOverflowIsRejectedBeforeTheEstimate) {
  for (float bad : {1e20f, std::numeric_limits<float>::quiet_NaN()}) {
    Regression r;
    Optimizer opt(r.model, Regression::value, basic_options());
    opt.step(r.params, r.source(), values(0.1, 0.0, 1e-2));
    const double weight = opt.estimator().blocks()[0]->ema_weight();
    const MatrixXd curvature = opt.estimator().blocks()[0]->full_curvature();
    const Params before = r.params;
    auto huge = [&]() {
      Batch b = r.next(); // targets from the sane inputs: the loss stays finite
      b.inputs(0, 0) = bad;
      return b;
    };
    const StepStats st = opt.step(r.params, huge, values(0.1, 0.0, 1e-2));
    if (std::isnan(bad)) {
      EXPECT_FALSE(std::isfinite(st.loss)); // NaN reaches the loss, caught there already
    } else {
      EXPECT_TRUE(std::isfinite(st.loss) && std::isfinite(st.grad_norm));
    }
    EXPECT_TRUE(st.rejected) << bad;
    EXPECT_EQ(opt.estimator().blocks()[0]->ema_weight(), weight) << bad;
    EXPECT_EQ(opt.estimator().blocks()[0]->full_curvature(), curvature) << bad;
    for (size_t i = 0; i < before.size(); ++i)
      EXPECT_EQ(r.params[i], before[i]);
    for (int s = 0; s < 3; ++s) {
      const StepStats next = opt.step(r.params, r.source(), values(0.1, 0.0, 1e-2));
      EXPECT_FALSE(next.rejected) << bad << " step " << s;
      EXPECT_EQ(next.damping, 1e-2) << bad << " step " << s;
    }
    for (const auto &b : opt.estimator().blocks())
      EXPECT_TRUE(b->full_curvature().allFinite()) << bad << " " << b->tag().name;
  }
}

// Burn-in applies the same rule: a batch whose statistics would not be finite (NaN inputs, or
// finite ones whose squares overflow) is left out, and the burn-in estimate is the mean of the
// others (S / w with w = 2/3), whatever the block.
TEST(kfacOptimizer, BurnInLeavesOutABatchWhoseCurvatureWouldNotBeFinite) {
  for (const char *block : {"DenseTwoKroneckerFactored", "NaiveDiagonal", "NaiveFull"}) {
    for (float bad : {1e20f, std::numeric_limits<float>::quiet_NaN()}) {
      Regression r(0, 16);
      OptimizerOptions o = basic_options();
      o.num_burnin_steps = 3;
      o.curvature_ema = 0.9;
      o.layer_tag_to_block["dense"] = block;
      std::vector<Batch> seen;
      auto source = [&]() {
        seen.push_back(r.next());
        if (seen.size() == 2)
          seen.back().inputs(0, 0) = bad;
        return seen.back();
      };
      Optimizer opt(r.model, Regression::value, o);
      const StepStats st = opt.step(r.params, source, values(0.1, 0.0, 1e-3));
      ASSERT_EQ(seen.size(), 4u);
      const std::string what = std::string(block) + " " + std::to_string(bad);
      EXPECT_FALSE(st.rejected) << what;
      EXPECT_EQ(opt.curvature_updates(), 3) << what;
      const CurvatureBlock &b = *opt.estimator().blocks()[0];
      EXPECT_NEAR(b.ema_weight(), 0.9 * 2.0 / 3.0 + 1.0, 1e-6) << what;
      EXPECT_TRUE(b.full_curvature().allFinite()) << what;
      if (std::string(block) == "DenseTwoKroneckerFactored") {
        const auto &kf = dynamic_cast<const DenseTwoKroneckerFactored &>(b);
        const MatrixXd burn = (input_factor(seen[0]) + input_factor(seen[2])) / 2;
        const MatrixXd expected = (0.9 * 2.0 / 3.0 * burn + input_factor(seen[3])) / 1.6;
        EXPECT_LT(rel_err(kf.factor_a().cast<double>(), expected), 1e-5) << what;
      }
      for (int s = 0; s < 3; ++s)
        EXPECT_FALSE(opt.step(r.params, r.source(), values(0.1, 0.0, 1e-3)).rejected) << what;
    }
  }
}

// An exception from the data iterator partway through burn-in leaves no partial mean behind:
// the retry burns in afresh, taking the same steps as a new optimizer on the batches it pulls
// (the sampled estimation mode shows the random generator is rewound too).
TEST(kfacOptimizer, BurnInInterruptedByAnExceptionStartsAfreshOnTheNextStep) {
  Regression r(8, 16);
  const Params start = r.params;
  OptimizerOptions o = basic_options();
  o.num_burnin_steps = 4;
  o.estimation_mode = EstimationMode::fisher_gradients;
  Optimizer opt(r.model, Regression::value, o);
  int pulled = 0;
  auto failing = [&]() {
    if (++pulled == 3)
      throw std::runtime_error("io error");
    return r.next();
  };
  EXPECT_THROW(opt.step(r.params, failing, values(0.1, 0.0, 1e-2)), std::runtime_error);
  EXPECT_EQ(opt.curvature_updates(), 0);
  EXPECT_EQ(opt.step_count(), 0);
  for (const auto &b : opt.estimator().blocks())
    EXPECT_EQ(b->ema_weight(), 0.0) << b->tag().name;

  std::vector<Batch> seen;
  auto source = r.recording(seen);
  for (int s = 0; s < 3; ++s)
    opt.step(r.params, source, values(0.1, 0.0, 1e-2));
  Regression fresh_r(8, 16);
  Params fresh_params = start;
  Optimizer fresh(fresh_r.model, Regression::value, o);
  size_t at = 0;
  auto replay = [&]() { return seen.at(at++); };
  for (int s = 0; s < 3; ++s)
    fresh.step(fresh_params, replay, values(0.1, 0.0, 1e-2));
  EXPECT_EQ(at, seen.size());
  EXPECT_EQ(opt.curvature_updates(), fresh.curvature_updates());
  for (size_t b = 0; b < opt.estimator().blocks().size(); ++b) {
    EXPECT_EQ(opt.estimator().blocks()[b]->ema_weight(),
              fresh.estimator().blocks()[b]->ema_weight());
  }
  for (size_t i = 0; i < start.size(); ++i)
    EXPECT_EQ(r.params[i], fresh_params[i]) << "parameter " << i;
}

// The learning rate, momentum and damping are checked as resolved, before burn-in or the
// curvature update: a bad value is an error naming it and where it came from, and leaves the
// optimizer as it was, so a retry with a good value is a first step.
TEST(kfacOptimizer, BadStepValuesAreErrorsBeforeAnyStateChanges) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    StepValues values;
    bool damping_schedule;
    const char *message;
  };
  const Case cases[] = {
      {values(nan, 0.0, 1e-2), false, "learning_rate: StepValues::learning_rate is nan"},
      {values(inf, 0.0, 1e-2), false, "learning_rate: StepValues::learning_rate is inf"},
      {values(-0.1, 0.0, 1e-2), false,
       "learning_rate: StepValues::learning_rate is -0.1; need a finite value >= 0"},
      {values(0.1, nan, 1e-2), false, "momentum: StepValues::momentum is nan"},
      {values(0.1, 0.0, nan), false, "damping: StepValues::damping is nan"},
      {values(0.1, 0.0, -1.0), false,
       "damping: StepValues::damping is -1; need a finite value >= 0"},
      {values(0.1, 0.0, 1e300), false, "damping: StepValues::damping is 1e+300"},
      {values(0.1, 0.0, 0.0), true, "damping: damping_schedule(0) returned nan"},
  };
  for (const Case &c : cases) {
    Regression r;
    const Params start = r.params;
    OptimizerOptions o = basic_options();
    StepValues v = c.values;
    if (c.damping_schedule) {
      o.damping_schedule = [nan](int) { return nan; };
      v.damping.reset();
    }
    Optimizer opt(r.model, Regression::value, o);
    try {
      opt.step(r.params, r.source(), v);
      ADD_FAILURE() << "accepted: " << c.message;
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
    }
    EXPECT_EQ(r.batches_pulled, 0) << c.message;
    EXPECT_EQ(opt.step_count(), 0) << c.message;
    EXPECT_EQ(opt.curvature_updates(), 0) << c.message;
    EXPECT_EQ(opt.estimator().blocks()[0]->ema_weight(), 0.0) << c.message;
    for (size_t i = 0; i < start.size(); ++i)
      EXPECT_EQ(r.params[i], start[i]) << c.message;
  }
}

TEST(kfacOptimizer, OptionsOutOfTheirRangesAreErrorsNamingThem) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  Regression r;
  auto expect_error = [&](const OptimizerOptions &o, const std::string &message) {
    try {
      Optimizer opt(r.model, Regression::value, o);
      ADD_FAILURE() << "accepted: " << message;
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  for (double f : {inf, nan, 1.0}) {
    OptimizerOptions o = basic_options();
    o.rejected_step_damping_factor = f;
    expect_error(o, "rejected_step_damping_factor must be finite and > 1");
  }
  for (double d : {inf, nan, -1.0}) {
    OptimizerOptions o = basic_options();
    o.min_damping = d;
    expect_error(o, "min_damping must be finite and >= 0");
  }
  for (double d : {inf, nan, 0.0}) {
    OptimizerOptions o = basic_options();
    o.use_adaptive_damping = true;
    o.initial_damping = d;
    expect_error(o, "initial_damping must be finite and > 0");
  }
  OptimizerOptions outside = basic_options();
  outside.use_adaptive_damping = true;
  outside.initial_damping = 10.0;
  outside.max_damping = 1.0;
  expect_error(outside, "initial_damping (10) must be in [min_damping, max_damping] = [1e-08, 1]");
  outside.initial_damping = 1e-9;
  expect_error(outside, "initial_damping (1e-09) must be in [min_damping, max_damping]");
  // Without adaptive damping the initial damping is not used, and need not lie in the range.
  outside.use_adaptive_damping = false;
  EXPECT_NO_THROW(Optimizer(r.model, Regression::value, outside));
  // The adaptive learning rate sizes its own steps: a norm constraint beside it would be ignored.
  OptimizerOptions both = basic_options();
  both.use_adaptive_learning_rate = true;
  both.norm_constraint = 1e-3;
  expect_error(both, "norm_constraint and use_adaptive_learning_rate are mutually exclusive");
}

// The damping in use stays in [min_damping, max_damping]: a user's value (from StepValues or a
// schedule) is clamped to it, and so is the adapted one as Levenberg–Marquardt moves it.
TEST(kfacOptimizer, DampingIsClampedToItsBounds) {
  {
    Regression r(8, 32);
    OptimizerOptions o = basic_options();
    o.min_damping = 1e-3;
    o.max_damping = 0.5;
    Optimizer opt(r.model, Regression::value, o);
    EXPECT_EQ(opt.step(r.params, r.source(), values(0.01, 0.0, 1e-6)).damping, 1e-3);
    EXPECT_EQ(opt.step(r.params, r.source(), values(0.01, 0.0, 2.0)).damping, 0.5);
    EXPECT_EQ(opt.step(r.params, r.source(), values(0.01, 0.0, 0.1)).damping, 0.1);
  }
  // Small steps: rho > 0.75 and the damping halves each step, down to min_damping. Huge steps:
  // rho < 0.25 and it doubles, up to max_damping.
  for (double lr : {0.01, 50.0}) {
    Regression r(8, 64);
    OptimizerOptions o = adapted_damping_options();
    o.min_damping = 3e-3;
    o.max_damping = 3e-2;
    Optimizer opt(r.model, Regression::value, o);
    StepValues v;
    v.learning_rate = lr;
    v.momentum = 0.0;
    std::vector<double> seen;
    for (int s = 0; s < 4; ++s) {
      const StepStats st = opt.step(r.params, r.source(), v);
      ASSERT_FALSE(st.rejected) << "lr " << lr << " step " << s;
      seen.push_back(opt.damping());
    }
    const std::vector<double> want = lr < 1.0 ? std::vector<double>{5e-3, 3e-3, 3e-3, 3e-3}
                                              : std::vector<double>{2e-2, 3e-2, 3e-2, 3e-2};
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(seen[i], want[i], 1e-12) << "lr " << lr << " after step " << i;
  }
}

// Schedules are functions of the step number: each step uses its own number's values (the
// momentum's first value excepted, which is 0), rejected steps counting too.
TEST(kfacOptimizer, SchedulesAreEvaluatedAtTheStepNumber) {
  Regression r(8, 32);
  OptimizerOptions o = basic_options();
  o.learning_rate_schedule = [](int t) { return 0.01 * (t + 1); };
  o.momentum_schedule = [](int t) { return 0.1 + 0.05 * t; };
  o.damping_schedule = [](int t) { return 1e-3 * (t + 1); };
  Optimizer opt(r.model, Regression::value, o);
  Params moved = zeros_like(r.params); // the last step's update: the velocity
  for (int t = 0; t < 5; ++t) {
    const Params before = r.params;
    std::vector<Batch> seen;
    const StepStats st = opt.step(r.params, r.recording(seen));
    ASSERT_EQ(st.step, t);
    const double lr = 0.01 * (t + 1), momentum = t == 0 ? 0.0 : 0.1 + 0.05 * t;
    const double damping = 1e-3 * (t + 1);
    EXPECT_DOUBLE_EQ(st.learning_rate, lr) << t;
    EXPECT_DOUBLE_EQ(st.momentum, momentum) << t;
    EXPECT_DOUBLE_EQ(st.damping, damping) << t;
    // Reported values aside, the parameters move by the update these give (inverse_update_period
    // = 1: the factors now are those the step's inverses came from, at this step's damping).
    const std::vector<MatrixXd> want =
        expected_update(dense_factors(opt), opt.gradient(before, seen.back()), moved, lr, momentum,
                        o.l2_reg + damping);
    EXPECT_LT(update_error(before, r.params, want), 1e-3) << t;
    moved = combine(1.0f, r.params, -1.0f, before);
  }
  EXPECT_EQ(opt.step_count(), 5);
}

// At an exactly zero gradient u = F̂⁻¹·0 = 0 and the quadratic model is flat along u: the
// adaptive learning rate's -gᵀu / uᵀ(C + γ)u is 0/0. The step is "no update", accepted, and
// the damping stays (rho, 0/0 too, is not computed).
TEST(kfacOptimizer, ZeroGradientIsAnAcceptedStepThatChangesNothing) {
  for (bool adaptive_momentum : {true, false}) {
    Sequential model(4);
    model.add<Dense>(4, 2);
    Params params = zero_params(model);
    OptimizerOptions o = basic_options();
    o.use_adaptive_learning_rate = true;
    o.use_adaptive_momentum = adaptive_momentum;
    o.use_adaptive_damping = true;
    o.damping_adaptation_interval = 1;
    o.initial_damping = 1e-2;
    Optimizer opt(model, Regression::value, o);
    std::mt19937 rng(5);
    auto zero_targets = [&]() {
      Batch b;
      b.inputs = random_matrix(8, 4, rng);
      b.targets = Matrix::Zero(8, 2);
      return b;
    };
    StepValues v;
    if (!adaptive_momentum)
      v.momentum = 0.5;
    for (int s = 0; s < 4; ++s) {
      const StepStats st = opt.step(params, zero_targets, v);
      EXPECT_EQ(st.grad_norm, 0.0);
      EXPECT_FALSE(st.rejected) << "step " << s;
      EXPECT_EQ(st.learning_rate, 0.0) << "step " << s;
      EXPECT_EQ(st.update_norm, 0.0) << "step " << s;
      EXPECT_FALSE(st.rho.has_value()) << "step " << s;
    }
    EXPECT_EQ(opt.damping(), 1e-2);
    for (const Matrix &p : params)
      EXPECT_TRUE(p.isZero(0.0f));
  }
}

// A step is not a transaction: an exception after the curvature update (here the value function
// throwing at θ + Δ, where adaptive damping evaluates rho) keeps that update, but leaves the
// parameters, the velocity, the damping and the step count as they were, and the next step runs.
TEST(kfacOptimizer, AnExceptionAtTheCandidateLeavesParametersVelocityAndStepCount) {
  Regression r;
  OptimizerOptions o = basic_options();
  o.use_adaptive_damping = true;
  o.damping_adaptation_interval = 1;
  o.initial_damping = 1e-2;
  int calls = 0, throw_at = -1;
  ValueFunction value = [&](const Matrix &out, const Batch &batch, ValueContext &ctx) {
    if (calls++ == throw_at)
      throw std::runtime_error("value function failed at the candidate");
    Regression::value(out, batch, ctx);
  };
  Optimizer opt(r.model, value, o);
  StepValues v;
  v.learning_rate = 0.1;
  v.momentum = 0.5;
  opt.step(r.params, r.source(), v); // burn-in and a first step
  calls = 0;
  ASSERT_TRUE(opt.step(r.params, r.source(), v).rho.has_value());
  const int per_step = calls; // the last call of a step is rho's, at θ + Δ

  const Params params = r.params, velocity = opt.velocity();
  const double damping = opt.damping();
  const int steps = opt.step_count(), updates = opt.curvature_updates();
  calls = 0;
  throw_at = per_step - 1;
  EXPECT_THROW(opt.step(r.params, r.source(), v), std::runtime_error);
  EXPECT_EQ(calls, per_step);
  EXPECT_EQ(opt.step_count(), steps);
  EXPECT_EQ(opt.damping(), damping);
  EXPECT_EQ(opt.curvature_updates(), updates + 1); // kept, as documented
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(r.params[i], params[i]) << "parameter " << i;
    EXPECT_EQ(opt.velocity()[i], velocity[i]) << "velocity " << i;
  }
  throw_at = -1;
  const StepStats st = opt.step(r.params, r.source(), v);
  EXPECT_FALSE(st.rejected);
  EXPECT_EQ(opt.step_count(), steps + 1);
}

// Debug mode runs the kernels on the calling thread while the optimizer works, and only then:
// the scope ends with every call, a throwing one too, and it never touches Halide's process-wide
// thread count.
TEST(kfacOptimizer, DebugModeIsSerialOnlyDuringItsCalls) {
  Regression r;
  OptimizerOptions o = basic_options();
  o.debug = true;
  int serial_inside = -1;
  ValueFunction value = [&](const Matrix &out, const Batch &batch, ValueContext &ctx) {
    serial_inside = kernels_run_serially();
    Regression::value(out, batch, ctx);
  };
  const int callers = 3;
  const int original = halide_set_num_threads(callers);
  Optimizer opt(r.model, value, o);
  EXPECT_FALSE(kernels_run_serially()) << "the constructor left a scope open";
  opt.step(r.params, r.source(), values(0.1, 0.0, 1e-2));
  EXPECT_EQ(serial_inside, 1);
  EXPECT_FALSE(kernels_run_serially()) << "step() left a scope open";
  serial_inside = -1;
  opt.evaluate(r.params, r.next());
  EXPECT_EQ(serial_inside, 1);
  EXPECT_FALSE(kernels_run_serially()) << "evaluate() left a scope open";
  Params broken = r.params;
  broken[0](0, 0) = std::numeric_limits<float>::quiet_NaN();
  try {
    opt.step(broken, r.source(), values(0.1, 0.0, 1e-2));
    ADD_FAILURE() << "debug mode took a step from NaN parameters";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("'params' contain NaN or Inf"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(kernels_run_serially()) << "a throwing step() left a scope open";
  EXPECT_EQ(halide_set_num_threads(callers), callers) << "the process-wide count changed";

  // Without debug mode the same parameters are a rejected step, not an error, and the kernels
  // use the pool.
  serial_inside = -1;
  Optimizer plain(r.model, value, basic_options());
  plain.step(r.params, r.source(), values(0.1, 0.0, 1e-2));
  EXPECT_EQ(serial_inside, 0);
  EXPECT_TRUE(plain.step(broken, r.source(), values(0.1, 0.0, 1e-2)).rejected);
  halide_set_num_threads(original);
}

// serial_kernels moves where the kernels run, not what they compute: the same parameters to the
// bit after steps with curvature and inverse updates, the quadratic model and rho. (600 hidden
// units and 1000 examples, so the factor updates and the layers' passes are large enough for the
// pool to take them when allowed.)
TEST(kfacOptimizer, SerialKernelsGiveTheSameStepsAsThePool) {
  auto run = [](bool serial) {
    Regression r(600, 1000);
    OptimizerOptions o = basic_options();
    o.serial_kernels = serial;
    o.use_adaptive_damping = true;
    o.use_adaptive_learning_rate = true;
    o.use_adaptive_momentum = true;
    o.inverse_update_period = 2;
    o.always_compute_rho = true;
    int serial_inside = -1;
    ValueFunction value = [&](const Matrix &out, const Batch &batch, ValueContext &ctx) {
      serial_inside = kernels_run_serially();
      Regression::value(out, batch, ctx);
    };
    Optimizer opt(r.model, value, o);
    std::vector<double> losses;
    for (int i = 0; i < 6; ++i)
      losses.push_back(opt.step(r.params, r.source()).loss);
    EXPECT_EQ(serial_inside, serial ? 1 : 0);
    return std::make_pair(r.params, losses);
  };
  // In a fresh process (ctest runs each case alone), a counting handler set now sits under the
  // scopes' handler and sees every pooled loop: the pooled run must have some, the serial none.
  static std::atomic<int> pooled_loops{0};
  const halide_do_par_for_t fresh = halide_set_custom_do_par_for(
      [](void *uc, halide_task_t f, int min, int size, uint8_t *closure) {
        ++pooled_loops;
        return halide_default_do_par_for(uc, f, min, size, closure);
      });
  const bool counting = fresh == halide_default_do_par_for;
  if (!counting)
    halide_set_custom_do_par_for(fresh);
  const auto [pooled, pooled_losses] = run(false);
  const int after_pooled = pooled_loops.load();
  const auto [serial, serial_losses] = run(true);
  if (counting) {
    EXPECT_GT(after_pooled, 0) << "the pooled run never used the pool: the test proves nothing";
    EXPECT_EQ(pooled_loops.load(), after_pooled) << "the serial run used the pool";
  }
  EXPECT_EQ(pooled_losses, serial_losses);
  ASSERT_EQ(pooled.size(), serial.size());
  for (size_t i = 0; i < pooled.size(); ++i)
    EXPECT_EQ(pooled[i], serial[i]) << "parameter " << i;
}

// rho measures how well the quadratic model predicted the change: a small step on a smooth
// network is predicted well (rho ≈ 1: damping must fall), a huge one is not (rho < 0.25: damping
// must rise).
TEST(kfacOptimizer, LevenbergMarquardtMovesDampingWithRho) {
  for (double lr : {0.01, 50.0}) {
    Regression r(8, 64);
    OptimizerOptions o = adapted_damping_options();
    Optimizer opt(r.model, Regression::value, o);
    StepValues v;
    v.learning_rate = lr;
    v.momentum = 0.0;
    const StepStats st = opt.step(r.params, r.source(), v);
    ASSERT_TRUE(st.rho && std::isfinite(*st.rho));
    if (lr < 1.0) {
      EXPECT_GT(*st.rho, 0.75) << "lr " << lr;
      EXPECT_NEAR(opt.damping(), 0.5e-2, 1e-9);
    } else {
      EXPECT_LT(*st.rho, 0.25) << "lr " << lr;
      EXPECT_NEAR(opt.damping(), 2e-2, 1e-9);
    }
  }
}

// rho costs a forward pass and a Jacobian-vector product: like kfac-jax, the optimizer computes
// it only on the steps where adaptive damping reads it, unless asked to every step.
TEST(kfacOptimizer, RhoIsComputedOnlyWhereDampingAdaptationNeedsIt) {
  for (int mode = 0; mode < 3; ++mode) {
    Regression r(8, 64);
    OptimizerOptions o = basic_options();
    o.use_adaptive_damping = mode == 1;
    o.damping_adaptation_interval = 3;
    o.always_compute_rho = mode == 2;
    Optimizer opt(r.model, Regression::value, o);
    StepValues v;
    v.learning_rate = 0.01;
    v.momentum = 0.0;
    if (mode != 1)
      v.damping = 1e-2;
    for (int s = 0; s < 6; ++s) {
      const StepStats st = opt.step(r.params, r.source(), v);
      const bool expected = mode == 2 || (mode == 1 && (s + 1) % 3 == 0);
      EXPECT_EQ(st.rho.has_value(), expected) << "mode " << mode << " step " << s;
      if (st.rho) {
        EXPECT_TRUE(std::isfinite(*st.rho)) << "mode " << mode << " step " << s;
      }
    }
  }
}

// The adaptive learning rate minimises the quadratic model along u; on a linear least-squares
// problem that model is the loss, so scaling the chosen step either way cannot do better.
TEST(kfacOptimizer, AdaptiveLearningRateMinimisesTheQuadraticModel) {
  Regression r(0, 64);
  OptimizerOptions o = basic_options();
  o.use_adaptive_learning_rate = true;
  o.use_adaptive_momentum = true;
  o.always_compute_rho = true;
  o.l2_reg = 0.0f;
  Optimizer opt(r.model, Regression::value, o);
  StepValues v;
  v.damping = 1e-6;
  for (int s = 0; s < 3; ++s) {
    const Params before = r.params;
    std::vector<Batch> last;
    const StepStats st = opt.step(r.params, r.recording(last), v);
    EXPECT_GT(st.learning_rate, 0.0);
    Params delta = r.params;
    axpy(-1.0f, before, delta);
    const double at = opt.evaluate(r.params, last.back());
    for (float f : {0.8f, 1.2f}) {
      Params p = before;
      axpy(f, delta, p);
      EXPECT_LE(at, opt.evaluate(p, last.back()) + 1e-7) << "step " << s << " factor " << f;
    }
    ASSERT_TRUE(st.rho);
    EXPECT_NEAR(*st.rho, 1.0, 0.05);
    const StepTimings &tm = st.timings;
    EXPECT_GT(tm.update_s, 0.0);
    EXPECT_GE(tm.total_s, tm.forward_backward_s + tm.curvature_update_s + tm.inverse_s +
                              tm.precondition_s + tm.update_s);
  }
}

// With an adaptive learning rate and momentum the step is Δ = α u + β v with u = F̂⁻¹g, and
// (α, β) minimises the quadratic model q(α, β) = L(θ + α u + β v) - L(θ) + γ/2 ||α u + β v||²,
// exact for a linear least-squares model. Checked independently: u from the estimator's
// inverses and the gradient at θ, Δ decomposed over (u, v) by least squares, and an
// independent 2x2 solve of q (gradient and Hessian in (α, β) from central differences of the
// loss, exact for a quadratic) whose Newton correction must vanish at the chosen (α, β).
TEST(kfacOptimizer, AdaptiveLearningRateAndMomentumSolveTheTwoByTwoModel) {
  Regression r(0, 64);
  OptimizerOptions o = basic_options();
  o.use_adaptive_learning_rate = true;
  o.use_adaptive_momentum = true;
  Optimizer opt(r.model, Regression::value, o);
  const double damping = 1e-2;
  const float gamma = static_cast<float>(o.l2_reg + damping);
  StepValues v;
  v.damping = damping;
  for (int s = 0; s < 2; ++s)
    opt.step(r.params, r.source(), v);
  const Params theta = r.params, vel = opt.velocity();
  std::vector<Batch> last;
  const StepStats st = opt.step(r.params, r.recording(last), v);
  ASSERT_FALSE(st.rejected);
  // inverse_update_period = 1: the inverses the step used, at the same damping.
  const Params u = opt.estimator().multiply_matpower(opt.gradient(theta, last.back()), -1, gamma);
  Params delta = r.params;
  axpy(-1.0f, theta, delta);
  // Δ over (u, v): the normal equations of the least-squares fit.
  const double uu = dot(u, u), uv = dot(u, vel), vv = dot(vel, vel);
  const double du = dot(delta, u), dv = dot(delta, vel), dd = dot(delta, delta);
  const double det_n = uu * vv - uv * uv;
  ASSERT_GT(det_n, 0.0);
  const double alpha = (vv * du - uv * dv) / det_n, beta = (uu * dv - uv * du) / det_n;
  const double residual = dd - alpha * du - beta * dv; // ||Δ - α u - β v||²
  EXPECT_LT(residual, 1e-6 * dd);
  EXPECT_NEAR(alpha, -st.learning_rate, 1e-3 * std::abs(alpha));
  EXPECT_NEAR(beta, st.momentum, 1e-3 * std::abs(beta) + 1e-6);
  ASSERT_NE(alpha, 0.0);
  ASSERT_NE(beta, 0.0);
  auto q = [&](double a, double b) {
    Params step = u;
    scale(static_cast<float>(a), step);
    axpy(static_cast<float>(b), vel, step);
    Params p = theta;
    axpy(1.0f, step, p);
    return opt.evaluate(p, last.back()) + 0.5 * gamma * squared_norm(step);
  };
  const double ha = 0.25 * std::abs(alpha), hb = 0.25 * std::abs(beta);
  const double q0 = q(alpha, beta);
  const double qa = q(alpha + ha, beta), qA = q(alpha - ha, beta);
  const double qb = q(alpha, beta + hb), qB = q(alpha, beta - hb);
  const double hab = (q(alpha + ha, beta + hb) - q(alpha + ha, beta - hb) -
                      q(alpha - ha, beta + hb) + q(alpha - ha, beta - hb)) /
                     (4 * ha * hb);
  const double ga = (qa - qA) / (2 * ha), gb = (qb - qB) / (2 * hb);
  const double haa = (qa - 2 * q0 + qA) / (ha * ha), hbb = (qb - 2 * q0 + qB) / (hb * hb);
  const double det = haa * hbb - hab * hab;
  ASSERT_GT(haa, 0.0);
  ASSERT_GT(det, 0.0);
  const double da = -(hbb * ga - hab * gb) / det, db = -(-hab * ga + haa * gb) / det;
  EXPECT_LT(std::abs(da), 0.02 * std::abs(alpha)) << "alpha " << alpha << " beta " << beta;
  EXPECT_LT(std::abs(db), 0.02 * std::abs(beta)) << "alpha " << alpha << " beta " << beta;
}

TEST(kfacOptimizer, ValueFunctionFlagsGuardAuxStateAndRng) {
  Regression r;
  auto with_aux = [](const Matrix &out, const Batch &b, ValueContext &ctx) {
    Regression::value(out, b, ctx);
    ctx.set_aux("mean_output", out.mean());
    ctx.rng();
    if (!ctx.state().has_value())
      ctx.state() = 0;
    ctx.state() = std::any_cast<int>(ctx.state()) + 1;
  };
  Optimizer bad(r.model, with_aux, basic_options());
  EXPECT_THROW(bad.step(r.params, r.source(), values(0.1, 0, 1e-2)), Error);
  OptimizerOptions o = basic_options();
  o.value_func_has_aux = o.value_func_has_rng = o.value_func_has_state = true;
  Optimizer good(r.model, with_aux, o);
  const StepStats st = good.step(r.params, r.source(), values(0.1, 0, 1e-2));
  EXPECT_EQ(st.aux.count("mean_output"), 1u);
  EXPECT_GT(std::any_cast<int>(good.value_func_state()), 0);
  EXPECT_GE(st.timings.total_s, st.timings.forward_backward_s);
  EXPECT_GT(st.grad_norm, 0.0);
  EXPECT_GT(st.update_norm, 0.0);
}

TEST(kfacOptimizer, BatchProcessFuncSeesEveryBatch) {
  Regression r;
  OptimizerOptions o = basic_options();
  int processed = 0;
  o.batch_process_func = [&](const Batch &b) {
    ++processed;
    return b;
  };
  Optimizer opt(r.model, Regression::value, o);
  opt.step(r.params, r.source(), values(0.1, 0, 1e-2));
  opt.step(r.params, r.source(), values(0.1, 0, 1e-2));
  EXPECT_EQ(processed, o.num_burnin_steps + 2);
}

// A curvature subset: the factors see only the head of each batch (burn-in included), while the
// loss and gradient use all of it.
TEST(kfacOptimizer, CurvatureSubsetFeedsTheFactorsOnlyTheBatchHead) {
  Regression r(0, 16);
  OptimizerOptions o = basic_options();
  o.num_burnin_steps = 2;
  o.curvature_ema = 0.9;
  o.curvature_batch_size = 5;
  std::vector<Batch> seen;
  auto source = r.recording(seen);
  Optimizer opt(r.model, Regression::value, o);
  const Params before = r.params;
  const StepStats st = opt.step(r.params, source, values(0.1, 0.0, 1e-3));
  ASSERT_EQ(seen.size(), 3u);
  const auto &block = dynamic_cast<const DenseTwoKroneckerFactored &>(*opt.estimator().blocks()[0]);
  const MatrixXd burn = (input_factor(head(seen[0], 5)) + input_factor(head(seen[1], 5))) / 2;
  const MatrixXd expected = (0.9 * burn + input_factor(head(seen[2], 5))) / 1.9;
  EXPECT_LT(rel_err(block.factor_a().cast<double>(), expected), 1e-5);
  // The whole-batch factor is far from it, so the comparison above can tell them apart.
  const MatrixXd whole =
      (0.9 * (input_factor(seen[0]) + input_factor(seen[1])) / 2 + input_factor(seen[2])) / 1.9;
  EXPECT_GT(rel_err(whole, expected), 1e-2);
  // The gradient is the whole batch's.
  const double g_norm = std::sqrt(squared_norm(opt.gradient(before, seen[2])));
  EXPECT_NEAR(st.grad_norm, g_norm, 1e-5 * g_norm);
  EXPECT_GT(std::abs(std::sqrt(squared_norm(opt.gradient(before, head(seen[2], 5)))) - g_norm),
            1e-2 * g_norm);
}

// With a curvature subset the adaptive learning rate minimises q(tΔ) = t gᵀΔ + t²/2 Δᵀ(C_h + γ)Δ
// at t = 1, g the whole batch's gradient and C_h the subset's curvature. For linear least squares
// ΔᵀC_hΔ = L_h(θ+Δ) + L_h(θ−Δ) − 2 L_h(θ) exactly (L_h the loss on the subset), so the stationarity
// condition gᵀΔ + ΔᵀC_hΔ + γ|Δ|² = 0 can be checked from loss values alone.
TEST(kfacOptimizer, CurvatureSubsetDrivesTheQuadraticModel) {
  Regression r(0, 64);
  OptimizerOptions o = basic_options();
  o.use_adaptive_learning_rate = true;
  o.curvature_batch_size = 8;
  o.always_compute_rho = true;
  Optimizer opt(r.model, Regression::value, o);
  StepValues v;
  v.momentum = 0.0;
  const double gamma = 1e-2;
  v.damping = gamma;
  const Params before = r.params;
  std::vector<Batch> last;
  const StepStats st = opt.step(r.params, r.recording(last), v);
  ASSERT_TRUE(st.rho && std::isfinite(*st.rho));
  Params delta = r.params;
  axpy(-1.0f, before, delta);
  const Batch &b = last.back();
  const Batch h = head(b, 8);
  auto curvature = [&](const Batch &batch) {
    Params plus = before, minus = before;
    axpy(1.0f, delta, plus);
    axpy(-1.0f, delta, minus);
    return opt.evaluate(plus, batch) + opt.evaluate(minus, batch) -
           2.0 * opt.evaluate(before, batch);
  };
  const double gd = dot(opt.gradient(before, b), delta);
  ASSERT_LT(gd, 0.0);
  const double stationarity = gd + curvature(h) + gamma * squared_norm(delta);
  EXPECT_LT(std::abs(stationarity), 2e-3 * std::abs(gd));
  // The whole batch's curvature would give another step: the check can tell them apart.
  EXPECT_GT(std::abs(gd + curvature(b) + gamma * squared_norm(delta)), 5e-2 * std::abs(gd));
}

TEST(kfacOptimizer, CurvatureSubsetNoSmallerThanTheBatchIsTheWholeBatch) {
  Params reference;
  for (int size : {0, 32, 100}) {
    Regression r(8, 32);
    OptimizerOptions o = basic_options();
    o.curvature_batch_size = size;
    o.use_adaptive_learning_rate = true;
    Optimizer opt(r.model, Regression::value, o);
    StepValues v;
    v.momentum = 0.5;
    v.damping = 1e-2;
    for (int s = 0; s < 3; ++s)
      opt.step(r.params, r.source(), v);
    if (size == 0) {
      reference = r.params;
    } else {
      for (size_t i = 0; i < reference.size(); ++i)
        EXPECT_EQ(r.params[i], reference[i]) << "curvature_batch_size " << size;
    }
  }
  {
    // Targets that are not one row per example cannot be cut with the batch.
    Regression r;
    OptimizerOptions o = basic_options();
    o.curvature_batch_size = 4;
    auto no_targets = [](const Matrix &out, const Batch &, ValueContext &ctx) {
      ctx.losses().register_squared_error_loss(out, nullptr);
    };
    Optimizer opt(r.model, no_targets, o);
    auto odd = [&]() {
      Batch b = r.next();
      b.targets = Matrix::Zero(1, 1);
      return b;
    };
    try {
      opt.step(r.params, odd, values(0.1, 0.0, 1e-2));
      FAIL() << "targets with 1 row for a batch of 32 were cut without complaint";
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find("batch.targets has 1 rows"), std::string::npos)
          << e.what();
    }
  }
  OptimizerOptions o = basic_options();
  o.curvature_batch_size = -1;
  Regression r;
  try {
    Optimizer opt(r.model, Regression::value, o);
    FAIL() << "a negative curvature_batch_size was accepted";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("curvature_batch_size"), std::string::npos) << e.what();
  }
}

// The spec's maths, written out independently in double precision for a two-layer tanh network
// with a squared-error loss (= normal, variance 0.5, Fisher 2I) and exact Fisher factors:
// burn-in as a plain mean, EMA as S / w, G from per-example gradients of the summed loss over B,
// pi-adjusted damping with diagonal_weight = l2_reg + damping, stale inverses between updates,
// the l2 term in the gradient, Δ = −lr·u + μ·v with μ = 0 on the first step.
double relative_error(const MatrixXd &got, const MatrixXd &want) {
  return (got - want).norm() / std::max(want.norm(), 1e-12);
}

struct SpecReference {
  std::vector<MatrixXd> W, b, SA, SG, A_inv, G_inv, vW, vb;
  double weight = 0.0;

  explicit SpecReference(const Params &p) {
    for (size_t l = 0; l < 2; ++l) {
      W.push_back(p[2 * l].cast<double>());
      b.push_back(p[2 * l + 1].cast<double>());
      SA.push_back(MatrixXd::Zero(W[l].rows() + 1, W[l].rows() + 1));
      SG.push_back(MatrixXd::Zero(W[l].cols(), W[l].cols()));
      vW.push_back(MatrixXd::Zero(W[l].rows(), W[l].cols()));
      vb.push_back(MatrixXd::Zero(1, W[l].cols()));
    }
    A_inv.resize(2);
    G_inv.resize(2);
  }
  // Layer inputs a[0], a[1] and the output.
  std::vector<MatrixXd> forward(const MatrixXd &x) const {
    std::vector<MatrixXd> a{x};
    MatrixXd z0 = x * W[0];
    z0.rowwise() += b[0].row(0);
    a.push_back(z0.array().tanh().matrix());
    MatrixXd z1 = a[1] * W[1];
    z1.rowwise() += b[1].row(0);
    a.push_back(z1);
    return a;
  }
  // Output gradients of both layers for an output cotangent.
  std::vector<MatrixXd> backward(const std::vector<MatrixXd> &a, const MatrixXd &cot) const {
    const MatrixXd dz1 = cot;
    const MatrixXd dz0 =
        ((dz1 * W[1].transpose()).array() * (1.0 - a[1].array().square())).matrix();
    return {dz0, dz1};
  }
  void update_curvature(const MatrixXd &x, double ema_old, double ema_new) {
    const std::vector<MatrixXd> a = forward(x);
    const double B = static_cast<double>(x.rows());
    std::vector<MatrixXd> G{MatrixXd::Zero(SG[0].rows(), SG[0].cols()),
                            MatrixXd::Zero(SG[1].rows(), SG[1].cols())};
    for (Eigen::Index k = 0; k < a[2].cols(); ++k) { // exact Fisher: one-hot times √2
      MatrixXd e = MatrixXd::Zero(a[2].rows(), a[2].cols());
      e.col(k).setConstant(std::sqrt(2.0));
      const std::vector<MatrixXd> dz = backward(a, e);
      for (int l = 0; l < 2; ++l)
        G[l] += dz[l].transpose() * dz[l] / B;
    }
    for (int l = 0; l < 2; ++l) {
      MatrixXd ab(a[l].rows(), a[l].cols() + 1);
      ab << a[l], MatrixXd::Ones(a[l].rows(), 1);
      SA[l] = ema_old * SA[l] + ema_new * ab.transpose() * ab / B;
      SG[l] = ema_old * SG[l] + ema_new * G[l];
    }
    weight = ema_old * weight + ema_new;
  }
  void update_inverse(double gamma) {
    for (int l = 0; l < 2; ++l) {
      const MatrixXd A = SA[l] / weight, G = SG[l] / weight;
      const double pi = std::sqrt((A.trace() / A.rows()) / (G.trace() / G.rows()));
      A_inv[l] = (A + pi * std::sqrt(gamma) * MatrixXd::Identity(A.rows(), A.cols())).inverse();
      G_inv[l] = (G + std::sqrt(gamma) / pi * MatrixXd::Identity(G.rows(), G.cols())).inverse();
    }
  }
  void step(const MatrixXd &x, const MatrixXd &t, double lr, double mu, double l2) {
    const std::vector<MatrixXd> a = forward(x);
    const std::vector<MatrixXd> dz = backward(a, 2.0 * (a[2] - t) / static_cast<double>(x.rows()));
    for (int l = 0; l < 2; ++l) {
      MatrixXd V(W[l].rows() + 1, W[l].cols());
      V << a[l].transpose() * dz[l] + l2 * W[l], dz[l].colwise().sum() + l2 * b[l];
      const MatrixXd U = A_inv[l] * V * G_inv[l];
      vW[l] = -lr * U.topRows(W[l].rows()) + mu * vW[l];
      vb[l] = -lr * U.bottomRows(1) + mu * vb[l];
      W[l] += vW[l];
      b[l] += vb[l];
    }
  }
};

TEST(kfacOptimizer, StepsMatchADoublePrecisionReferenceOfTheSpecMaths) {
  Regression r(6, 16, 7);
  OptimizerOptions o;
  o.estimation_mode = EstimationMode::fisher_exact;
  o.num_burnin_steps = 3;
  o.inverse_update_period = 2;
  o.l2_reg = 1e-2f;
  const double lr = 0.3, mu = 0.8, damping = 1e-2;
  Optimizer opt(r.model, Regression::value, o);
  SpecReference ref(r.params);

  std::vector<Batch> batches;
  for (int i = 0; i < o.num_burnin_steps + 6; ++i)
    batches.push_back(r.next());
  size_t pulled = 0;
  auto source = [&]() { return batches.at(pulled++); };
  for (int s = 0; s < 6; ++s) {
    if (s == 0) {
      for (int i = 0; i < o.num_burnin_steps; ++i)
        ref.update_curvature(batches[i].inputs.cast<double>(), 1.0, 1.0 / o.num_burnin_steps);
    }
    const size_t at = s == 0 ? o.num_burnin_steps : pulled;
    const MatrixXd x = batches[at].inputs.cast<double>(), t = batches[at].targets.cast<double>();
    ref.update_curvature(x, o.curvature_ema, 1.0);
    if (s % o.inverse_update_period == 0)
      ref.update_inverse(o.l2_reg + damping);
    ref.step(x, t, lr, s == 0 ? 0.0 : mu, o.l2_reg);

    opt.step(r.params, source, values(lr, mu, damping));
    for (int l = 0; l < 2; ++l) {
      EXPECT_LT(relative_error(r.params[2 * l].cast<double>(), ref.W[l]), 1e-4)
          << "step " << s << " layer " << l << " weights";
      EXPECT_LT(relative_error(r.params[2 * l + 1].cast<double>(), ref.b[l]), 1e-4)
          << "step " << s << " layer " << l << " bias";
    }
  }
}

double train(bool kfac, double lr, int steps, double momentum) {
  Regression r(8, 64, 5);
  double loss = 0;
  if (kfac) {
    OptimizerOptions o;
    o.estimation_mode = EstimationMode::fisher_gradients;
    o.num_burnin_steps = 5;
    o.inverse_update_period = 2;
    o.seed = 3;
    Optimizer opt(r.model, Regression::value, o);
    for (int s = 0; s < steps; ++s)
      loss = opt.step(r.params, r.source(), values(lr, momentum, 1e-2)).loss;
  } else {
    OptimizerOptions o;
    Optimizer eval(r.model, Regression::value, o);
    Params v = zeros_like(r.params);
    for (int s = 0; s < steps; ++s) {
      const Batch b = r.next();
      loss = eval.evaluate(r.params, b);
      const Params g = eval.gradient(r.params, b);
      scale(static_cast<float>(momentum), v);
      axpy(static_cast<float>(-lr), g, v);
      axpy(1.0f, v, r.params);
    }
  }
  return loss;
}

// K-FAC with one fixed setting against SGD at the best of a grid of learning rates and momenta,
// after the same number of steps on the same batches.
TEST(kfacOptimizer, KfacDecreasesLossFasterThanSgdOnRegression) {
  const int steps = 40;
  const double kfac_loss = train(true, 0.1, steps, 0.0);
  double best_sgd = std::numeric_limits<double>::infinity();
  for (double momentum : {0.0, 0.5, 0.9}) {
    for (double lr : {0.01, 0.03, 0.1, 0.3}) {
      const double l = train(false, lr, steps, momentum);
      if (std::isfinite(l))
        best_sgd = std::min(best_sgd, l);
    }
  }
  EXPECT_LT(kfac_loss, 0.5 * best_sgd) << "kfac " << kfac_loss << " best sgd " << best_sgd;
}

} // namespace
} // namespace hkfac::kfac
