// The cost-model network and loss as plain loops in double: the independent reference of the
// kernel tests (tests/kernels/cost_model_test.cpp) and of the GPU schedules' OpenCL check
// (tests/opencl/cost_model_check.cpp). Only the standard library, so both can include it.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <vector>

namespace hkfac::cost_model_reference {

constexpr int kH1 = 8, kH2 = 24, kC1 = 32, kRows = 40, kTypes = 7;

// ---------------------------------------------------------------------------------------------
// Reference: plain loops in double. Cost terms re-derived from the formulas documented in
// generators/cost_model.h, with feature indices written as numbers (the spec's order).

inline std::array<double, 32> cpu_terms(const std::vector<double> &f, double cores) {
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

inline std::array<double, 32> gpu_terms(const std::vector<double> &g) {
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

inline Reference reference(const Problem &p, const Nudge &nudge = {}) {
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

// Feature values like a featurizer's: many zeros, counts spread over decades, a few huge ones,
// ratios in [0, 1] for the GPU's utilisation / occupancy / efficiency features.
inline double random_feature(int S, int k, std::mt19937 &rng) {
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

inline Problem random_problem(int S, int batch, int stages, unsigned seed) {
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

// The float problem, re-read into double so the reference sees exactly the kernel's inputs.
inline Problem rounded(Problem p) {
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

inline double max_abs(const std::vector<double> &v) {
  double m = 0;
  for (double x : v)
    m = std::max(m, std::abs(x));
  return m;
}

// A problem whose loss, penalty and cotangent parts all matter (each of order 1).
inline Problem training_problem(int S, int batch, int stages, unsigned seed) {
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

// ---------------------------------------------------------------------------------------------
// Finite differences of the reference, for the gradient checks.

constexpr const char *kWeightNames[6] = {"head1_filter", "head1_bias",   "head2_filter",
                                         "head2_bias",   "conv1_filter", "conv1_bias"};

// The entries of a weight buffer of `count` values that a gradient check compares: all of them
// for a bias, 40 sampled for a filter.
inline std::vector<size_t> checked_entries(size_t count, std::mt19937 &rng) {
  std::vector<size_t> idx;
  for (size_t i = 0; i < count; i++)
    idx.push_back(i);
  if (idx.size() > 40) {
    std::shuffle(idx.begin(), idx.end(), rng);
    idx.resize(40);
  }
  return idx;
}

// ∂objective/∂(entry i of weight buffer b), by central differences.
inline double weight_derivative(const Problem &p, int b, size_t i) {
  const double h = 1e-6 * std::max(1.0, std::abs(p.w[b][i]));
  Problem plus = p, minus = p;
  plus.w[b][i] += h;
  minus.w[b][i] -= h;
  return (reference(plus).objective - reference(minus).objective) / (2 * h);
}

// ∂objective/∂(pre-activation c of `layer` for schedule n at stage s), by central differences.
inline double preactivation_derivative(const Problem &p, Nudge::Layer layer, int c, int n, int s) {
  const Nudge plus{layer, c, n, s, 1e-6}, minus{layer, c, n, s, -1e-6};
  return (reference(p, plus).objective - reference(p, minus).objective) / 2e-6;
}

} // namespace hkfac::cost_model_reference
