// The cost-model trainer: loss derivatives, the kfac Model wrapper's layouts and products, and
// training that learns a teacher network's rankings.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "hkfac/cost_model/evaluation.h"
#include "hkfac/cost_model/network.h"
#include "hkfac/cost_model/relative_throughput_loss.h"
#include "hkfac/cost_model/schedule_batch.h"
#include "hkfac/cost_model/trainer.h"
#include "hkfac/error.h"
#include "hkfac/kernels/cost_model.h"
#include "loss_checks.h"

namespace hkfac::cost_model {
namespace {

constexpr int S = kCpuScheduleFeatures;

double total(const RelativeThroughputLoss &l) { return l.values().sum(); }

TEST(RelativeThroughputLoss, GradientMatchesFiniteDifferencesIncludingTheReference) {
  const kfac::Matrix p = column({2.0f, 0.7f, 1.5f, 3.0f, 0.9f});
  const kfac::Matrix t = column({4.0f, 1.0f, 2.5f, 9.0f, 1.2f}); // schedule 1 is the fastest
  const RelativeThroughputLoss loss(p, &t);
  const kfac::Matrix g = loss.gradient();
  for (Eigen::Index n = 0; n < p.rows(); ++n) {
    const float h = 1e-3f * p(n, 0);
    kfac::Matrix up = p, down = p;
    up(n, 0) += h;
    down(n, 0) -= h;
    const double fd =
        (total(RelativeThroughputLoss(up, &t)) - total(RelativeThroughputLoss(down, &t))) /
        (static_cast<double>(up(n, 0)) - down(n, 0));
    EXPECT_NEAR(g(n, 0), fd, 1e-3 * (1.0 + std::abs(fd))) << "schedule " << n;
  }
  EXPECT_NE(g(1, 0), 0.0f); // the reference's prediction moves every ratio
}

TEST(RelativeThroughputLoss, ValueIsZeroWhenPredictionsAreProportionalToRuntimes) {
  const kfac::Matrix t = column({4.0f, 1.0f, 2.5f});
  const kfac::Matrix p = 3.0f * t;
  EXPECT_NEAR(total(RelativeThroughputLoss(p, &t)), 0.0, 1e-10);
  EXPECT_NEAR(relative_throughput_loss(p.cast<double>(), t.cast<double>()), 0.0, 1e-10);
}

// The residuals e_n = p_r/p_n - t_r/t_n (n ≠ r, r the fastest measured schedule) in double,
// written out here as the reference for the loss's curvature.
Eigen::VectorXd residuals(const Eigen::VectorXd &p, const Eigen::VectorXd &t) {
  Eigen::Index r;
  t.minCoeff(&r);
  Eigen::VectorXd e = Eigen::VectorXd::Zero(p.size());
  for (Eigen::Index n = 0; n < p.size(); ++n)
    if (n != r)
      e(n) = p(r) / p(n) - t(r) / t(n);
  return e;
}

// The Gauss–Newton matrix 2w·JᵀJ with J = de/dp by central differences.
Eigen::MatrixXd gauss_newton(const Eigen::VectorXd &p, const Eigen::VectorXd &t, double w) {
  const Eigen::Index b = p.size();
  Eigen::MatrixXd J(b, b);
  for (Eigen::Index k = 0; k < b; ++k) {
    const double h = 1e-6 * p(k);
    Eigen::VectorXd up = p, down = p;
    up(k) += h;
    down(k) -= h;
    J.col(k) = (residuals(up, t) - residuals(down, t)) / (2 * h);
  }
  return 2 * w * J.transpose() * J;
}

TEST(RelativeThroughputLoss, CurvatureIsTheGaussNewtonMatrixWithTheReferenceCoupling) {
  const kfac::Matrix p = column({2.0f, 0.7f, 1.5f, 3.0f});
  const kfac::Matrix t = column({4.0f, 1.0f, 2.5f, 9.0f});
  const RelativeThroughputLoss loss(p, &t, 0.5f);
  const Eigen::MatrixXd gn = gauss_newton(p.cast<double>(), t.cast<double>(), 0.5);
  ASSERT_GT(std::abs(gn(0, 1)), 0.05); // the reference (schedule 1) couples the others
  expect_curvature_products(loss, gn);
}

TEST(RelativeThroughputLoss, AtZeroResidualsTheCurvatureIsTheLossHessian) {
  // Predictions proportional to runtimes: every residual is zero, so the Gauss–Newton matrix is
  // the Hessian, here by central differences of the gradient.
  const kfac::Matrix t = column({4.0f, 1.0f, 2.5f});
  const kfac::Matrix p = 0.5f * t;
  const RelativeThroughputLoss loss(p, &t);
  Eigen::MatrixXd hessian(3, 3);
  for (Eigen::Index k = 0; k < 3; ++k) {
    const float h = 1e-3f * p(k, 0);
    kfac::Matrix up = p, down = p;
    up(k, 0) += h;
    down(k, 0) -= h;
    hessian.col(k) = (RelativeThroughputLoss(up, &t).gradient().cast<double>() -
                      RelativeThroughputLoss(down, &t).gradient().cast<double>()) /
                     (2.0 * h);
  }
  for (Eigen::Index k = 0; k < 3; ++k) {
    kfac::Matrix e = kfac::Matrix::Zero(3, 1);
    e(k, 0) = 1.0f;
    const kfac::Matrix col = loss.multiply_hessian(e);
    for (Eigen::Index n = 0; n < 3; ++n)
      EXPECT_NEAR(col(n, 0), hessian(n, k), 2e-3 * (1 + std::abs(hessian(n, k)))) << n << k;
  }
}

TEST(RelativeThroughputLoss, CurvatureFactorSquaresToTheGaussNewtonDiagonal) {
  // What K-FAC's factors need of the coupled square root (see relative_throughput_loss.h).
  const kfac::Matrix p = column({2.0f, 0.7f, 1.5f});
  const kfac::Matrix t = column({4.0f, 1.0f, 2.5f});
  const RelativeThroughputLoss loss(p, &t, 0.5f);
  const Eigen::MatrixXd gn = gauss_newton(p.cast<double>(), t.cast<double>(), 0.5);
  const kfac::Matrix v = column({1.0f, -2.0f, 0.5f});
  const kfac::Matrix llv = loss.multiply_hessian_factor(loss.multiply_hessian_factor(v));
  for (Eigen::Index n = 0; n < 3; ++n)
    EXPECT_NEAR(llv(n, 0), gn(n, n) * v(n, 0), 1e-4 * (1 + std::abs(gn(n, n)))) << n;
}

TEST(RelativeThroughputLoss, SamplingAndNonPositiveRuntimesAreErrors) {
  const kfac::Matrix p = column({2.0f, 0.7f, 1.5f});
  const kfac::Matrix t = column({4.0f, 1.0f, 2.5f});
  const RelativeThroughputLoss loss(p, &t);
  EXPECT_THROW(loss.sample(kfac::ExampleSeeds{1, 0}), hkfac::Error);
  const kfac::Matrix bad = column({4.0f, 0.0f, 2.5f});
  EXPECT_THROW(RelativeThroughputLoss(p, &bad), hkfac::Error);
}

// The top regret against a reference computed by sorting: each pipeline's runtime of its
// predicted-fastest schedule over its fastest, multiplied and rooted. A ranking right everywhere
// but at its top has the accuracy of one wrong pair and the regret of that pick.
TEST(Score, TopRegretIsTheGeometricMeanOfThePredictedFastestOverTheFastest) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> ms(1.0f, 100.0f);
  Score score;
  double product = 1.0;
  const int pipelines = 9;
  for (int q = 0; q < pipelines; ++q) {
    std::vector<float> p(3 + q), t(3 + q);
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] = ms(rng);
      t[i] = ms(rng);
    }
    std::vector<size_t> by_p(p.size()), by_t(p.size());
    for (size_t i = 0; i < p.size(); ++i)
      by_p[i] = by_t[i] = i;
    std::sort(by_p.begin(), by_p.end(), [&](size_t a, size_t b) { return p[a] < p[b]; });
    std::sort(by_t.begin(), by_t.end(), [&](size_t a, size_t b) { return t[a] < t[b]; });
    product *= static_cast<double>(t[by_p[0]]) / t[by_t[0]];
    accumulate_score(p, t, score);
  }
  accumulate_score({5.0f}, {1.0f}, score); // a lone schedule is not a choice
  finish_score(score);
  EXPECT_EQ(score.regret_pipelines, static_cast<size_t>(pipelines));
  EXPECT_NEAR(score.top_regret, std::pow(product, 1.0 / pipelines), 1e-9);
  EXPECT_GT(score.top_regret, 1.0);

  Score top_wrong;
  accumulate_score({2.0f, 1.0f, 3.0f, 4.0f}, {1.0f, 2.0f, 4.0f, 8.0f}, top_wrong);
  finish_score(top_wrong);
  EXPECT_EQ(top_wrong.pairs - top_wrong.correct, 1u);
  EXPECT_DOUBLE_EQ(top_wrong.top_regret, 2.0);
  Score right;
  accumulate_score({1.0f, 2.0f, 3.0f, 4.0f}, {1.0f, 2.0f, 4.0f, 8.0f}, right);
  finish_score(right);
  EXPECT_DOUBLE_EQ(right.top_regret, 1.0);
}

