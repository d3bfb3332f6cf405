// The cost model network's forward algorithm and its hand-designed cost terms, as Halide Funcs.
//
// Both generators in cost_model.cpp (inference and training) build the forward pass here so
// their predictions agree by construction. Per schedule n and stage s:
//   algo(c, s)     = head1_bias(c) + Σ_ij sigmoid(head1_filter(c, i, j)) pipeline_features(i, j, s)
//   x2(n, f, s)    = log(1 + max(schedule_features(n, f, s), 0))
//   h2pre(n, c, s) = head2_bias(c) + Σ_f head2_filter(c, f) x2(n, f, s);  h2 = ReLU(h2pre)
//   c1pre(n, o, s) = conv1_bias(o) + Σ_k conv1_filter(o, k) emb(n, k, s);  emb = [algo; h2]
//   stage_cost(n, s)    = Σ_o ReLU(c1pre(n, o, s)) term(n, o, s)
//   stage_penalty(n, s) = Σ_o min(c1pre(n, o, s), 0)²  (the training loss's penalty)
// The per-schedule Funcs keep n (the batch, contiguous in schedule_features) as dimension 0 so
// the CPU schedules vectorize across schedules. The algorithm part of conv1 (algo_conv1) does not
// depend on n and is computed once per stage.
//
// The 32 cost terms are non-negative and measured roughly in operations: bytes are divided by a
// line size, counts are used as they are. The network only learns positive multipliers, so each
// term models one cost that should grow with runtime. They are evaluated in double (products of
// up to five features cannot overflow) with negative features clamped to 0 and denominators
// floored at 1, then capped at kTermCeiling and rounded to float, so every term is finite for any
// finite features and the float sum over terms and stages has headroom for large coefficients.
#pragma once

#include "Halide.h"
#include "cost_model_features.h"

#include <functional>
#include <vector>

