// Cost model forward (CPU features, S = 39): the generated kernel vs a straightforward Eigen
// version.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>

#include "harness.h"
#include "hkfac/kernels/cost_model.h"

namespace {

using Eigen::MatrixXf;
using hkfac::Buffer;

constexpr int kS = 39;

// The 32 CPU cost terms of one (schedule, stage), as generators/cost_model.h defines them.
void cpu_terms(const float *raw, int stride, double cores, float *out) {
  double f[kS];
  for (int k = 0; k < kS; k++)
    f[k] = std::max(double(raw[k * stride]), 0.0);
  const double T = std::max(f[9], 1.0) * std::max(f[10], 1.0);
  const double tpc = std::ceil(T / cores), par = tpc / T;
  const double allocs = f[0], tiles = f[1], pts = f[4], vec = f[24], sc = f[25];
  const double L = vec * (f[26] + f[27]) + sc * f[28], pi = f[9] > 1 ? 1 : 0;
  auto pressure = [&](int k, double cache) { return L * par * std::log(1 + f[k] / cache); };
  const double t[32] = {vec * par,
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
  for (int o = 0; o < 32; o++)
    out[o] = float(std::min(t[o], 1e20));
}

struct Problem {
  Buffer<float> pf, sf, pred;
  hkfac::kernels::CostModelWeights w;
};

// A plugin's search calls the model on one state's few candidates at a time, thousands of times
// a second, so per-call latency at small batches matters as much as throughput at 1,024.
hkfac::bench::Case make_case(int batch, int stages) {
  hkfac::bench::Case c;
  c.group = "cost_model_predict";
  c.shape = "batch=" + std::to_string(batch) + " stages=" + std::to_string(stages) + " S=39";
  c.flops = 2.0 * batch * stages * (24.0 * kS + 32.0 * 24 + 32);
  c.make = [batch, stages] {
    auto p = std::make_shared<Problem>();
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(0, 1);
    p->pf = Buffer<float>(40, 7, stages);
    p->sf = Buffer<float>(batch, kS, stages);
    p->pred = Buffer<float>(batch);
    hkfac::for_each_value(p->pf, [&](float &v) { v = std::floor(10 * u(rng)); });
    hkfac::for_each_value(p->sf,
                          [&](float &v) { v = u(rng) < 0.2f ? 0.0f : std::exp(10 * u(rng)); });
    p->w = hkfac::kernels::make_cost_model_weights(kS);
    for (Buffer<float> *b : {&p->w.head1_filter, &p->w.head1_bias, &p->w.head2_filter,
                             &p->w.head2_bias, &p->w.conv1_filter, &p->w.conv1_bias}) {
      hkfac::for_each_value(*b, [&](float &v) { v = u(rng) - 0.5f; });
    }
    // Workspace reused across calls: fresh multi-100-KiB temporaries per stage would make the
    // Eigen side measure page faults.
    struct Work {
      MatrixXf sig, x2, h2, coef, terms;
      Eigen::VectorXf algo, algo_part, pred;
    };
    auto work = std::make_shared<Work>();
    work->x2.resize(kS, batch);
    work->h2.resize(24, batch);
    work->coef.resize(32, batch);
    work->terms.resize(32, batch);
    work->pred.resize(batch);
    auto eigen = [p, work, batch, stages] {
      using Map = Eigen::Map<const MatrixXf>;
      Work &w = *work;
      const Map h1f(p->w.head1_filter.data(), 8, 280), h2f(p->w.head2_filter.data(), 24, kS),
          c1f(p->w.conv1_filter.data(), 32, 32);
      const Map h1b(p->w.head1_bias.data(), 8, 1), h2b(p->w.head2_bias.data(), 24, 1),
          c1b(p->w.conv1_bias.data(), 32, 1);
      w.sig = (1.0f + (-h1f.array()).exp()).inverse().matrix();
      w.pred.setZero();
      for (int s = 0; s < stages; s++) {
        const Map pf(p->pf.data() + 280 * s, 280, 1);
        const Eigen::Map<const Eigen::Matrix<float, -1, -1, Eigen::RowMajor>> f(
            p->sf.data() + size_t(batch) * kS * s, kS, batch);
        w.algo.noalias() = w.sig * pf + h1b;
        w.x2 = f.array().max(0.0f).log1p().matrix();
        w.h2.noalias() = h2f * w.x2;
        w.h2 = (w.h2.colwise() + h2b.col(0)).cwiseMax(0.0f);
        w.algo_part.noalias() = c1f.leftCols(8) * w.algo + c1b;
        w.coef.noalias() = c1f.rightCols(24) * w.h2;
        w.coef = (w.coef.colwise() + w.algo_part).cwiseMax(0.0f);
        for (int n = 0; n < batch; n++)
          cpu_terms(f.data() + n, batch, 2.0, w.terms.col(n).data());
        w.pred += (w.coef.array() * w.terms.array()).colwise().sum().matrix().transpose();
      }
    };
    return std::vector<hkfac::bench::Contender>{{"halide",
                                                 [p] {
                                                   hkfac::kernels::cost_model_predict(
                                                       p->pf, p->sf, p->w, 2, p->pred,
                                                       hkfac::bench::device());
                                                 }},
                                                {"eigen", eigen}};
  };
  return c;
}

hkfac::bench::Register reg([](bool quick) {
  std::vector<hkfac::bench::Case> out;
  for (int batch : quick ? std::vector<int>{1024} : std::vector<int>{1, 16, 128, 1024})
    out.push_back(make_case(batch, 20));
  return out;
});

} // namespace
