// Optimizer semantics: burn-in, moving averages, update periods, schedules, norm constraint,
// rejection of non-finite steps, adaptive damping / learning rate, and K-FAC against SGD.
#include <gtest/gtest.h>

#include "hkfac/error.h"
#include "hkfac/kfac/blocks/dense_two_kronecker_factored.h"
#include "hkfac/kfac/optimizer.h"
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

StepValues values(double lr, double momentum, double damping) {
  StepValues v;
  v.learning_rate = lr;
  v.momentum = momentum;
  v.damping = damping;
  return v;
}

// A(batch) = X̄ᵀX̄ / B for the single dense layer, in double.
MatrixXd input_factor(const Batch &b) {
  MatrixXd x(b.inputs.rows(), b.inputs.cols() + 1);
  x.leftCols(b.inputs.cols()) = b.inputs.cast<double>();
  x.rightCols(1).setOnes();
  return x.transpose() * x / static_cast<double>(b.inputs.rows());
}

TEST(kfacOptimizer, BurnInAveragesItsBatchesThenStepsUseTheEma) {
  Regression r(0, 16);
  OptimizerOptions o = basic_options();
  o.num_burnin_steps = 3;
  o.curvature_ema = 0.9;
  std::vector<Batch> seen;
  auto source = [&]() {
    seen.push_back(r.next());
    return seen.back();
  };
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

TEST(kfacOptimizer, InversesAndCurvatureFollowTheirPeriods) {
  Regression r;
  OptimizerOptions o = basic_options();
  o.inverse_update_period = 3;
  o.curvature_update_period = 2;
  Optimizer opt(r.model, Regression::value, o);
  for (int s = 0; s < 7; ++s)
    opt.step(r.params, r.source(), values(0.05, 0.5, 1e-2));
  EXPECT_EQ(opt.inverse_updates(), 3);                        // steps 0, 3, 6
  EXPECT_EQ(opt.curvature_updates(), o.num_burnin_steps + 4); // steps 0, 2, 4, 6
}

TEST(kfacOptimizer, MomentumIsZeroOnTheFirstStep) {
  Regression r;
  OptimizerOptions o = basic_options();
  o.momentum_schedule = [](int) { return 0.9; };
  Optimizer opt(r.model, Regression::value, o);
  StepValues v;
  v.learning_rate = 0.1;
  v.damping = 1e-2;
  EXPECT_EQ(opt.step(r.params, r.source(), v).momentum, 0.0);
  EXPECT_EQ(opt.step(r.params, r.source(), v).momentum, 0.9);
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
  OptimizerOptions multi = basic_options();
  multi.multi_device = true;
  EXPECT_THROW(Optimizer(r.model, Regression::value, multi), Error);
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

TEST(kfacOptimizer, NonFiniteStepIsRejectedAndRaisesDamping) {
  Regression r;
  Optimizer opt(r.model, Regression::value, basic_options());
  opt.step(r.params, r.source(), values(0.1, 0.0, 1e-2));
  const Params before = r.params;
  auto poisoned = [&]() {
    Batch b = r.next();
    b.targets(0, 0) = std::numeric_limits<float>::quiet_NaN();
    return b;
  };
  const StepStats st = opt.step(r.params, poisoned, values(0.1, 0.0, 1e-2));
  EXPECT_TRUE(st.rejected);
  EXPECT_EQ(st.rejected_steps, 1);
  for (size_t i = 0; i < before.size(); ++i)
    EXPECT_EQ(r.params[i], before[i]);
  const StepStats next = opt.step(r.params, r.source(), values(0.1, 0.0, 1e-2));
  EXPECT_FALSE(next.rejected);
  EXPECT_EQ(next.rejected_steps, 1);
  EXPECT_NEAR(next.damping, 1e-1, 1e-9); // raised tenfold
  EXPECT_TRUE(all_finite(r.params));
}

// rho measures how well the quadratic model predicted the change: a small step on a smooth
// network is predicted well (rho ≈ 1: damping must fall), a huge one is not (rho < 0.25: damping
// must rise).
TEST(kfacOptimizer, LevenbergMarquardtMovesDampingWithRho) {
  for (double lr : {0.01, 50.0}) {
    Regression r(8, 64);
    OptimizerOptions o = basic_options();
    o.use_adaptive_damping = true;
    o.initial_damping = 1e-2;
    o.damping_adaptation_interval = 1;
    o.damping_adaptation_decay = 0.5;
    Optimizer opt(r.model, Regression::value, o);
    StepValues v;
    v.learning_rate = lr;
    v.momentum = 0.0;
    const StepStats st = opt.step(r.params, r.source(), v);
    EXPECT_TRUE(std::isfinite(st.rho));
    if (lr < 1.0) {
      EXPECT_GT(st.rho, 0.75) << "lr " << lr;
      EXPECT_NEAR(opt.damping(), 0.5e-2, 1e-9);
    } else {
      EXPECT_LT(st.rho, 0.25) << "lr " << lr;
      EXPECT_NEAR(opt.damping(), 2e-2, 1e-9);
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
  o.l2_reg = 0.0f;
  Optimizer opt(r.model, Regression::value, o);
  StepValues v;
  v.damping = 1e-6;
  for (int s = 0; s < 3; ++s) {
    const Params before = r.params;
    std::vector<Batch> last;
    auto source = [&]() {
      last.push_back(r.next());
      return last.back();
    };
    const StepStats st = opt.step(r.params, source, v);
    EXPECT_GT(st.learning_rate, 0.0);
    Params delta = r.params;
    axpy(-1.0f, before, delta);
    const double at = opt.evaluate(r.params, last.back());
    for (float f : {0.8f, 1.2f}) {
      Params p = before;
      axpy(f, delta, p);
      EXPECT_LE(at, opt.evaluate(p, last.back()) + 1e-7) << "step " << s << " factor " << f;
    }
    EXPECT_NEAR(st.rho, 1.0, 0.05);
  }
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
