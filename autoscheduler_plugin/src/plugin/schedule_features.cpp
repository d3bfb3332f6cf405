// Computing the CPU schedule features from the loop-nest model (see schedule_features.h).
#include "schedule_features.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cost_model_features.h"
#include "gpu_features.h"
#include "stage_reads.h"
#include "update_nest.h"

namespace hkfac::sched {

using namespace hkfac::cost_model;

namespace {

constexpr int kS = kCpuFeatureCount;
// The cache and balance the network's fixed cost terms assume (generators/cost_model.h: the
// root working set against 8 MiB) and the balance of the training machines.
constexpr double kReferenceCache = 8.0 * 1024 * 1024;
constexpr double kReferenceBalance = 40;

} // namespace

void cpu_schedule_features(const PipelineAnalysis &dag, const State &state,
                           const LoopNestModel &model, float *out) {
  const int n = static_cast<int>(dag.funcs.size());
  std::fill(out, out + static_cast<size_t>(dag.num_stages) * kCpuFeatureCount, 0.0f);
  // Bytes of every root allocation: the working set at the root level, shared by all stages.
  double root_bytes = 0;
  std::vector<double> inside_tile(n, 0), inside_task(n, 0);
  for (int id = 0; id < n; ++id) {
    const FuncModel &m = model.func(id);
    if (!m.computed)
      continue;
    const double bytes = box_points(m.storage) * dag.funcs[id].bytes_per_point;
    const FuncChoice &c = state.choices[id];
    if (c.placement == Placement::Root)
      root_bytes += bytes;
    else if (c.placement == Placement::At)
      (c.at_level == kPerTile && !c.store_outer ? inside_tile : inside_task)[c.at_func] += bytes;
  }
  int row = 0;
  for (int id = 0; id < n; ++id) {
    const FuncNode &f = dag.funcs[id];
    const FuncModel &m = model.func(id);
    const FuncChoice &c = state.choices[id];
    for (const StageNode &s : f.stages) {
      float *o = out + static_cast<size_t>(row++) * kCpuFeatureCount;
      if (c.placement == Placement::Undecided)
        continue;
      if (!m.computed) {
        o[kCpuInlinedCalls] = static_cast<float>(m.inlined_work);
        continue;
      }
      // The stage's loop extents per realization: pure loops over the region, RVars whole.
      double points = 1, inner_pure = 1;
      for (const LoopDim &l : s.loops) {
        const double e = l.is_rvar ? std::max(l.rextent, 1.0) : m.region[l.pure_arg].extent();
        points *= e;
      }
      if (s.index == 0)
        points = m.points_computed;
      // Updates in a tiled order (update_nest.h) are counted as the pure stage is: per tile. The
      // nest (names and all) is built only for those; this runs for every candidate.
      const UpdateOrder order = s.index == 0 ? kRVarsInner : stage_update_order(s, c);
      const UpdateNest nest = order != kRVarsInner ? update_nest(f, s, c, m) : UpdateNest{};
      const bool blocked = s.index > 0 && blocks_rows(f, s, m, c);
      const int tile_vectors = s.index > 0 && blocks_columns(f, s, m, c) ? c.update_vectors : 1;
      const bool register_tile = blocked || tile_vectors > 1;
      const bool tiled = s.index == 0 || nest.order != kRVarsInner;
      const double tiles = s.index == 0 ? m.tiles : nest.order != kRVarsInner ? nest.tiles : 1;
      const double tasks = s.index == 0                  ? m.tasks
                           : nest.order != kRVarsInner ? nest.tasks
                           : (m.tasks > 1 && c.parallel_dims > 0 ? m.tasks : 1);
      // An update vectorized along a higher dimension has that loop innermost.
      const int lanes = s.index > 0 ? update_lanes(f, s, c, m) : 0;
      int innermost_dim = lanes > 0 ? lanes : -1;
      for (size_t i = 0; innermost_dim < 0 && i < s.loops.size(); ++i)
        if (!s.loops[i].is_rvar)
          innermost_dim = s.loops[i].pure_arg;
      const bool stage_vectorized =
          m.vector_width > 1 && (s.index == 0 || (s.pure_arg_is_loop[0] && !s.loops.empty()));
      const int vw = lanes > 0 || stage_vectorized ? update_lane_width(f, lanes, m) : 1;
      // The innermost loop's extent in vectors. Under kRVarsInner it is the innermost RVar's
      // (divided by the lanes as it always was, so old schedules featurize as before); in the
      // tiled orders the innermost loop that is neither lanes nor blocked rows.
      double inner0 = s.loops.empty() ? 1
                      : s.loops[0].is_rvar
                          ? std::max(s.loops[0].rextent, 1.0)
                          : (tiled ? m.inner[s.loops[0].pure_arg] : m.region[s.loops[0].pure_arg].extent());
      if (s.index > 0 && nest.order != kRVarsInner) {
        for (const UpdateLoop &l : nest.loops) {
          if (l.kind == UpdateLoop::kVectorized ||
              (register_tile && l.kind == UpdateLoop::kUnrolled && !l.rvar))
            continue;
          inner0 = l.rvar ? l.extent : l.extent * vw;
          break;
        }
      }
      inner_pure = innermost_dim < 0 ? 1 : (tiled ? m.inner[innermost_dim] : m.region[innermost_dim].extent());
      double unrolled = 1;
      if (register_tile) {
        unrolled = (blocked ? c.update_rows : 1) * tile_vectors;
      } else if (s.index > 0 && nest.order != kRVarsInner) {
        for (const UpdateLoop &l : nest.loops)
          if (l.kind == UpdateLoop::kUnrolled)
            unrolled = l.extent;
      } else if (c.unroll_rvars && !s.loops.empty() && s.loops[0].is_rvar &&
                 s.loops[0].constant_extent) {
        unrolled = s.loops[0].rextent;
      }

      const double total = points * m.realizations;
      const double elem = f.elem_bytes;
      const double bytes_region = box_points(m.storage) * f.bytes_per_point;
      double tile_points = 1;
      for (int d = 0; d < f.dims; ++d)
        tile_points *= m.inner[d];
      const double bytes_tile = tile_points * f.bytes_per_point;
      const double bytes_root = box_points(f.root_region) * f.bytes_per_point;
      const double inner_extent0 = f.dims > 0 ? m.region[0].extent() : 1;

      // Realizations are allocations, productions computations: they differ when stored outer.
      o[kCpuNumRealizations] = m.storages;
      o[kCpuNumProductions] = m.realizations * tiles;
      o[kCpuPointsPerRealization] = total / std::max(1.0, m.storages);
      o[kCpuPointsPerProduction] = total / std::max(1.0, m.realizations * tiles);
      o[kCpuPointsTotal] = total;
      o[kCpuPointsMinimum] = s.points_minimum;
      o[kCpuInnermostLoopExtent] = std::max(1.0, inner0 / vw);
      o[kCpuInnermostPureLoopExtent] = std::max(1.0, inner_pure / vw);
      o[kCpuUnrolledLoopExtent] = unrolled;
      o[kCpuInnerParallelism] = tasks;
      o[kCpuOuterParallelism] = m.outer_parallelism;
      o[kCpuBytesAtRealization] = bytes_region;
      o[kCpuBytesAtProduction] = tiled ? bytes_tile : bytes_region;
      o[kCpuBytesAtRoot] = bytes_root;
      o[kCpuInnermostBytesAtRealization] = inner_extent0 * elem;
      o[kCpuInnermostBytesAtProduction] = (f.dims > 0 ? m.inner[0] : 1) * elem;
      o[kCpuInnermostBytesAtRoot] = (f.dims > 0 ? f.root_region[0].extent() : 1) * elem;

      double read_bytes = 0, read_lines = 0, alloc_read = 0;
      reads(dag, model, s, m.region, read_bytes, read_lines, alloc_read);
      o[kCpuUniqueBytesReadPerRealization] = read_bytes;
      o[kCpuUniqueLinesReadPerRealization] = read_lines;
      o[kCpuAllocationBytesReadPerRealization] = alloc_read;
      const double ws_tile = bytes_tile + inside_tile[id] + inside_task[id];
      o[kCpuWorkingSet] = ws_tile + read_bytes / std::max(tiles, 1.0);

      int calls = 0;
      for (const Access &a : s.accesses)
        calls += a.calls;
      o[kCpuVectorSize] = vw;
      o[kCpuNativeVectorSize] = f.vector_width;
      const double vectors = vw > 1 ? std::floor(total / vw) : 0;
      o[kCpuNumVectors] = vectors;
      o[kCpuNumScalars] = vw > 1 ? total - vectors * vw : total;
      const VectorLoads per_vector =
          vector_loads(s, vw, blocked ? c.update_rows : 1, tile_vectors, std::max(lanes, 0));
      o[kCpuScalarLoadsPerVector] = per_vector.scalar_loads;
      o[kCpuVectorLoadsPerVector] = per_vector.vector_loads;
      o[kCpuScalarLoadsPerScalar] = calls;

      const double task_points = points / std::max(tasks, 1.0);
      const double task_bytes = task_points * f.bytes_per_point;
      o[kCpuBytesWrittenPerTask] = task_bytes;
      o[kCpuInnermostBytesWrittenPerTask] =
          (tasks > 1 && f.dims > 0 ? std::min(inner_extent0, m.inner[0]) : inner_extent0) * elem;
      o[kCpuUniqueBytesReadPerVector] = per_vector.bytes;
      o[kCpuUniqueLinesReadPerVector] = per_vector.lines;
      o[kCpuUniqueBytesReadPerTask] = read_bytes / std::max(tasks, 1.0);
      o[kCpuUniqueLinesReadPerTask] = read_lines / std::max(tasks, 1.0);
      o[kCpuWorkingSetAtTask] = task_bytes + inside_task[id] + read_bytes / std::max(tasks, 1.0);
      o[kCpuWorkingSetAtProduction] = ws_tile;
      o[kCpuWorkingSetAtRealization] = bytes_region + inside_tile[id] + inside_task[id];
      o[kCpuWorkingSetAtRoot] = root_bytes;
      for (int i = 0; i < kCpuFeatureCount; ++i)
        if (!std::isfinite(o[i]) || o[i] < 0)
          o[i] = 0;
    }
  }
}

void machine_adjusted_features(const Parameters &params, float *f, int stages) {
  // Working sets are measured against the machine's last-level cache: the network compares them
  // with fixed sizes, so they are scaled by reference / actual (a 64 MB cache makes a working set
  // look 8x smaller than an 8 MB one). Memory traffic is scaled by the balance, the cost of a
  // miss relative to an operation.
  const float cache = static_cast<float>(kReferenceCache / params.last_level_cache);
  const float balance = static_cast<float>(params.balance / kReferenceBalance);
  for (int s = 0; s < stages; ++s) {
    float *o = f + static_cast<size_t>(s) * kS;
    for (int i : {kCpuWorkingSet, kCpuWorkingSetAtTask, kCpuWorkingSetAtProduction,
                  kCpuWorkingSetAtRealization, kCpuWorkingSetAtRoot})
      o[i] *= cache;
    for (int i : {kCpuUniqueLinesReadPerRealization, kCpuUniqueLinesReadPerVector,
                  kCpuUniqueLinesReadPerTask})
      o[i] *= balance;
  }
}

void schedule_features(const PipelineAnalysis &dag, const State &state,
                       const LoopNestModel &model, const Parameters &params, float *out) {
  if (params.gpu) {
    gpu_schedule_features(dag, state, model, params, out);
    return;
  }
  cpu_schedule_features(dag, state, model, out);
  machine_adjusted_features(params, out, dag.num_stages);
}

std::vector<uint8_t> featurization_bytes(const PipelineAnalysis &dag, const State &state,
                                         const Parameters &params) {
  LoopNestModel model(dag, state);
  const int S = schedule_feature_count(params);
  std::vector<float> sched(static_cast<size_t>(dag.num_stages) * S);
  schedule_features(dag, state, model, params, sched.data());
  std::vector<float> all;
  int row = 0;
  for (const FuncNode &f : dag.funcs) {
    for (const StageNode &s : f.stages) {
      all.insert(all.end(), sched.begin() + row * S, sched.begin() + (row + 1) * S);
      for (int v : s.features)
        all.push_back(static_cast<float>(v));
      ++row;
    }
  }
  std::vector<uint8_t> bytes(all.size() * sizeof(float));
  std::memcpy(bytes.data(), all.data(), bytes.size());
  return bytes;
}

} // namespace hkfac::sched
