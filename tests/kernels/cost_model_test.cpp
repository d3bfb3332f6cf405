// Cost model kernels against an independent double-precision reference of the network and loss.
#include "hkfac/kernels/cost_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <ostream>
#include <random>
#include <vector>

#include "cost_model_reference.h"
#include "test_util.h"

namespace hkfac {
namespace {

using kernels::CostModelTrainOutputs;
using kernels::CostModelWeights;
using namespace cost_model_reference;

// ---------------------------------------------------------------------------------------------
// The reference's problems as float buffers.

Buffer<float> to_buffer(const std::vector<double> &v, std::vector<int> extents) {
  Buffer<float> b(extents);
  float *d = b.data();
  for (size_t i = 0; i < v.size(); i++)
    d[i] = float(v[i]);
  return b;
}

struct Inputs {
  Buffer<float> pf, sf, runtimes, cotangent;
  CostModelWeights w;
};

Inputs to_inputs(const Problem &p) {
  Inputs in;
  in.pf = to_buffer(p.pf, {kRows, kTypes, p.stages});
  in.sf = to_buffer(p.sf, {p.batch, p.S, p.stages});
  in.runtimes = to_buffer(p.runtimes, {p.batch});
  in.cotangent = to_buffer(p.cotangent, {p.batch});
  in.w.head1_filter = to_buffer(p.w[0], {kH1, kRows, kTypes});
  in.w.head1_bias = to_buffer(p.w[1], {kH1});
  in.w.head2_filter = to_buffer(p.w[2], {kH2, p.S});
  in.w.head2_bias = to_buffer(p.w[3], {kH2});
  in.w.conv1_filter = to_buffer(p.w[4], {kC1, kC1});
  in.w.conv1_bias = to_buffer(p.w[5], {kC1});
  return in;
}

std::vector<double> host_values(Buffer<float> &b) {
  to_host(b);
  std::vector<double> v;
  hkfac::for_each_value(b, [&](float x) { v.push_back(x); });
  return v;
}

// max_i |a_i - b_i| / max(max_i |b_i|, floor): error against the reference's scale.
double scaled_error(const std::vector<double> &a, const std::vector<double> &b,
                    double floor = 1e-30) {
  EXPECT_EQ(a.size(), b.size());
  double e = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); i++)
    e = std::max(e, std::abs(a[i] - b[i]));
  return e / std::max(max_abs(b), floor);
}

CostModelTrainOutputs run_train(const Problem &p, Device dev) {
  Inputs in = to_inputs(p);
  CostModelTrainOutputs out;
  kernels::cost_model_train(in.pf, in.sf, in.w, p.num_cores, in.runtimes, in.cotangent,
                            float(p.loss_weight), float(p.penalty_weight), out, dev);
  return out;
}

// ---------------------------------------------------------------------------------------------

struct Case {
  Device dev;
  int S;
};

void PrintTo(const Case &c, std::ostream *os) { *os << device_name(c.dev) << " S=" << c.S; }

std::string case_name(const ::testing::TestParamInfo<Case> &info) {
  return std::string(device_name(info.param.dev)) + "_S" + std::to_string(info.param.S);
}

class CostModelKernels : public ::testing::TestWithParam<Case> {};

TEST_P(CostModelKernels, PredictMatchesReferenceAndTrainingPredictionsOnAwkwardShapes) {
  const auto [dev, S] = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  for (int batch : {1, 7, 129}) {
    for (int stages : {1, 3, 20}) {
      const Problem p = rounded(random_problem(S, batch, stages, 1000 * batch + stages));
      const Reference ref = reference(p);
      Inputs in = to_inputs(p);
      Buffer<float> pred(batch);
      kernels::cost_model_predict(in.pf, in.sf, in.w, p.num_cores, pred, dev);
      const std::vector<double> got = host_values(pred);
      // Float error: a few ulps of the absolute-value sums (cancellation in the pre-activations).
      CostModelTrainOutputs out = run_train(p, dev);
      const std::vector<double> train = host_values(out.predictions);
      for (int n = 0; n < batch; n++) {
        EXPECT_NEAR(got[n], ref.predictions[n], 2e-5 * ref.magnitudes[n])
            << "batch=" << batch << " stages=" << stages << " n=" << n;
        EXPECT_NEAR(train[n], got[n], 2e-5 * ref.magnitudes[n])
            << "batch=" << batch << " stages=" << stages << " n=" << n;
      }
    }
  }
}