// Synthetic pipelines whose runtimes come from a random "teacher" cost model (with noise), so a
// trained student can learn them.
TrainingData synthetic_data(int pipelines, int schedules, unsigned seed, const Split &split) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const Weights teacher = random_weights(S, seed + 1000);
  SampleSet set;
  for (int p = 0; p < pipelines; ++p) {
    PipelineSamples ps;
    ps.pipeline_id = pipeline_id_for("synthetic_p" + std::to_string(p));
    ps.num_stages = 1 + p % 4;
    Buffer<float> pf(kPipelineFeatureRows, kPipelineFeatureTypes, ps.num_stages);
    hkfac::for_each_value(
        pf, [&](float &v) { v = unit(rng) < 0.2f ? std::floor(8 * unit(rng)) : 0.0f; });
    PipelineData pd;
    pd.num_stages = ps.num_stages;
    pd.pipeline_features = pf;
    for (int k = 0; k < schedules; ++k) {
      Sample s;
      s.num_stages = ps.num_stages;
      s.pipeline_features = pf;
      s.types_in_use = Buffer<float>(kTypesInUseFeatures, ps.num_stages);
      hkfac::fill(s.types_in_use, 0.0f);
      s.schedule_features = Buffer<float>(S, ps.num_stages);
      hkfac::for_each_value(s.schedule_features, [&](float &v) {
        v = unit(rng) < 0.1f ? 0.0f : std::exp(12.0f * unit(rng));
      });
      s.pipeline_id = ps.pipeline_id;
      s.schedule_id = k;
      pd.schedule_features.push_back(s.schedule_features);
      ps.samples.push_back(s);
      ps.paths.push_back("synthetic/synthetic_p" + std::to_string(p) + "/s" + std::to_string(k) +
                         "/x.sample");
    }
    std::vector<int> all(schedules);
    for (int k = 0; k < schedules; ++k)
      all[k] = k;
    const std::vector<float> runtimes = predict(teacher, pd, all, 2);
    for (int k = 0; k < schedules; ++k)
      ps.samples[k].runtime_ms = std::max(1e-6f, runtimes[k]) * (0.95f + 0.1f * unit(rng));
    set.pipelines.push_back(std::move(ps));
  }
  return make_training_data(std::move(set), S, split);
}

