// Enumerating one Func's candidate decisions on a GPU target (see gpu_search_space.h).
#include "gpu_search_space.h"

#include <algorithm>
#include <cmath>

namespace hkfac::sched {

namespace {

constexpr size_t kMaxTilings = 48;
constexpr double kWarp = 32;
// Grid dimensions y and z hold at most this many blocks (CUDA; OpenCL devices alike).
constexpr double kMaxGridYZ = 65535;
// A stage with at most this many points is not worth a launch on its own.
constexpr double kHostPoints = 256;

// Thread shapes over dimensions 0 and 1 (a warp along dimension 0 where it is wide enough, so
// its lanes read neighbouring addresses), and register tiles per thread.
const std::pair<int, int> kThreads2D[] = {{32, 1},  {32, 2}, {32, 4},  {32, 8}, {16, 8},
                                          {16, 16}, {64, 1}, {64, 4},  {128, 1}, {128, 2},
                                          {256, 1}, {8, 8}};
const int kThreads1D[] = {32, 64, 128, 256, 512};
const std::pair<int, int> kRegs2D[] = {{1, 1}, {2, 1}, {1, 2}, {2, 2}, {4, 1}, {1, 4}, {4, 4}};
const int kRegs1D[] = {1, 2, 4};

// The device Root tilings of `f`, `coarse` keeping every other shape.
std::vector<FuncChoice> device_roots(const FuncNode &f, const Parameters &params, bool coarse) {
  const Box &r = f.root_region;
  const double e0 = std::max(1.0, r[0].extent());
  const double e1 = f.dims > 1 ? std::max(1.0, r[1].extent()) : 1;
  std::vector<std::pair<int, int>> threads, regs;
  if (f.dims == 1 || e1 == 1) {
    for (int t : kThreads1D)
      threads.push_back({t, 1});
    for (int k : kRegs1D)
      regs.push_back({k, 1});
  } else {
    threads.assign(std::begin(kThreads2D), std::end(kThreads2D));
    regs.assign(std::begin(kRegs2D), std::end(kRegs2D));
  }
  std::vector<FuncChoice> out;
  int k = 0;
  for (const auto &t : threads) {
    for (const auto &g : regs) {
      if (coarse && (k++ % 2))
        continue;
      FuncChoice c;
      c.placement = Placement::Root;
      c.gpu = true;
      c.vectorize = false;
      c.reg = {g.first, f.dims > 1 ? g.second : 1};
      c.threads = {t.first, f.dims > 1 ? t.second : 1};
      // Threads beyond the region compute nothing: shrink the block to it.
      c.threads[0] = static_cast<int>(gpu_threads_along(c, 0, e0));
      c.threads[1] = static_cast<int>(gpu_threads_along(c, 1, e1));
      const double per_block = c.threads[0] * c.threads[1];
      if (per_block > params.gpu_max_threads)
        continue;
      // Warp-multiple blocks, unless the region holds less than a warp.
      if (std::fmod(per_block, kWarp) != 0 && per_block < e0 * e1 &&
          per_block >= kWarp)
        continue;
      c.tile.assign(f.dims, 1);
      c.tile[0] = std::min(e0, static_cast<double>(c.threads[0] * c.reg[0]));
      if (f.dims > 1)
        c.tile[1] = std::min(e1, static_cast<double>(c.threads[1] * c.reg[1]));
      for (int d = 2; d < f.dims; ++d)
        c.tile[d] = r[d].extent() > 1 ? 1 : r[d].extent();
      // Every block loop is a grid dimension; the ones after the first are limited.
      const std::vector<int> split = split_dims_outermost_first(c, r);
      c.parallel_dims = static_cast<int>(split.size());
      double higher = 1;
      for (int d = 2; d < f.dims; ++d)
        higher *= std::max(1.0, r[d].extent());
      if ((f.dims > 1 && std::ceil(e1 / c.tile[1]) > kMaxGridYZ) || higher > kMaxGridYZ)
        continue;
      if (std::find(out.begin(), out.end(), c) == out.end())
        out.push_back(c);
    }
  }
  if (out.size() > kMaxTilings) {
    std::vector<FuncChoice> kept;
    const double stride = static_cast<double>(out.size()) / kMaxTilings;
    for (size_t i = 0; i < kMaxTilings; ++i)
      kept.push_back(out[static_cast<size_t>(i * stride)]);
    out.swap(kept);
  }
  return out;
}

// Whether `f` must stay on the host: OpenCL devices run doubles only where the target says
// they may (cl_doubles), so a Func with double values is computed at root on the host there, and
// never inlined into a kernel.
bool host_only(const PipelineAnalysis &dag, const FuncNode &f) {
  const Halide::Target &t = dag.target();
  if (!t.has_feature(Halide::Target::OpenCL) || t.has_feature(Halide::Target::CLDoubles))
    return false;
  for (const StageNode &s : f.stages)
    if (s.features[6] != 0) // types in use: Double (algorithm_features.h)
      return true;
  return false;
}

} // namespace

std::vector<FuncChoice> gpu_func_choices(const PipelineAnalysis &dag, const State &state,
                                         const LoopNestModel &model, int id,
                                         const Parameters &params, bool coarse,
                                         const std::set<PlacementKey> &allowed) {
  const FuncNode &f = dag.funcs[id];
  std::vector<FuncChoice> out;
  auto keep = [&](const FuncChoice &c) {
    return allowed.empty() || allowed.count(placement_key(c)) > 0;
  };
  FuncChoice host;
  host.placement = Placement::Root;
  host.vectorize = false;
  host.tile.assign(f.dims, 1e30);
  if (f.is_extern || f.dims == 0 || host_only(dag, f)) {
    out.push_back(host);
    return out;
  }
  if (f.can_inline && (params.placements & kPlaceInline)) {
    FuncChoice c;
    c.placement = Placement::Inline;
    if (keep(c))
      out.push_back(c);
  }

  // Staged in the kernel of the device Root Func that every computed consumer is, or is staged
  // in at the same level.
  std::vector<int> consumers;
  if (!f.must_be_root && computed_consumers(dag, state, id, consumers) && !consumers.empty()) {
    int site = -1, level = -1;
    bool ok = true;
    for (int g : consumers) {
      const FuncChoice &c = state.choices[g];
      const int s = c.placement == Placement::At ? c.at_func : g;
      ok = ok && (site < 0 || site == s);
      site = s;
      if (c.placement == Placement::At) {
        ok = ok && (level < 0 || level == c.at_level);
        level = c.at_level;
      }
    }
    for (SiteLevel l : {kPerTile, kPerThread}) {
      if (!ok || (level >= 0 && l != level) || !model.has_site(site, l))
        continue;
      FuncChoice c;
      c.placement = Placement::At;
      c.at_func = site;
      c.at_level = l;
      c.vectorize = false;
      if ((params.placements & (l == kPerTile ? kPlaceTile : kPlaceTask)) && keep(c))
        out.push_back(c);
    }
  }

  FuncChoice root = host;
  if (!keep(root) || (!(params.placements & kPlaceRoot) && !out.empty()))
    return out;
  if (box_points(f.root_region) <= kHostPoints)
    out.push_back(host);
  for (FuncChoice &c : device_roots(f, params, coarse))
    out.push_back(std::move(c));
  return out;
}

std::vector<FuncChoice> target_func_choices(const PipelineAnalysis &dag, const State &state,
                                            const LoopNestModel &model, int id,
                                            const Parameters &params, bool coarse,
                                            const std::set<PlacementKey> &allowed,
                                            long long *oversized_dropped) {
  return params.gpu
             ? gpu_func_choices(dag, state, model, id, params, coarse, allowed)
             : func_choices(dag, state, model, id, params, coarse, allowed, oversized_dropped);
}

} // namespace hkfac::sched