TEST_P(CostModelKernels, LossMatchesReference) {
  const auto [dev, S] = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  const Problem p = training_problem(S, 33, 4, 7);
  const Reference ref = reference(p);
  CostModelTrainOutputs out = run_train(p, dev);
  const std::vector<double> loss = host_values(out.loss);
  EXPECT_NEAR(loss[0], ref.l_rel, 1e-4 * ref.l_rel + 1e-6);
  EXPECT_NEAR(loss[1], ref.pen, 1e-4 * ref.pen + 1e-6);
}

// r = argmin t picks the first index on ties; a different choice changes p_r and the loss.
TEST_P(CostModelKernels, FastestScheduleIsTheFirstOnTies) {
  const auto [dev, S] = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  Problem p = training_problem(S, 9, 2, 37);
  p.runtimes[3] = p.runtimes[6] = 0.25;
  const Reference ref = reference(p);
  // Nearly the same runtimes with r = 6 instead: the loss must differ for the check to mean much.
  Problem other = p;
  other.runtimes[6] = 0.2499;
  ASSERT_GT(std::abs(reference(other).l_rel - ref.l_rel), 1e-2 * ref.l_rel);
  CostModelTrainOutputs out = run_train(p, dev);
  EXPECT_NEAR(host_values(out.loss)[0], ref.l_rel, 1e-4 * ref.l_rel);
}

// Central differences of the double reference objective, with all three parts of J non-zero.
// Tolerance: 5e-4 of the largest gradient entry of the buffer (the kernel works in float; the
// CPU kernel is within ~1e-5).
TEST_P(CostModelKernels, WeightGradientsMatchFiniteDifferences) {
  const auto [dev, S] = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  const Problem p = training_problem(S, 7, 3, 11);
  CostModelTrainOutputs out = run_train(p, dev);
  const std::array<Buffer<float> *, 6> grads = {&out.grads.head1_filter, &out.grads.head1_bias,
                                                &out.grads.head2_filter, &out.grads.head2_bias,
                                                &out.grads.conv1_filter, &out.grads.conv1_bias};
  std::mt19937 rng(5);
  for (int b = 0; b < 6; b++) {
    const std::vector<double> got = host_values(*grads[b]);
    ASSERT_EQ(got.size(), p.w[b].size()) << kWeightNames[b];
    std::vector<double> fd, sampled;
    for (size_t i : checked_entries(got.size(), rng)) {
      fd.push_back(weight_derivative(p, b, i));
      sampled.push_back(got[i]);
    }
    EXPECT_LT(scaled_error(sampled, fd), 5e-4) << kWeightNames[b];
    EXPECT_GT(max_abs(fd), 0.0) << kWeightNames[b] << ": the check needs a non-zero gradient";
  }
}

TEST_P(CostModelKernels, RecordedInputsAreTheReferenceActivations) {
  const auto [dev, S] = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  const Problem p = training_problem(S, 9, 3, 13);
  const Reference ref = reference(p);
  CostModelTrainOutputs out = run_train(p, dev);
  EXPECT_LT(scaled_error(host_values(out.head2_input), ref.x2, 1.0), 1e-6);
  EXPECT_LT(scaled_error(host_values(out.conv1_input), ref.emb, 1.0), 1e-5);
}

// ∂J/∂(pre-activation) of one schedule and stage, by central differences of the reference
// (tolerance as above).
TEST_P(CostModelKernels, RecordedOutputGradientsMatchFiniteDifferences) {
  const auto [dev, S] = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  const Problem p = training_problem(S, 5, 2, 17);
  CostModelTrainOutputs out = run_train(p, dev);
  struct Record {
    Nudge::Layer layer;
    Buffer<float> *grad;
    int channels;
    const char *name;
  };
  const Record records[] = {{Nudge::algo, &out.head1_out_grad, kH1, "head1_out_grad"},
                            {Nudge::head2, &out.head2_out_grad, kH2, "head2_out_grad"},
                            {Nudge::conv1, &out.conv1_out_grad, kC1, "conv1_out_grad"}};
  for (const Record &rec : records) {
    const std::vector<double> got = host_values(*rec.grad);
    ASSERT_EQ(got.size(), size_t(rec.channels) * p.batch * p.stages) << rec.name;
    std::vector<double> fd, sampled;
    for (int s = 0; s < p.stages; s++) {
      for (int n = 0; n < p.batch; n++) {
        for (int c = 0; c < rec.channels; c += 3) {
          fd.push_back(preactivation_derivative(p, rec.layer, c, n, s));
          sampled.push_back(got[c + rec.channels * (n + p.batch * s)]);
        }
      }
    }
    EXPECT_LT(scaled_error(sampled, fd), 5e-4) << rec.name;
  }
}