kfac::Params random_params(const kfac::Model &m, unsigned seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, scale);
  kfac::Params p = kfac::zero_params(m);
  for (kfac::Matrix &x : p)
    x = x.unaryExpr([&](float) { return n(rng); });
  return p;
}

// A batch carries its schedules as exact integers, and a batch the network cannot read (two
// pipelines, an index past the data) is refused, naming the reader.
TEST(ScheduleBatch, RoundTripsItsIndicesAndRefusesWhatNoPipelineHolds) {
  const TrainingData data = synthetic_data(3, 9, 5, Split{Split::Kind::none, ""});
  const kfac::Batch batch = make_batch(data, 2, {6, 0, 3});
  EXPECT_EQ(batch.size(), 3);
  EXPECT_EQ(batch.inputs.size(), 0);
  const ScheduleBatch which = schedules_of(batch, data, "reader");
  EXPECT_EQ(which.pipeline, 2);
  EXPECT_EQ(which.schedules, (std::vector<int>{6, 0, 3}));
  for (int n = 0; n < 3; ++n)
    EXPECT_EQ(batch.targets(n, 0), data.pipelines[2].runtimes_ms[which.schedules[n]]);

  const auto refused = [&](kfac::Batch b, const std::string &why) {
    try {
      schedules_of(b, data, "reader");
      ADD_FAILURE() << "accepted a batch with " << why;
    } catch (const hkfac::Error &e) {
      EXPECT_EQ(std::string(e.what()).rfind("reader: ", 0), 0u) << e.what();
    }
  };
  kfac::Batch mixed = batch;
  mixed.indices(1, 0) = 1;
  refused(mixed, "two pipelines");
  kfac::Batch past = batch;
  past.indices(2, 1) = 9;
  refused(past, "a schedule index past the pipeline's");
  kfac::Batch no_pipeline = batch;
  no_pipeline.indices.col(0).setConstant(3);
  refused(no_pipeline, "a pipeline index past the data");
  refused(kfac::Batch{}, "no rows");
}