namespace hkfac::cost_model {

inline Halide::Expr sigmoid(const Halide::Expr &x) { return 1.0f / (1.0f + Halide::exp(-x)); }

// No realistic schedule comes near it (a 1e12-point stage with 1e3 loads per point is 1e15).
constexpr double kTermCeiling = 1e20;

// Feature i of the current (schedule, stage) as a double, already clamped to >= 0.
using FeatureFn = std::function<Halide::Expr(int)>;

// log(1 + x / scale) for a double x >= 0, in float: every term is rounded to float in the end,
// and on the CPU a double log is a scalar libm call per lane (a measured share of the kernel:
// see docs/RESULTS.md#cost-model-batch-size), where a float log vectorizes. A plain
// log(1 + r) would lose r's low digits in the sum when r is small; log(u)·r/(u − 1) with
// u = 1 + r (Goldberg's log1p) keeps float's relative accuracy.
inline Halide::Expr log1p_ratio(const Halide::Expr &x, float scale) {
  using namespace Halide;
  const Expr r = cast<float>(x / scale);
  const Expr u = 1.0f + r;
  return cast<double>(select(u == 1.0f, r, log(u) * r / (u - 1.0f)));
}

// CPU cost terms (S = 39). T = parallel tasks in flight (inner x outer parallelism),
// tpc = ceil(T / cores) tasks per core, par = tpc / T the share of the stage's work on the
// busiest core (1 for a serial stage), L = loads in total.
inline std::vector<Halide::Expr> cpu_cost_terms(const FeatureFn &f, const Halide::Expr &num_cores) {
  using namespace Halide;
  const Expr cores = cast<double>(max(num_cores, 1));
  const Expr tasks = max(f(kCpuInnerParallelism), 1.0f) * max(f(kCpuOuterParallelism), 1.0f);
  const Expr tpc = ceil(tasks / cores), par = tpc / tasks;
  const Expr allocs = f(kCpuNumRealizations), tiles = f(kCpuNumProductions);
  const Expr points = f(kCpuPointsTotal), vectors = f(kCpuNumVectors), scalars = f(kCpuNumScalars);
  const Expr loads = vectors * (f(kCpuScalarLoadsPerVector) + f(kCpuVectorLoadsPerVector)) +
                     scalars * f(kCpuScalarLoadsPerScalar);
  const Expr parallel_inside = select(f(kCpuInnerParallelism) > 1.0f, 1.0f, 0.0f);
  const Expr row_bytes = max(f(kCpuInnermostBytesWrittenPerTask), 1.0f);
  auto pressure = [&](int ws, float cache_bytes) {
    return loads * par * log1p_ratio(f(ws), cache_bytes);
  };
  std::vector<Expr> t(kNumCostTerms);
  // Compute.
  t[0] = vectors * par;                                  // vector arithmetic
  t[1] = scalars * par;                                  // scalar arithmetic
  t[2] = points * par;                                   // per-point work at any width
  t[3] = max(points - f(kCpuPointsMinimum), 0.0f) * par; // redundant recompute
  t[4] = f(kCpuInlinedCalls) * par;                      // recompute of an inlined body
  // Loads.
  t[5] = vectors * f(kCpuVectorLoadsPerVector) * par;                      // dense vector loads
  t[6] = vectors * f(kCpuScalarLoadsPerVector) * par;                      // gathers and broadcasts
  t[7] = scalars * f(kCpuScalarLoadsPerScalar) * par;                      // scalar loads
  t[8] = allocs * f(kCpuUniqueLinesReadPerRealization) * par;              // distinct lines fetched
  t[9] = allocs * f(kCpuUniqueBytesReadPerRealization) / 64.0f * par;      // distinct bytes fetched
  t[10] = allocs * f(kCpuAllocationBytesReadPerRealization) / 64.0f * par; // producers read
  t[11] = vectors * f(kCpuUniqueLinesReadPerVector) * par; // lines spanned by each vector
  t[12] = tpc * f(kCpuUniqueLinesReadPerTask);             // lines each core brings in
  // Stores.
  t[13] = tpc * f(kCpuBytesWrittenPerTask) / 64.0f;     // lines each core writes
  t[14] = tpc * f(kCpuBytesWrittenPerTask) / row_bytes; // strided runs of stores
  // Neighbouring tasks writing parts of one cache line (false sharing).
  t[15] = parallel_inside * tpc * max(64.0f - f(kCpuInnermostBytesWrittenPerTask), 0.0f) / 64.0f;
  // Parallelism.
  t[16] = parallel_inside * allocs; // parallel loop launches (wake-ups)
  t[17] = parallel_inside * allocs * ceil(f(kCpuInnerParallelism) / cores); // task dispatch
  t[18] = points * max(par - 1.0f / cores, 0.0f); // work idle cores could have done
  // Allocations and tiles.
  t[19] = allocs;                                         // allocations
  t[20] = allocs * f(kCpuBytesAtRealization) / 64.0f;     // lines allocated (first touch)
  t[21] = tiles * f(kCpuBytesAtProduction) / 64.0f * par; // lines produced per tile
  // Rows of the innermost storage dimension per allocation: each row starts a new stride.
  t[22] = allocs * f(kCpuBytesAtRealization) / max(f(kCpuInnermostBytesAtRealization), 1.0f) * par;
  t[23] = tiles * par;                                          // tile loop overhead
  t[24] = points / max(f(kCpuInnermostLoopExtent), 1.0f) * par; // innermost loop entries
  t[25] = tiles * f(kCpuUnrolledLoopExtent) * par;              // unrolled code size per tile
  // Vectors narrower than native: the extra instructions a native width would have saved.
  t[26] = vectors * max(f(kCpuNativeVectorSize) / max(f(kCpuVectorSize), 1.0f) - 1.0f, 0.0f) * par;
  // Working set and cache pressure (sizes: L1 32 KiB, L2 256 KiB, 1 MiB, L3 8 MiB).
  t[27] = allocs * f(kCpuWorkingSet) / 64.0f * par;          // cold misses on the working set
  t[28] = pressure(kCpuWorkingSetAtTask, 32768.0f);          // task working set vs L1
  t[29] = pressure(kCpuWorkingSetAtProduction, 262144.0f);   // tile working set vs L2
  t[30] = pressure(kCpuWorkingSetAtRealization, 1048576.0f); // allocation working set vs L2/L3
  t[31] = pressure(kCpuWorkingSetAtRoot, 8388608.0f);        // root working set vs L3
  return t;
}

// GPU cost terms (S = 73). gpar = waves / blocks is the share of a launch's work on the busiest
// SM slot (the analogue of the CPU's par); warp-level counts use the warps launched in total.
inline std::vector<Halide::Expr> gpu_cost_terms(const FeatureFn &f) {
  using namespace Halide;
  const Expr blocks = max(f(kGpuBlocksPerLaunch), 1.0f);
  const Expr gpar = max(f(kGpuWavesPerLaunch), 1.0f) / blocks;
  const Expr all_blocks = max(f(kGpuNumKernelLaunches), 1.0f) * blocks;
  const Expr warps = f(kGpuTotalWarps), points = f(kGpuPointsTotal);
  const Expr per_thread = f(kGpuPointsPerThread);
  const Expr warp_loads = warps * f(kGpuGlobalLoadsPerThread);
  const Expr load_sectors = warp_loads * f(kGpuGlobalLoadTransactionsPerAccess) * gpar;
  const Expr warp_stores = warps * f(kGpuGlobalStoresPerThread);
  const Expr slots = max(f(kGpuNumSMs), 1.0f) * max(f(kGpuActiveBlocksPerSM), 1.0f);
  auto waste = [&](int efficiency) { return 1.0f - clamp(f(efficiency), 0.0f, 1.0f); };
  std::vector<Expr> t(kNumCostTerms);
  // Compute.
  t[0] = points * gpar;                                   // per-point work
  t[1] = warps * per_thread * gpar;                       // warp instructions issued
  t[2] = f(kGpuIdleLanes) * per_thread * gpar;            // lanes that compute nothing
  t[3] = max(points - f(kGpuPointsMinimum), 0.0f) * gpar; // redundant recompute
  t[4] = f(kGpuInlinedCalls) * gpar;                      // recompute of an inlined body
  // Global memory: sectors moved, and the share of them wasted by poor coalescing.
  t[5] = load_sectors;
  t[6] = warp_loads * waste(kGpuGlobalLoadEfficiency) * gpar;
  t[7] = warp_stores * f(kGpuGlobalStoreTransactionsPerAccess) * gpar;
  t[8] = warp_stores * waste(kGpuGlobalStoreEfficiency) * gpar;
  // Shared memory: wavefronts, and bank-conflict replays.
  t[9] = warps * f(kGpuSharedLoadsPerThread) * f(kGpuSharedLoadTransactionsPerAccess) * gpar;
  t[10] = warps * f(kGpuSharedStoresPerThread) * f(kGpuSharedStoreTransactionsPerAccess) * gpar;
  t[11] = warps * gpar *
          (f(kGpuSharedLoadsPerThread) * waste(kGpuSharedLoadEfficiency) +
           f(kGpuSharedStoresPerThread) * waste(kGpuSharedStoreEfficiency));
  t[12] = warps * f(kGpuRegisterLoadsPerThread) * gpar;  // register reuse traffic
  t[13] = warps * f(kGpuBroadcastLoadsPerThread) * gpar; // broadcast loads
  // Bytes moved per block, over all blocks.
  t[14] = all_blocks * f(kGpuUniqueGlobalLinesReadPerBlock) * gpar;         // lines from L2/DRAM
  t[15] = all_blocks * f(kGpuUniqueGlobalBytesReadPerBlock) / 32.0f * gpar; // distinct sectors
  t[16] = f(kGpuGlobalBytesLoadedTotal) / 32.0f * gpar; // all sectors, redundant ones too
  t[17] = all_blocks * f(kGpuGlobalBytesWrittenPerBlock) / 32.0f * gpar; // sectors written
  t[18] = all_blocks * gpar * // shared-memory staging traffic
          (f(kGpuSharedBytesWrittenPerBlock) + f(kGpuSharedBytesReadPerBlock)) / 128.0f;
  // Launches, waves, idle SMs, occupancy.
  t[19] = f(kGpuNumKernelLaunches);                                               // launch overhead
  t[20] = max(f(kGpuNumKernelLaunches), 1.0f) * max(f(kGpuWavesPerLaunch), 1.0f); // waves
  t[21] = points * max(gpar - 1.0f / slots, 0.0f);            // SM slots idle in the last wave
  t[22] = points * gpar * waste(kGpuOccupancy);               // latency low occupancy cannot hide
  t[23] = warps * f(kGpuBarriersPerBlock) * gpar;             // barrier stalls
  t[24] = warps * f(kGpuSpilledBytesPerThread) / 4.0f * gpar; // register spills (local memory)
  // Pressure on registers, shared memory, L2 and L1 (48 KiB shared, 256 KiB registers per SM).
  t[25] = points * gpar * log1p_ratio(f(kGpuRegisterWorkingSetPerBlock), 262144.0f);
  t[26] = points * gpar * log1p_ratio(f(kGpuSharedBytesPerBlock), 49152.0f);
  t[27] = load_sectors * log1p_ratio(f(kGpuL2WorkingSet), 4194304.0f);
  t[28] = load_sectors * log1p_ratio(f(kGpuGlobalWorkingSetPerBlock), 131072.0f);
  // Allocations and per-thread loops.
  t[29] = f(kGpuNumRealizations);                                       // allocations
  t[30] = f(kGpuNumRealizations) * f(kGpuBytesAtRealization) / 4096.0f; // pages allocated
  t[31] = warps * per_thread / max(f(kGpuSerialLoopExtentPerThread), 1.0f) * gpar; // loop entries
  return t;
}

// The forward network over inputs given as Funcs (generator Inputs convert to Func).
struct Network {
  Halide::Var n{"n"}, c{"c"}, s{"s"}, i{"i"}, j{"j"};
  Halide::Func features{"features"}, sig_head1{"sig_head1"}, algo{"algo"}, algo_conv1{"algo_conv1"},
      x2{"x2"}, h2pre{"h2pre"}, h2{"h2"}, c1pre{"c1pre"}, coef{"coef"}, term{"term"},
      stage_cost{"stage_cost"}, stage_penalty{"stage_penalty"};
  Halide::RDom r_pf, r_algo, r_f, r_h2;