// K-FAC's factors assume each weight gradient is a sum over (schedule, stage) of outer products
// of the recorded layer inputs and output gradients.
TEST_P(CostModelKernels, WeightGradientsAreSumsOfRecordOuterProducts) {
  const auto [dev, S] = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  const Problem p = training_problem(S, 6, 4, 19);
  CostModelTrainOutputs out = run_train(p, dev);
  const int NS = p.batch * p.stages;
  const std::vector<double> h1g = host_values(out.head1_out_grad),
                            h2in = host_values(out.head2_input),
                            h2g = host_values(out.head2_out_grad),
                            c1in = host_values(out.conv1_input),
                            c1g = host_values(out.conv1_out_grad);
  std::vector<double> c1f(kC1 * kC1, 0), c1b(kC1, 0), h2f(size_t(kH2) * S, 0), h2b(kH2, 0),
      h1b(kH1, 0), h1f(size_t(kH1) * kRows * kTypes, 0);
  for (int ns = 0; ns < NS; ns++) {
    for (int o = 0; o < kC1; o++) {
      c1b[o] += c1g[o + kC1 * ns];
      for (int k = 0; k < kC1; k++)
        c1f[o + kC1 * k] += c1g[o + kC1 * ns] * c1in[k + kC1 * ns];
    }
    for (int c = 0; c < kH2; c++) {
      h2b[c] += h2g[c + kH2 * ns];
      for (int f = 0; f < S; f++)
        h2f[c + kH2 * f] += h2g[c + kH2 * ns] * h2in[f + S * ns];
    }
    const int s = ns / p.batch;
    for (int c = 0; c < kH1; c++) {
      h1b[c] += h1g[c + kH1 * ns];
      for (int ij = 0; ij < kRows * kTypes; ij++) {
        const double w = p.w[0][c + kH1 * ij], sg = 1 / (1 + std::exp(-w));
        h1f[c + kH1 * ij] += sg * (1 - sg) * h1g[c + kH1 * ns] * p.pf[ij + kRows * kTypes * s];
      }
    }
  }
  EXPECT_LT(scaled_error(host_values(out.grads.conv1_filter), c1f), 1e-4);
  EXPECT_LT(scaled_error(host_values(out.grads.conv1_bias), c1b), 1e-4);
  EXPECT_LT(scaled_error(host_values(out.grads.head2_filter), h2f), 1e-4);
  EXPECT_LT(scaled_error(host_values(out.grads.head2_bias), h2b), 1e-4);
  EXPECT_LT(scaled_error(host_values(out.grads.head1_filter), h1f), 1e-4);
  EXPECT_LT(scaled_error(host_values(out.grads.head1_bias), h1b), 1e-4);
}

// loss_weight = penalty_weight = 0: the kernel is a plain vector-Jacobian product, and the
// gradient is linear in the cotangent.
TEST_P(CostModelKernels, BackwardPassIsLinearInTheCotangent) {
  const auto [dev, S] = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  Problem p = training_problem(S, 8, 2, 23);
  p.loss_weight = p.penalty_weight = 0;
  CostModelTrainOutputs out1 = run_train(p, dev);
  for (double &c : p.cotangent)
    c *= -3;
  CostModelTrainOutputs out3 = run_train(p, dev);
  const std::vector<double> g1 = host_values(out1.grads.conv1_filter);
  const std::vector<double> g3 = host_values(out3.grads.conv1_filter);
  std::vector<double> scaled;
  for (double g : g1)
    scaled.push_back(-3 * g);
  EXPECT_LT(scaled_error(g3, scaled), 1e-5);
}