// Each option out of its range is refused by the library's one check, which names it.
TEST(TrainOptions, ValidateRefusesEachOptionOutOfRangeNamingIt) {
  EXPECT_NO_THROW(validate(TrainOptions{}));
  const std::vector<std::pair<std::string, std::function<void(TrainOptions &)>>> cases = {
      {"epochs", [](TrainOptions &o) { o.epochs = -1; }},
      {"batch_size", [](TrainOptions &o) { o.batch_size = 1; }},
      {"schedules_per_visit", [](TrainOptions &o) { o.schedules_per_visit = -1; }},
      {"num_cores", [](TrainOptions &o) { o.num_cores = 0; }},
      {"rate", [](TrainOptions &o) {
         o.optimizer = OptimizerKind::adam;
         o.rate = std::nan("");
       }},
      {"penalty_weight", [](TrainOptions &o) { o.penalty_weight = -1; }},
      {"max_seconds", [](TrainOptions &o) { o.max_seconds = HUGE_VAL; }},
      {"kfac_rate", [](TrainOptions &o) { o.kfac_rate = 0; }},
      {"kfac_final_rate", [](TrainOptions &o) { o.kfac_final_rate = -0.1; }},
      {"kfac_final_rate", [](TrainOptions &o) {
         o.kfac_adaptive = true;
         o.kfac_final_rate = 0.01;
       }},
      {"kfac_damping", [](TrainOptions &o) { o.kfac_damping = 0; }},
      {"kfac_momentum", [](TrainOptions &o) { o.kfac_momentum = 1; }},
      {"kfac_inverse_period", [](TrainOptions &o) { o.kfac_inverse_period = 0; }},
      {"kfac_curvature_period", [](TrainOptions &o) { o.kfac_curvature_period = 0; }},
      {"kfac_l2", [](TrainOptions &o) { o.kfac_l2 = -1e-5; }},
      {"kfac_norm_constraint", [](TrainOptions &o) { o.kfac_norm_constraint = std::nan(""); }},
      {"top_choice_weight", [](TrainOptions &o) { o.top_choice_weight = -1; }},
      {"top_choice_weight", [](TrainOptions &o) {
         o.optimizer = OptimizerKind::adam;
         o.top_choice_weight = 1;
       }},
      {"top_choice_temperature", [](TrainOptions &o) { o.top_choice_temperature = 0; }},
  };
  for (const auto &[name, spoil] : cases) {
    TrainOptions o;
    spoil(o);
    try {
      validate(o);
      ADD_FAILURE() << "validate accepted a bad " << name;
    } catch (const hkfac::Error &e) {
      EXPECT_EQ(std::string(e.what()).rfind(name, 0), 0u) << e.what();
    }
  }
}

TEST(CostModelNet, JvpIsTheAdjointOfBackward) {
  const TrainingData data = synthetic_data(3, 9, 5, Split{Split::Kind::none, ""});
  CostModelNet net(data, 2);
  const kfac::Params params = params_from_weights(random_weights(S, 3));
  const kfac::Batch batch = make_batch(data, 2, {0, 1, 2, 3, 4, 5, 6});
  net.forward(params, batch);
  const kfac::Params t = random_params(net, 9, 0.1f);
  const kfac::Matrix jt = net.jvp(t);
  std::mt19937 rng(4);
  std::normal_distribution<float> n(0.0f, 1.0f);
  const kfac::Matrix cot = kfac::Matrix::NullaryExpr(7, 1, [&] { return n(rng); });
  const kfac::Params g = net.backward(cot);
  const double lhs = (cot.cast<double>().array() * jt.cast<double>().array()).sum();
  const double rhs = kfac::dot(g, t);
  EXPECT_NEAR(lhs, rhs, 1e-3 * (std::abs(lhs) + std::abs(rhs)));
}

TEST(CostModelNet, JvpMatchesFiniteDifferencesOfForward) {
  const TrainingData data = synthetic_data(2, 6, 6, Split{Split::Kind::none, ""});
  CostModelNet net(data, 2);
  const kfac::Params params = params_from_weights(random_weights(S, 4));
  const kfac::Batch batch = make_batch(data, 1, {0, 1, 2, 3, 4, 5});
  const kfac::Params t = random_params(net, 10, 1.0f);
  const float h = 1e-3f;
  kfac::Params up = params, down = params;
  kfac::axpy(h, t, up);
  kfac::axpy(-h, t, down);
  const kfac::Matrix fd = (net.forward(up, batch) - net.forward(down, batch)) / (2 * h);
  net.forward(params, batch);
  const kfac::Matrix jt = net.jvp(t);
  EXPECT_LT((jt - fd).norm(), 2e-2 * fd.norm()) << "jvp\n" << jt << "\nfd\n" << fd;
}

