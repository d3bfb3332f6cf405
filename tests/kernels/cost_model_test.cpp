// Cost model kernels against an independent double-precision reference of the network and loss.
#include "hkfac/kernels/cost_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <ostream>
#include <random>
#include <vector>

#include "test_util.h"

namespace hkfac {
namespace {

using kernels::CostModelTrainOutputs;
using kernels::CostModelWeights;

constexpr int kH1 = 8, kH2 = 24, kC1 = 32, kRows = 40, kTypes = 7;

// ---------------------------------------------------------------------------------------------
// Reference: plain loops in double. Cost terms re-derived from the formulas documented in
// generators/cost_model.h, with feature indices written as numbers (the spec's order).

std::array<double, 32> cpu_terms(const std::vector<double> &f, double cores) {
  const double T = std::max(f[9], 1.0) * std::max(f[10], 1.0);
  const double tpc = std::ceil(T / cores), par = tpc / T;
  const double allocs = f[0], tiles = f[1], pts = f[4], vec = f[24], sc = f[25];
  const double L = vec * (f[26] + f[27]) + sc * f[28];
  const double pi = f[9] > 1 ? 1 : 0;
  auto pressure = [&](int k, double cache) { return L * par * std::log(1 + f[k] / cache); };
  return {vec * par,
          sc * par,
          pts * par,
          std::max(pts - f[5], 0.0) * par,
          f[17] * par,
          vec * f[27] * par,
          vec * f[26] * par,
          sc * f[28] * par,
          allocs * f[19] * par,
          allocs * f[18] / 64 * par,
          allocs * f[20] / 64 * par,
          vec * f[32] * par,
          tpc * f[34],
          tpc * f[29] / 64,
          tpc * f[29] / std::max(f[30], 1.0),
          pi * tpc * std::max(64 - f[30], 0.0) / 64,
          pi * allocs,
          pi * allocs * std::ceil(f[9] / cores),
          pts * std::max(par - 1 / cores, 0.0),
          allocs,
          allocs * f[11] / 64,
          tiles * f[12] / 64 * par,
          allocs * f[11] / std::max(f[14], 1.0) * par,
          tiles * par,
          pts / std::max(f[6], 1.0) * par,
          tiles * f[8] * par,
          vec * std::max(f[23] / std::max(f[22], 1.0) - 1, 0.0) * par,
          allocs * f[21] / 64 * par,
          pressure(35, 32768),
          pressure(36, 262144),
          pressure(37, 1048576),
          pressure(38, 8388608)};
}

std::array<double, 32> gpu_terms(const std::vector<double> &g) {
  const double blocks = std::max(g[31], 1.0), gpar = std::max(g[39], 1.0) / blocks;
  const double allb = std::max(g[30], 1.0) * blocks, W = g[35], pts = g[4], pt = g[46];
  const double wl = W * g[50], ls = wl * g[51] * gpar;
  auto waste = [&](int k) { return 1 - std::clamp(g[k], 0.0, 1.0); };
  return {pts * gpar,
          W * pt * gpar,
          g[37] * pt * gpar,
          std::max(pts - g[5], 0.0) * gpar,
          g[17] * gpar,
          ls,
          wl * waste(52) * gpar,
          W * g[55] * g[56] * gpar,
          W * g[55] * waste(57) * gpar,
          W * g[60] * g[61] * gpar,
          W * g[63] * g[64] * gpar,
          W * (g[60] * waste(62) + g[63] * waste(65)) * gpar,
          W * g[68] * gpar,
          W * g[69] * gpar,
          allb * g[54] * gpar,
          allb * g[53] / 32 * gpar,
          g[59] / 32 * gpar,
          allb * g[58] / 32 * gpar,
          allb * (g[66] + g[67]) / 128 * gpar,
          g[30],
          std::max(g[30], 1.0) * std::max(g[39], 1.0),
          pts * std::max(gpar - 1 / (std::max(g[38], 1.0) * std::max(g[40], 1.0)), 0.0),
          pts * gpar * waste(41),
          W * g[45] * gpar,
          W * g[44] / 4 * gpar,
          pts * gpar * std::log(1 + g[71] / 262144),
          pts * gpar * std::log(1 + g[42] / 49152),
          ls * std::log(1 + g[72] / 4194304),
          ls * std::log(1 + g[70] / 131072),
          g[0],
          g[0] * g[11] / 4096,
          W * pt / std::max(g[49], 1.0) * gpar};
}

// Weights and inputs in double, flattened in Halide order (dimension 0 fastest).
struct Problem {
  int S = 39, batch = 1, stages = 1, num_cores = 8;
  std::vector<double> pf, sf, runtimes, cotangent;
  std::array<std::vector<double>, 6> w; // head1_filter, head1_bias, head2_filter, ... conv1_bias
  double loss_weight = 1, penalty_weight = 0;