TEST_P(CostModelKernels, TermsAreFiniteAndNonNegativeForExtremeFeatures) {
  const auto [dev, S] = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  // Positive conv1 weights make every coefficient positive, so a negative or non-finite term
  // would show in the prediction. Features: zeros, huge values, and negative garbage (clamped).
  Problem p = random_problem(S, 4, 2, 29);
  for (double &w : p.w[4])
    w = std::abs(w);
  for (double &b : p.w[5])
    b = 1;
  for (int s = 0; s < 2; s++)
    for (int k = 0; k < S; k++) {
      p.sf[0 + 4 * (k + S * s)] = 0;
      p.sf[1 + 4 * (k + S * s)] = 1e12;
      p.sf[2 + 4 * (k + S * s)] = -5;
      p.sf[3 + 4 * (k + S * s)] = k % 2 ? 0 : 1e6;
    }
  Inputs in = to_inputs(p);
  Buffer<float> pred(4);
  kernels::cost_model_predict(in.pf, in.sf, in.w, 1, pred, dev);
  for (double v : host_values(pred)) {
    EXPECT_TRUE(std::isfinite(v)) << v;
    EXPECT_GE(v, 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(AllDevices, CostModelKernels,
                         ::testing::Values(Case{Device::cpu, 39}, Case{Device::cpu, 73},
                                           Case{Device::cuda, 39}, Case{Device::cuda, 73}),
                         case_name);

TEST(CostModelKernelsErrors, ShapeMismatchesNameTheArgument) {
  using testing::expect_error_naming;
  const Problem p = random_problem(39, 5, 2, 3);
  Inputs in = to_inputs(p);
  Buffer<float> pred(5);
  const Device cpu = Device::cpu;
  expect_error_naming("schedule_features", [&] {
    Buffer<float> sf(5, 40, 2);
    kernels::cost_model_predict(in.pf, sf, in.w, 4, pred, cpu);
  });
  expect_error_naming("pipeline_features", [&] {
    Buffer<float> pf(kRows, kTypes, 3);
    kernels::cost_model_predict(pf, in.sf, in.w, 4, pred, cpu);
  });
  expect_error_naming("head2_filter", [&] {
    CostModelWeights w = in.w;
    w.head2_filter = Buffer<float>(kH2, 73);
    kernels::cost_model_predict(in.pf, in.sf, w, 4, pred, cpu);
  });
  expect_error_naming("conv1_filter", [&] {
    CostModelWeights w = in.w;
    w.conv1_filter = Buffer<float>(kC1, kC1 - 1);
    kernels::cost_model_predict(in.pf, in.sf, w, 4, pred, cpu);
  });
  expect_error_naming("head1_bias", [&] {
    CostModelWeights w = in.w;
    w.head1_bias = Buffer<float>();
    kernels::cost_model_predict(in.pf, in.sf, w, 4, pred, cpu);
  });
  expect_error_naming("predictions", [&] {
    Buffer<float> wrong(6);
    kernels::cost_model_predict(in.pf, in.sf, in.w, 4, wrong, cpu);
  });
  expect_error_naming("num_cores",
                      [&] { kernels::cost_model_predict(in.pf, in.sf, in.w, 0, pred, cpu); });
  CostModelTrainOutputs out;
  expect_error_naming("true_runtimes", [&] {
    Buffer<float> t = to_buffer(p.runtimes, {5});
    t(2) = 0.0f;
    kernels::cost_model_train(in.pf, in.sf, in.w, 4, t, in.cotangent, 1, 0, out, cpu);
  });
  expect_error_naming("true_runtimes", [&] {
    Buffer<float> t(4);
    hkfac::fill(t, 1.0f);
    kernels::cost_model_train(in.pf, in.sf, in.w, 4, t, in.cotangent, 1, 0, out, cpu);
  });
  expect_error_naming("cotangent", [&] {
    Buffer<float> cot(6);
    kernels::cost_model_train(in.pf, in.sf, in.w, 4, in.runtimes, cot, 1, 0, out, cpu);
  });
  expect_error_naming("num_schedule_features", [] { kernels::make_cost_model_weights(40); });
}

TEST(CostModelKernelsApi, TrainAllocatesMisShapedOutputsAndZeroWeightsPredictZero) {
  CostModelWeights w = kernels::make_cost_model_weights(73);
  EXPECT_EQ(w.head2_filter.dim(1).extent(), 73);
  const Problem p = random_problem(73, 3, 2, 31);
  Inputs in = to_inputs(p);
  CostModelTrainOutputs out;
  out.head2_input = Buffer<float>(7); // mis-shaped: replaced
  kernels::cost_model_train(in.pf, in.sf, w, 4, in.runtimes, in.cotangent, 1, 0, out, Device::cpu);
  EXPECT_EQ(out.head2_input.dimensions(), 3);
  EXPECT_EQ(out.head2_input.dim(0).extent(), 73);
  EXPECT_EQ(out.head2_input.dim(1).extent(), 3);
  EXPECT_EQ(out.head2_input.dim(2).extent(), 2);
  EXPECT_EQ(out.grads.head1_filter.dim(2).extent(), kTypes);
  for (double v : host_values(out.predictions))
    EXPECT_EQ(v, 0.0); // all coefficients ReLU(0)
  for (double v : host_values(out.loss))
    EXPECT_TRUE(std::isfinite(v));
}

} // namespace
} // namespace hkfac