// The packed batch is every schedule's (S, stages) buffer, schedule index fastest, in the order
// asked (37 schedules: two blocks of 16 and a partial one, several repeated).
TEST(CostModelNet, PackedScheduleFeaturesHoldEachScheduleInBatchOrder) {
  const TrainingData data = synthetic_data(4, 40, 9, Split{Split::Kind::none, ""});
  const PipelineData &p = data.pipelines[3]; // 4 stages
  std::vector<int> schedules;
  for (int n = 0; n < 37; ++n)
    schedules.push_back((n * 17 + 5) % static_cast<int>(p.schedule_features.size()));
  const Buffer<float> packed = pack_schedule_features(p, schedules);
  ASSERT_EQ(packed.dim(0).extent(), 37);
  ASSERT_EQ(packed.dim(1).extent(), S);
  ASSERT_EQ(packed.dim(2).extent(), p.num_stages);
  for (int n = 0; n < 37; ++n) {
    const Buffer<float> &f = p.schedule_features[schedules[n]];
    for (int s = 0; s < p.num_stages; ++s) {
      for (int k = 0; k < S; ++k)
        ASSERT_EQ(packed(n, k, s), f(k, s))
            << "schedule " << n << " feature " << k << " stage " << s;
    }
  }
}

// backward() scales the ones pass per schedule instead of running the kernel again; the kernel
// run with the cotangent itself is the reference.
TEST(CostModelNet, BackwardEqualsTheTrainingKernelRunWithThatCotangent) {
  const TrainingData data = synthetic_data(3, 8, 8, Split{Split::Kind::none, ""});
  CostModelNet net(data, 2);
  const Weights w = random_weights(S, 6);
  const kfac::Params params = params_from_weights(w);
  const std::vector<int> schedules = {1, 3, 4, 6, 7};
  net.forward(params, make_batch(data, 2, schedules));
  const kfac::Matrix cot = column({0.7f, -1.3f, 2.0f, 0.0f, -0.4f});
  const kfac::Params g = net.backward(cot);
  const kfac::Params again = net.backward(2.0f * cot); // reuses the ones pass
  const PipelineData &p = data.pipelines[2];
  Buffer<float> runtimes(5), cotangent(5);
  for (int n = 0; n < 5; ++n) {
    runtimes(n) = p.runtimes_ms[schedules[n]];
    cotangent(n) = cot(n, 0);
  }
  kernels::CostModelTrainOutputs out;
  kernels::cost_model_train(p.pipeline_features, pack_schedule_features(p, schedules),
                            kernel_weights(w), 2, runtimes, cotangent, 0.0f, 0.0f, out);
  Weights grads = make_weights(S);
  grads.head1_filter = copy_of(out.grads.head1_filter);
  grads.head1_bias = copy_of(out.grads.head1_bias);
  grads.head2_filter = copy_of(out.grads.head2_filter);
  grads.head2_bias = copy_of(out.grads.head2_bias);
  grads.conv1_filter = copy_of(out.grads.conv1_filter);
  grads.conv1_bias = copy_of(out.grads.conv1_bias);
  const kfac::Params ref = params_from_weights(grads);
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_LT((g[i] - ref[i]).norm(), 1e-4 * (1 + ref[i].norm())) << "parameter " << i;
    EXPECT_LT((again[i] - 2.0f * ref[i]).norm(), 2e-4 * (1 + ref[i].norm())) << "parameter " << i;
  }
}

TEST(CostModelNet, PerExampleRecordsSumToTheKernelsGradients) {
  const TrainingData data = synthetic_data(4, 8, 7, Split{Split::Kind::none, ""});
  CostModelNet net(data, 2);
  const kfac::Params params = params_from_weights(random_weights(S, 5));
  const kfac::Batch batch = make_batch(data, 3, {0, 2, 4, 6, 7});
  net.forward(params, batch);
  const kfac::Matrix cot = kfac::Matrix::Constant(5, 1, 0.3f);
  const kfac::Params g = net.backward(cot);
  const std::vector<kfac::LayerTag> &tags = net.tags();
  for (size_t k = 0; k < tags.size(); ++k) {
    const kfac::TagRecord &r = net.record(static_cast<int>(k));
    const kfac::Matrix per = kfac::per_example_gradients(tags[k], r.inputs, r.output_grads, 5);
    ASSERT_EQ(per.rows(), 5) << tags[k].name;
    const Eigen::RowVectorXf sum = per.colwise().sum();
    Eigen::Index col = 0;
    for (int param : tags[k].params) {
      const kfac::Matrix &gp = g[param];
      const Eigen::Map<const Eigen::RowVectorXf> flat(gp.data(), gp.size());
      EXPECT_LT((sum.segment(col, gp.size()) - flat).norm(), 1e-3 * (1 + flat.norm()))
          << tags[k].name << " parameter " << param;
      col += gp.size();
    }
  }
}