  Network(Halide::Func pipeline_features, const Halide::ImageParam &schedule_features,
          Halide::Func head1_filter, Halide::Func head1_bias, Halide::Func head2_filter,
          Halide::Func head2_bias, Halide::Func conv1_filter, Halide::Func conv1_bias,
          const Halide::Expr &num_cores, int num_features)
      : r_pf(0, kPipelineFeatureRows, 0, kPipelineFeatureTypes, "r_pf"),
        r_algo(0, kHead1Channels, "r_algo"), r_f(0, num_features, "r_f"),
        r_h2(0, kHead2Channels, "r_h2") {
    using namespace Halide;
    sig_head1(c, i, j) = sigmoid(head1_filter(c, i, j));
    algo(c, s) = head1_bias(c);
    algo(c, s) += sig_head1(c, r_pf.x, r_pf.y) * pipeline_features(r_pf.x, r_pf.y, s);
    algo_conv1(c, s) = conv1_bias(c);
    algo_conv1(c, s) += conv1_filter(c, r_algo) * algo(r_algo, s);

    // Reads clamp the schedule index so schedules can compute whole vectors past the batch's end.
    Expr batch = schedule_features.dim(0).extent();
    features(n, c, s) = schedule_features(clamp(n, 0, batch - 1), c, s);
    x2(n, c, s) = log(1.0f + max(features(n, c, s), 0.0f));
    h2pre(n, c, s) = head2_bias(c);
    h2pre(n, c, s) += head2_filter(c, r_f) * x2(n, r_f, s);
    h2(n, c, s) = max(h2pre(n, c, s), 0.0f);
    c1pre(n, c, s) = algo_conv1(c, s);
    c1pre(n, c, s) += conv1_filter(c, kHead1Channels + r_h2) * h2(n, r_h2, s);
    coef(n, c, s) = max(c1pre(n, c, s), 0.0f);

    FeatureFn feature = [&](int k) { return max(cast<double>(features(n, k, s)), Expr(0.0)); };
    std::vector<Expr> terms = num_features == kGpuScheduleFeatureCount
                                  ? gpu_cost_terms(feature)
                                  : cpu_cost_terms(feature, num_cores);
    term(n, c, s) = cast<float>(min(mux(c, terms), Expr(kTermCeiling)));
    // An explicit sum: with a constant o each mux folds to its one term when term is inlined.
    Expr cost = 0.0f;
    for (int o = 0; o < kNumCostTerms; o++) {
      cost += coef(n, o, s) * term(n, o, s);
    }
    stage_cost(n, s) = cost;
    Expr penalty = 0.0f;
    for (int o = 0; o < kNumCostTerms; o++) {
      Expr negative_part = min(c1pre(n, o, s), 0.0f);
      penalty += negative_part * negative_part;
    }
    stage_penalty(n, s) = penalty;
  }
};

} // namespace hkfac::cost_model
