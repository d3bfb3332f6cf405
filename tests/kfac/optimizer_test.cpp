// Optimizer semantics: burn-in, moving averages, update periods, schedules, norm constraint,
// rejection of non-finite steps, adaptive damping / learning rate, and K-FAC against SGD.
#include <HalideRuntime.h>

#include <atomic>
#include <gtest/gtest.h>

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
  EXPECT_EQ(st.rho, 0.0); // a rejected step reduced nothing
  for (size_t i = 0; i < before.size(); ++i)
    EXPECT_EQ(r.params[i], before[i]);
  const StepStats next = opt.step(r.params, r.source(), values(0.1, 0.0, 1e-2));
  EXPECT_FALSE(next.rejected);
  EXPECT_EQ(next.rejected_steps, 1);
  EXPECT_NEAR(next.damping, 1e-1, 1e-9); // raised tenfold
  EXPECT_TRUE(all_finite(r.params));
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