std::string trajectory(const std::vector<EpochRecord> &records) {
  std::string t;
  for (const EpochRecord &r : records) {
    t += "epoch " + std::to_string(r.epoch) + ": train " + std::to_string(r.train.loss) +
         " validation " + std::to_string(r.validation.loss) + " accuracy " +
         std::to_string(r.validation.accuracy) + "\n";
  }
  return t;
}

// Trains a fresh student on a teacher's data for 12 epochs; returns the per-epoch records.
std::vector<EpochRecord> train_student(OptimizerKind kind, double adam_rate) {
  const TrainingData data = synthetic_data(24, 24, 11, Split{Split::Kind::hash, ""});
  TrainOptions o;
  o.optimizer = kind;
  o.rate = adam_rate;
  o.epochs = 12;
  o.num_cores = 2;
  std::vector<EpochRecord> records;
  train(data, random_weights(S, 77), o, [&](const EpochRecord &r) { records.push_back(r); });
  EXPECT_EQ(records.size(), 13u);
  EXPECT_EQ(records.back().rejected_steps, 0);
  return records;
}

// K-FAC (default settings) must optimise: the training loss at most 0.5x the start, and held-out
// schedules no worse than at the start.
TEST(CostModelTraining, KfacHalvesTheTrainingLossWithoutHurtingValidation) {
  const std::vector<EpochRecord> r = train_student(OptimizerKind::kfac, 0);
  ASSERT_FALSE(r.empty());
  EXPECT_LT(r.back().train.loss, 0.5 * r.front().train.loss) << trajectory(r);
  EXPECT_LE(r.back().validation.loss, r.front().validation.loss) << trajectory(r);
  EXPECT_GE(r.back().validation.accuracy, r.front().validation.accuracy - 0.02) << trajectory(r);
}

// kfac-jax's curvature_update_period: factors updated every third step still train (the
// training loss at most 0.5x the start, as with every step), and a period below 1 is refused with
// the flag's name.
TEST(CostModelTraining, KfacCurvaturePeriodTrainsAndIsValidated) {
  const TrainingData data = synthetic_data(24, 24, 11, Split{Split::Kind::hash, ""});
  TrainOptions o;
  o.optimizer = OptimizerKind::kfac;
  o.epochs = 12;
  o.num_cores = 2;
  o.kfac_curvature_period = 3;
  std::vector<EpochRecord> r;
  train(data, random_weights(S, 77), o, [&](const EpochRecord &e) { r.push_back(e); });
  ASSERT_EQ(r.size(), 13u);
  EXPECT_LT(r.back().train.loss, 0.5 * r.front().train.loss) << trajectory(r);
  // The option reaches the optimizer: the same run with every step's factors goes elsewhere.
  TrainOptions every = o;
  every.kfac_curvature_period = 1;
  std::vector<EpochRecord> r1;
  train(data, random_weights(S, 77), every, [&](const EpochRecord &e) { r1.push_back(e); });
  ASSERT_EQ(r1.size(), 13u);
  EXPECT_NE(r1.back().train.loss, r.back().train.loss);
  o.kfac_curvature_period = 0;
  try {
    train(data, random_weights(S, 77), o, [](const EpochRecord &) {});
    ADD_FAILURE() << "a curvature period of 0 was accepted";
  } catch (const hkfac::Error &e) {
    EXPECT_NE(std::string(e.what()).find("kfac_curvature_period"), std::string::npos)
        << e.what();
  }
}