  double sfeat(int n, int f, int s) const { return sf[n + batch * (f + S * s)]; }
};

// Adds `delta` to one pre-activation (as seen by schedule n), for finite differences of J.
struct Nudge {
  enum Layer { none, algo, head2, conv1 } layer = none;
  int c = 0, n = 0, s = 0;
  double delta = 0;
  double at(Layer l, int c_, int n_, int s_) const {
    return l == layer && c_ == c && n_ == n && s_ == s ? delta : 0.0;
  }
};

struct Reference {
  std::vector<double> predictions;
  // The same sums over absolute values: float rounding error is bounded by a multiple of these.
  std::vector<double> magnitudes;
  double l_rel = 0, pen = 0, objective = 0;
  std::vector<double> x2, emb; // (S | 32, batch, stages), channel fastest
};

Reference reference(const Problem &p, const Nudge &nudge = {}) {
  const auto &[h1f, h1b, h2f, h2b, c1f, c1b] = p.w;
  Reference ref;
  ref.predictions.assign(p.batch, 0.0);
  ref.magnitudes.assign(p.batch, 0.0);
  ref.x2.assign(size_t(p.S) * p.batch * p.stages, 0.0);
  ref.emb.assign(size_t(kC1) * p.batch * p.stages, 0.0);
  for (int s = 0; s < p.stages; s++) {
    std::array<double, kH1> algo, algo_abs;
    for (int c = 0; c < kH1; c++) {
      double a = h1b[c], a_abs = std::abs(h1b[c]);
      for (int j = 0; j < kTypes; j++) {
        for (int i = 0; i < kRows; i++) {
          const double w = h1f[c + kH1 * (i + kRows * j)];
          const double x = 1 / (1 + std::exp(-w)) * p.pf[i + kRows * (j + kTypes * s)];
          a += x;
          a_abs += std::abs(x);
        }
      }
      algo[c] = a;
      algo_abs[c] = a_abs;
    }
    for (int n = 0; n < p.batch; n++) {
      std::vector<double> x(p.S), f(p.S);
      for (int k = 0; k < p.S; k++) {
        f[k] = std::max(p.sfeat(n, k, s), 0.0);
        x[k] = std::log1p(f[k]);
        ref.x2[k + p.S * (n + p.batch * s)] = x[k];
      }
      std::array<double, kC1> emb, emb_abs;
      for (int c = 0; c < kH1; c++) {
        emb[c] = algo[c] + nudge.at(Nudge::algo, c, n, s);
        emb_abs[c] = algo_abs[c];
      }
      for (int c = 0; c < kH2; c++) {
        double h = h2b[c] + nudge.at(Nudge::head2, c, n, s), h_abs = std::abs(h2b[c]);
        for (int k = 0; k < p.S; k++) {
          h += h2f[c + kH2 * k] * x[k];
          h_abs += std::abs(h2f[c + kH2 * k] * x[k]);
        }
        emb[kH1 + c] = std::max(h, 0.0);
        emb_abs[kH1 + c] = h_abs;
      }
      for (int k = 0; k < kC1; k++)
        ref.emb[k + kC1 * (n + p.batch * s)] = emb[k];
      std::array<double, 32> terms =
          p.S == 39 ? cpu_terms(f, std::max(p.num_cores, 1)) : gpu_terms(f);
      for (double &t : terms)
        t = double(float(std::min(t, 1e20))); // the documented ceiling
      double cost = 0;
      for (int o = 0; o < kC1; o++) {
        double z = c1b[o] + nudge.at(Nudge::conv1, o, n, s), z_abs = std::abs(c1b[o]);
        for (int k = 0; k < kC1; k++) {
          z += c1f[o + kC1 * k] * emb[k];
          z_abs += std::abs(c1f[o + kC1 * k]) * emb_abs[k];
        }
        cost += std::max(z, 0.0) * terms[o];
        ref.magnitudes[n] += z_abs * terms[o];
        ref.pen += std::min(z, 0.0) * std::min(z, 0.0);
      }
      ref.predictions[n] += cost;
    }
  }
  const int r = int(std::min_element(p.runtimes.begin(), p.runtimes.end()) - p.runtimes.begin());
  const double p_r = std::max(ref.predictions[r], 1e-10);
  double cot = 0;
  for (int n = 0; n < p.batch; n++) {
    const double e = 1 / std::max(ref.predictions[n] / p_r, 1e-10) - p.runtimes[r] / p.runtimes[n];
    ref.l_rel += e * e;
    cot += p.cotangent[n] * ref.predictions[n];
  }
  ref.objective = p.loss_weight * ref.l_rel + p.penalty_weight * ref.pen + cot;
  return ref;
}

// ---------------------------------------------------------------------------------------------
// Random problems and their float buffers.

// Feature values like a featurizer's: many zeros, counts spread over decades, a few huge ones,
// ratios in [0, 1] for the GPU's utilisation / occupancy / efficiency features.
double random_feature(int S, int k, std::mt19937 &rng) {
  std::uniform_real_distribution<double> u(0, 1);
  const bool ratio = S == 73 && (k == 36 || k == 41 || k == 52 || k == 57 || k == 62 || k == 65);
  if (ratio)
    return u(rng);
  const bool count =
      (S == 39 && (k == 9 || k == 10 || k == 22 || k == 23)) ||
      (S == 73 && (k == 9 || k == 10 || k == 30 || k == 31 || k == 38 || k == 39 || k == 40));
  if (count)
    return std::floor(std::exp(u(rng) * 5)); // parallelism, widths, launches: integers
  const double x = u(rng);
  if (x < 0.2)
    return 0;
  if (x < 0.3)
    return std::exp(11 + 5 * u(rng));
  return std::exp(8 * u(rng));
}

Problem random_problem(int S, int batch, int stages, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1), pos(0, 1);
  Problem p;
  p.S = S, p.batch = batch, p.stages = stages, p.num_cores = 6;
  p.pf.resize(size_t(kRows) * kTypes * stages);
  for (double &v : p.pf)
    v = pos(rng) < 0.6 ? 0 : std::floor(std::exp(4 * pos(rng)));
  p.sf.resize(size_t(batch) * S * stages);
  for (int s = 0; s < stages; s++)
    for (int k = 0; k < S; k++)
      for (int n = 0; n < batch; n++)
        p.sf[n + batch * (k + S * s)] = random_feature(S, k, rng);
  const std::array<size_t, 6> sizes = {
      size_t(kH1) * kRows * kTypes, kH1, size_t(kH2) * S, kH2, kC1 * kC1, kC1};
  for (int b = 0; b < 6; b++) {
    p.w[b].resize(sizes[b]);
    // Small head2 weights keep the log features (up to ~16) from saturating every unit.
    const double scale = b == 2 ? 0.3 : 1.0;
    for (double &v : p.w[b])
      v = scale * u(rng);
  }
  p.runtimes.resize(batch);
  for (double &t : p.runtimes)
    t = 0.5 + 4 * pos(rng);
  p.cotangent.assign(batch, 0.0);
  return p;
}

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

// The float problem, re-read into double so the reference sees exactly the kernel's inputs.
Problem rounded(Problem p) {
  auto round_all = [](std::vector<double> &v) {
    for (double &x : v)
      x = double(float(x));
  };
  round_all(p.pf), round_all(p.sf), round_all(p.runtimes), round_all(p.cotangent);
  for (auto &w : p.w)
    round_all(w);
  p.loss_weight = double(float(p.loss_weight));
  p.penalty_weight = double(float(p.penalty_weight));
  return p;
}

std::vector<double> host_values(Buffer<float> &b) {
  to_host(b);
  std::vector<double> v;
  hkfac::for_each_value(b, [&](float x) { v.push_back(x); });
  return v;
}

double max_abs(const std::vector<double> &v) {
  double m = 0;
  for (double x : v)
    m = std::max(m, std::abs(x));
  return m;
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

// A problem whose loss, penalty and cotangent parts all matter (each of order 1).
Problem training_problem(int S, int batch, int stages, unsigned seed) {
  Problem p = random_problem(S, batch, stages, seed);
  const Reference ref = reference(p);
  std::mt19937 rng(seed + 1);
  std::uniform_real_distribution<double> u(-1, 1);
  const double p_scale = std::max(max_abs(ref.predictions), 1e-30);
  for (double &c : p.cotangent)
    c = u(rng) / p_scale;
  p.loss_weight = 1;
  p.penalty_weight = 1.0 / std::max(ref.pen, 1.0);
  return rounded(p);
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
  const char *names[6] = {"head1_filter", "head1_bias",   "head2_filter",
                          "head2_bias",   "conv1_filter", "conv1_bias"};
  std::mt19937 rng(5);
  for (int b = 0; b < 6; b++) {
    const std::vector<double> got = host_values(*grads[b]);
    ASSERT_EQ(got.size(), p.w[b].size()) << names[b];
    // Every bias entry; a sample of 40 entries of each filter.
    std::vector<size_t> idx;
    for (size_t i = 0; i < got.size(); i++)
      idx.push_back(i);
    if (idx.size() > 40) {
      std::shuffle(idx.begin(), idx.end(), rng);
      idx.resize(40);
    }
    std::vector<double> fd, sampled;
    for (size_t i : idx) {
      const double h = 1e-6 * std::max(1.0, std::abs(p.w[b][i]));
      Problem plus = p, minus = p;
      plus.w[b][i] += h;
      minus.w[b][i] -= h;
      fd.push_back((reference(plus).objective - reference(minus).objective) / (2 * h));
      sampled.push_back(got[i]);
    }
    EXPECT_LT(scaled_error(sampled, fd), 5e-4) << names[b];
    EXPECT_GT(max_abs(fd), 0.0) << names[b] << ": the check needs a non-zero gradient";
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
          Nudge plus{rec.layer, c, n, s, 1e-6}, minus{rec.layer, c, n, s, -1e-6};
          fd.push_back((reference(p, plus).objective - reference(p, minus).objective) / 2e-6);
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