// The top-choice term reaches the optimizer (the run goes elsewhere than L_rel alone), still
// trains (the training loss at most 0.5x the start, the training top regret no worse), and is
// refused under Adam, whose gradient is the kernel's L_rel alone.
TEST(CostModelTraining, TopChoiceTermTrainsBesideLRel) {
  const TrainingData data = synthetic_data(24, 24, 11, Split{Split::Kind::hash, ""});
  TrainOptions o;
  o.optimizer = OptimizerKind::kfac;
  o.epochs = 12;
  o.num_cores = 2;
  o.top_choice_weight = 1.0;
  std::vector<EpochRecord> r, plain;
  train(data, random_weights(S, 77), o, [&](const EpochRecord &e) { r.push_back(e); });
  ASSERT_EQ(r.size(), 13u);
  EXPECT_EQ(r.back().rejected_steps, 0);
  EXPECT_LT(r.back().train.loss, 0.5 * r.front().train.loss) << trajectory(r);
  EXPECT_LE(r.back().train.top_regret, r.front().train.top_regret) << trajectory(r);
  TrainOptions without = o;
  without.top_choice_weight = 0.0;
  train(data, random_weights(S, 77), without, [&](const EpochRecord &e) { plain.push_back(e); });
  ASSERT_EQ(plain.size(), 13u);
  EXPECT_NE(plain.back().train.loss, r.back().train.loss);
  o.optimizer = OptimizerKind::adam;
  try {
    train(data, random_weights(S, 77), o, [](const EpochRecord &) {});
    ADD_FAILURE() << "a top-choice weight under Adam was accepted";
  } catch (const hkfac::Error &e) {
    EXPECT_NE(std::string(e.what()).find("top_choice_weight"), std::string::npos) << e.what();
  }
}

// --schedules_per_visit: a pipeline of n training schedules is ceil(n / k) steps of an epoch
// (counted here from the data, 9 and 2 schedules at k = 4: 3 + 1 steps; one each without), the
// option reaches the optimizer, and a negative k is refused by name.
TEST(CostModelTraining, SchedulesPerVisitWeighsPipelinesByTheirSchedules) {
  TrainingData data = synthetic_data(2, 12, 11, Split{Split::Kind::none, ""});
  ASSERT_EQ(data.pipelines.size(), 2u);
  data.pipelines[0].train.resize(9);
  data.pipelines[1].train.resize(2);
  auto run = [&](int k) {
    TrainOptions o;
    o.epochs = 2;
    o.num_cores = 2;
    o.schedules_per_visit = k;
    std::vector<EpochRecord> r;
    train(data, random_weights(S, 77), o, [&](const EpochRecord &e) { r.push_back(e); });
    return r;
  };
  const std::vector<EpochRecord> plain = run(0), weighed = run(4);
  ASSERT_EQ(plain.size(), 3u);
  ASSERT_EQ(weighed.size(), 3u);
  int expected = 0;
  for (const PipelineData &p : data.pipelines)
    expected += (static_cast<int>(p.train.size()) + 3) / 4;
  EXPECT_EQ(expected, 4);
  EXPECT_EQ(plain[1].steps, 2);
  EXPECT_EQ(weighed[1].steps, expected);
  EXPECT_EQ(weighed[2].steps, 2 * expected);
  EXPECT_NE(weighed.back().train.loss, plain.back().train.loss);
  try {
    run(-1);
    ADD_FAILURE() << "a negative schedules_per_visit was accepted";
  } catch (const hkfac::Error &e) {
    EXPECT_NE(std::string(e.what()).find("schedules_per_visit"), std::string::npos) << e.what();
  }
}

// --kfac_final_rate: the half cosine starts at the rate, ends at the final rate, passes their
// mean halfway and falls monotonically; it reaches the optimizer (a final rate equal to the rate
// is the constant run to every bit, a lower one another run); bad values are refused by name.
TEST(CostModelTraining, KfacFinalRateDecaysAlongAHalfCosine) {
  TrainOptions o;
  o.kfac_rate = 0.2;
  EXPECT_EQ(scheduled_kfac_rate(o, 0, 101), 0.2);
  EXPECT_EQ(scheduled_kfac_rate(o, 100, 101), 0.2);
  o.kfac_final_rate = 0.002;
  EXPECT_DOUBLE_EQ(scheduled_kfac_rate(o, 0, 101), 0.2);
  EXPECT_DOUBLE_EQ(scheduled_kfac_rate(o, 100, 101), 0.002);
  EXPECT_NEAR(scheduled_kfac_rate(o, 50, 101), 0.101, 1e-12);
  // cos(pi/4) at a quarter of the way.
  EXPECT_NEAR(scheduled_kfac_rate(o, 25, 101), 0.002 + 0.099 * (1 + std::sqrt(0.5)), 1e-12);
  EXPECT_DOUBLE_EQ(scheduled_kfac_rate(o, 500, 101), 0.002); // held after the last step
  for (int t = 1; t < 101; ++t)
    EXPECT_LT(scheduled_kfac_rate(o, t, 101), scheduled_kfac_rate(o, t - 1, 101)) << t;

  const TrainingData data = synthetic_data(24, 24, 11, Split{Split::Kind::hash, ""});
  auto run = [&](std::optional<double> final_rate) {
    TrainOptions k;
    k.optimizer = OptimizerKind::kfac;
    k.epochs = 4;
    k.num_cores = 2;
    k.kfac_final_rate = final_rate;
    std::vector<EpochRecord> r;
    train(data, random_weights(S, 77), k, [&](const EpochRecord &e) { r.push_back(e); });
    return r;
  };
  const std::vector<EpochRecord> constant = run(std::nullopt);
  const std::vector<EpochRecord> same = run(TrainOptions().kfac_rate);
  const std::vector<EpochRecord> decayed = run(0.01 * TrainOptions().kfac_rate);
  ASSERT_EQ(constant.size(), 5u);
  ASSERT_EQ(same.size(), 5u);
  ASSERT_EQ(decayed.size(), 5u);
  EXPECT_EQ(same.back().train.loss, constant.back().train.loss);
  EXPECT_EQ(same.back().validation.loss, constant.back().validation.loss);
  EXPECT_NE(decayed.back().train.loss, constant.back().train.loss);

  for (const double bad : {-0.1, std::nan(""), HUGE_VAL}) {
    TrainOptions k;
    k.epochs = 1;
    k.kfac_final_rate = bad;
    try {
      train(data, random_weights(S, 77), k, [](const EpochRecord &) {});
      ADD_FAILURE() << "a final rate of " << bad << " was accepted";
    } catch (const hkfac::Error &e) {
      EXPECT_NE(std::string(e.what()).find("kfac_final_rate"), std::string::npos) << e.what();
    }
  }
  TrainOptions adaptive;
  adaptive.epochs = 1;
  adaptive.kfac_adaptive = true;
  adaptive.kfac_final_rate = 0.01;
  try {
    train(data, random_weights(S, 77), adaptive, [](const EpochRecord &) {});
    ADD_FAILURE() << "a final rate with the adaptive rate was accepted";
  } catch (const hkfac::Error &e) {
    EXPECT_NE(std::string(e.what()).find("kfac_adaptive"), std::string::npos) << e.what();
  }
}

// Adam must learn the teacher's orderings: validation loss well below the start, accuracy up.
TEST(CostModelTraining, AdamLearnsATeacherModelsOrdering) {
  const std::vector<EpochRecord> r = train_student(OptimizerKind::adam, 0.03);
  ASSERT_FALSE(r.empty());
  EXPECT_LT(r.back().validation.loss, 0.3 * r.front().validation.loss) << trajectory(r);
  EXPECT_GT(r.back().validation.accuracy, r.front().validation.accuracy) << trajectory(r);
}

TEST(CostModelTraining, HoldOutSplitValidatesOnExactlyThatPipeline) {
  const TrainingData data = synthetic_data(3, 5, 12, parse_split("app:synthetic_p1"));
  ASSERT_EQ(data.pipelines.size(), 3u);
  for (const PipelineData &p : data.pipelines) {
    const bool held_out = p.name == "synthetic_p1";
    EXPECT_EQ(p.validation.size(), held_out ? 5u : 0u) << p.name;
    EXPECT_EQ(p.train.size(), held_out ? 0u : 5u) << p.name;
  }
  EXPECT_THROW(synthetic_data(3, 5, 12, parse_split("app:no_such_app")), hkfac::Error);
  EXPECT_THROW(parse_split("app:"), hkfac::Error);
  EXPECT_THROW(parse_split("random"), hkfac::Error);
  // generate_data's ids: CRC-32 (check value crc32("123456789") = 0xCBF43926), top bit cleared.
  EXPECT_EQ(pipeline_id_for("123456789"), static_cast<int32_t>(0xCBF43926u & 0x7FFFFFFFu));
}

TEST(CostModelTraining, PipelinesSplitHoldsOutWholePipelinesByTheirId) {
  const TrainingData data = synthetic_data(20, 4, 13, parse_split("pipelines"));
  int held_out = 0;
  for (const PipelineData &p : data.pipelines) {
    const bool validate = pipeline_id_for(p.name) % 5 == 0;
    held_out += validate;
    EXPECT_EQ(p.validation.size(), validate ? 4u : 0u) << p.name;
    EXPECT_EQ(p.train.size(), validate ? 0u : 4u) << p.name;
  }
  // About a fifth of 20 (a binomial count; these names give a nonzero one).
  EXPECT_GT(held_out, 0);
  EXPECT_LT(held_out, 20);
}

} // namespace
} // namespace hkfac::cost_model
