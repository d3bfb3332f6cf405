// Computing the GPU schedule features from the loop-nest model (see gpu_features.h).
#include "gpu_features.h"

#include <algorithm>
#include <cmath>

#include "cost_model_features.h"
#include "gpu_atomics.h"
#include "stage_reads.h"

namespace hkfac::sched {

using namespace hkfac::cost_model;

namespace {

constexpr double kWarp = 32;
constexpr double kSector = 32;
constexpr double kThreadsPerSM = 2048, kWarpsPerSM = 64, kRegistersPerSM = 65536;
constexpr double kMaxBlocksPerSM = 16;
constexpr double kRegisterFileBytesPerThread = 255 * 4;

// Where a stage's loads of one producer come from.
enum class Source { Global, Shared, Register };

Source source_of(const State &state, int consumer_site, int producer) {
  if (producer < 0)
    return Source::Global;
  const FuncChoice &p = state.choices[producer];
  if (p.placement == Placement::Inline)
    return Source::Register;
  if (p.placement == Placement::At && p.at_func == consumer_site)
    return p.at_level == kPerThread ? Source::Register : Source::Shared;
  return Source::Global;
}

// A device Root Func that an inlined Func's calls end up in (following inlined consumers), or -1.
int kernel_of(const PipelineAnalysis &dag, const State &state, const LoopNestModel &model, int id,
              int depth) {
  if (depth > 64)
    return -1;
  for (int g : dag.funcs[id].consumers) {
    const FuncChoice &c = state.choices[g];
    if (c.placement == Placement::Inline) {
      const int k = kernel_of(dag, state, model, g, depth + 1);
      if (k >= 0)
        return k;
    } else if (model.func(g).on_device) {
      return c.placement == Placement::At ? c.at_func : g;
    }
  }
  return -1;
}

} // namespace

void gpu_schedule_features(const PipelineAnalysis &dag, const State &state,
                           const LoopNestModel &model, const Parameters &params, float *out) {
  constexpr int kS = kGpuFeatureCount;
  const int n = static_cast<int>(dag.funcs.size());
  std::fill(out, out + static_cast<size_t>(dag.num_stages) * kS, 0.0f);
  double root_bytes = 0;
  std::vector<double> staged_per_block(n, 0), staged_per_thread(n, 0);
  std::vector<int> staged_count(n, 0);
  for (int id = 0; id < n; ++id) {
    const FuncModel &m = model.func(id);
    if (!m.computed)
      continue;
    const double bytes = box_points(m.storage) * dag.funcs[id].bytes_per_point;
    const FuncChoice &c = state.choices[id];
    if (c.placement == Placement::Root) {
      root_bytes += bytes;
    } else if (c.placement == Placement::At) {
      (c.at_level == kPerThread ? staged_per_thread : staged_per_block)[c.at_func] += bytes;
      staged_count[c.at_func] += c.at_level == kPerTile;
    }
  }
  int row = 0;
  for (int id = 0; id < n; ++id) {
    const FuncNode &f = dag.funcs[id];
    const FuncModel &m = model.func(id);
    const FuncChoice &c = state.choices[id];
    for (const StageNode &s : f.stages) {
      float *o = out + static_cast<size_t>(row++) * kS;
      if (c.placement == Placement::Undecided)
        continue;
      if (!m.computed) {
        // Inlined: its calls run in its consumers' kernels, spread as theirs are.
        o[kGpuInlinedCalls] = static_cast<float>(m.inlined_calls);
        const int g = kernel_of(dag, state, model, id, 0);
        if (g >= 0) {
          const FuncModel &gm = model.func(g);
          o[kGpuBlocksPerLaunch] = gm.blocks;
          o[kGpuWavesPerLaunch] =
              std::ceil(gm.blocks / (params.gpu_sms * kMaxBlocksPerSM / 2)); // half residency
        }
        continue;
      }
      // The stage's kernel: a device Root Func's own launch (updates without a pure loop over
      // dimension 0 or 1 stay on the host), or the kernel a staged Func is computed in.
      bool pure01 = s.index == 0;
      for (const LoopDim &l : s.loops)
        pure01 = pure01 || (!l.is_rvar && l.pure_arg < 2);
      const bool staged = c.placement == Placement::At;
      // A scatter update in atomic blocks and threads (gpu_atomics.h).
      const AtomicLaunch atomic = !pure01 && m.on_device && !staged ? gpu_atomic_launch(f, s)
                                                                    : AtomicLaunch{};
      const bool device = m.on_device && (staged || pure01 || atomic.ok);
      const int site = staged ? c.at_func : id;
      double points = 1, rvar_points = 1;
      for (const LoopDim &l : s.loops) {
        const double e = l.is_rvar ? std::max(l.rextent, 1.0) : m.region[l.pure_arg].extent();
        points *= e;
        if (l.is_rvar)
          rvar_points *= e;
      }
      if (s.index == 0)
        points = m.points_computed;
      const double total = points * m.realizations;
      const double blocks = atomic.ok ? atomic.blocks : device ? std::max(1.0, m.blocks) : 1;
      const double launches = device ? (staged ? 0 : m.realizations) : 0;
      const double tpb = atomic.ok ? atomic.threads : device ? m.threads[0] * m.threads[1] : 1;
      const double warps_pb = std::ceil(tpb / kWarp);
      const double kernel_launches = staged ? model.func(site).realizations : std::max(launches, 1.0);
      const double all_threads = kernel_launches * blocks * tpb;
      const double per_thread = total / std::max(1.0, all_threads);
      const double elem = f.elem_bytes;

      double tile_points = 1;
      for (int d = 0; d < f.dims; ++d)
        tile_points *= m.inner[d];
      const double bytes_region = box_points(m.storage) * f.bytes_per_point;
      const double bytes_tile = tile_points * f.bytes_per_point;
      o[kGpuNumRealizations] = staged ? 0 : m.storages; // on chip, no device allocation
      o[kGpuNumProductions] = m.realizations * (staged ? 1 : blocks);
      o[kGpuPointsPerRealization] = total / std::max(1.0, m.storages);
      o[kGpuPointsPerProduction] = total / std::max(1.0, static_cast<double>(o[kGpuNumProductions]));
      o[kGpuPointsTotal] = total;
      o[kGpuPointsMinimum] = s.points_minimum;
      const double serial = s.index > 0 ? rvar_points : per_thread;
      o[kGpuInnermostLoopExtent] = s.loops.empty() ? 1 : s.loops[0].is_rvar ? std::max(1.0, s.loops[0].rextent) : serial;
      o[kGpuInnermostPureLoopExtent] = per_thread / std::max(1.0, s.index > 0 ? rvar_points : 1.0);
      o[kGpuUnrolledLoopExtent] = device && !staged && !atomic.ok ? c.reg[0] * c.reg[1] : 1;
      o[kGpuInnerParallelism] = device ? blocks * tpb : 1;
      o[kGpuOuterParallelism] = m.outer_parallelism;
      o[kGpuBytesAtRealization] = bytes_region;
      o[kGpuBytesAtProduction] = staged ? bytes_region : bytes_tile;
      o[kGpuBytesAtRoot] = box_points(f.root_region) * f.bytes_per_point;
      o[kGpuInnermostBytesAtRealization] = (f.dims > 0 ? m.region[0].extent() : 1) * elem;
      o[kGpuInnermostBytesAtProduction] = (f.dims > 0 ? m.inner[0] : 1) * elem;
      o[kGpuInnermostBytesAtRoot] = (f.dims > 0 ? f.root_region[0].extent() : 1) * elem;

      double read_bytes = 0, read_lines = 0, alloc_read = 0;
      reads(dag, model, s, m.region, read_bytes, read_lines, alloc_read);
      o[kGpuUniqueBytesReadPerRealization] = read_bytes;
      o[kGpuUniqueLinesReadPerRealization] = read_lines;
      o[kGpuAllocationBytesReadPerRealization] = alloc_read;
      const double per_block_divisor = staged ? 1 : blocks;
      o[kGpuWorkingSet] = bytes_tile + staged_per_block[id] + read_bytes / per_block_divisor;

      // One block: what it writes and reads (its tile of the region; a staged Func's region).
      o[kGpuBytesWrittenPerBlock] = staged ? bytes_region : bytes_tile;
      o[kGpuInnermostBytesWrittenPerBlock] = (f.dims > 0 ? m.inner[0] : 1) * elem;
      o[kGpuUniqueBytesReadPerBlock] = read_bytes / per_block_divisor;
      o[kGpuUniqueLinesReadPerBlock] = read_lines / per_block_divisor;
      o[kGpuWorkingSetAtBlock] = o[kGpuBytesWrittenPerBlock] + staged_per_block[id] +
                                 o[kGpuUniqueBytesReadPerBlock];
      o[kGpuWorkingSetAtProduction] = bytes_tile + staged_per_block[id];
      o[kGpuWorkingSetAtRealization] = bytes_region + staged_per_block[id];
      o[kGpuWorkingSetAtRoot] = root_bytes;

      // The launch and its threads.
      o[kGpuNumKernelLaunches] = launches;
      o[kGpuBlocksPerLaunch] = device ? blocks : 0;
      o[kGpuThreadsPerBlock] = tpb;
      o[kGpuWarpsPerBlock] = warps_pb;
      o[kGpuTotalThreads] = all_threads;
      o[kGpuTotalWarps] = kernel_launches * blocks * warps_pb;
      // Lanes idle in partial warps and in the last block along each dimension.
      double util = tpb / (warps_pb * kWarp);
      if (device && !staged && !atomic.ok) {
        for (int d = 0; d < std::min(f.dims, 2); ++d) {
          const double e = std::max(1.0, m.region[d].extent());
          util *= e / (std::ceil(e / m.inner[d]) * m.inner[d]);
        }
      } else if (staged && c.at_level == kPerTile) {
        // A block's threads stride over the staged region: the last pass is partial.
        for (int d = 0; d < std::min(f.dims, 2); ++d) {
          const double e = std::max(1.0, m.region[d].extent()), t = std::max(1.0, m.threads[d]);
          util *= e / (std::ceil(e / t) * t);
        }
      }
      o[kGpuWarpLaneUtilization] = device ? util : 1.0 / kWarp;
      o[kGpuIdleLanes] = o[kGpuTotalWarps] * kWarp * (1 - o[kGpuWarpLaneUtilization]);
      o[kGpuNumSMs] = params.gpu_sms;
      const double shared_pb = staged ? staged_per_block[site] : staged_per_block[id];
      const double reg_bytes = (device && !staged ? c.reg[0] * c.reg[1] * elem : elem) +
                               staged_per_thread[site];
      const double regs_per_thread = 32 + reg_bytes / 4;
      double active = std::min({kMaxBlocksPerSM, std::floor(kThreadsPerSM / (warps_pb * kWarp)),
                                std::floor(kRegistersPerSM / (regs_per_thread * warps_pb * kWarp))});
      if (shared_pb > 0)
        active = std::min(active, std::floor(2 * params.gpu_shared_bytes / shared_pb));
      active = std::max(1.0, active);
      o[kGpuActiveBlocksPerSM] = active;
      o[kGpuWavesPerLaunch] = device ? std::ceil(blocks / (params.gpu_sms * active)) : 1;
      o[kGpuOccupancy] = device ? std::min(1.0, active * warps_pb / kWarpsPerSM) : 0;
      o[kGpuSharedBytesPerBlock] = shared_pb;
      o[kGpuRegisterBytesPerThread] = reg_bytes;
      o[kGpuSpilledBytesPerThread] = std::max(0.0, reg_bytes - kRegisterFileBytesPerThread);
      o[kGpuBarriersPerBlock] = staged && c.at_level == kPerTile ? 2 : 2.0 * staged_count[id];
      o[kGpuPointsPerThread] = per_thread;
      o[kGpuPointsPerWarp] = per_thread * std::min(kWarp, tpb);
      o[kGpuPointsPerBlock] = per_thread * tpb;
      o[kGpuSerialLoopExtentPerThread] = serial;

      // Loads by where they come from; coalescing along the warp's lanes (dimension 0).
      double gl = 0, gl_sectors = 0, gl_used = 0, gl_moved = 0, sl = 0, sl_waves = 0, rl = 0,
             bl = 0;
      for (const Access &a : s.accesses) {
        const double calls = a.calls * per_thread;
        const Source src = source_of(state, staged ? site : id, a.producer);
        bl += a.broadcast_calls * per_thread;
        if (src == Source::Register) {
          rl += calls;
        } else if (src == Source::Shared) {
          sl += calls;
          sl_waves += (a.dense_calls + a.broadcast_calls + a.gather_calls * 4.0) * per_thread;
        } else {
          gl += calls;
          const double dense = a.dense_calls * std::ceil(kWarp * a.elem_bytes / kSector);
          const double gather = a.gather_calls * kWarp;
          gl_sectors += (dense + a.broadcast_calls + gather) * per_thread;
          gl_used += (a.dense_calls + a.gather_calls) * kWarp * a.elem_bytes * per_thread +
                     a.broadcast_calls * a.elem_bytes * per_thread;
          gl_moved += (dense + a.broadcast_calls + gather) * kSector * per_thread;
        }
      }
      o[kGpuGlobalLoadsPerThread] = gl;
      o[kGpuGlobalLoadTransactionsPerAccess] = gl > 0 ? gl_sectors / gl : 0;
      o[kGpuGlobalLoadEfficiency] = gl_moved > 0 ? std::min(1.0, gl_used / gl_moved) : 1;
      o[kGpuUniqueGlobalBytesReadPerBlock] = o[kGpuUniqueBytesReadPerBlock];
      o[kGpuUniqueGlobalLinesReadPerBlock] = o[kGpuUniqueBytesReadPerBlock] / 128 + 1;
      const bool stores_global = !staged;
      o[kGpuGlobalStoresPerThread] = stores_global ? per_thread : 0;
      // Atomic scatters: a sector per lane, of which the lane uses one value.
      o[kGpuGlobalStoreTransactionsPerAccess] =
          !stores_global ? 0 : atomic.ok ? kWarp : std::ceil(kWarp * elem / kSector);
      o[kGpuGlobalStoreEfficiency] = atomic.ok ? elem / kSector : 1;
      o[kGpuGlobalBytesWrittenPerBlock] = stores_global ? bytes_tile : 0;
      o[kGpuGlobalBytesLoadedTotal] = gl_moved / kWarp * all_threads;
      o[kGpuSharedLoadsPerThread] = sl;
      o[kGpuSharedLoadTransactionsPerAccess] = sl > 0 ? sl_waves / sl : 0;
      o[kGpuSharedLoadEfficiency] = sl > 0 ? sl / sl_waves : 1;
      const bool stores_shared = staged && c.at_level == kPerTile;
      o[kGpuSharedStoresPerThread] = stores_shared ? per_thread : 0;
      o[kGpuSharedStoreTransactionsPerAccess] = stores_shared ? 1 : 0;
      o[kGpuSharedStoreEfficiency] = 1;
      o[kGpuSharedBytesWrittenPerBlock] = stores_shared ? bytes_region : staged_per_block[id];
      o[kGpuSharedBytesReadPerBlock] = sl * tpb * elem;
      o[kGpuRegisterLoadsPerThread] = rl;
      o[kGpuBroadcastLoadsPerThread] = bl;
      o[kGpuGlobalWorkingSetPerBlock] = o[kGpuUniqueBytesReadPerBlock] + o[kGpuGlobalBytesWrittenPerBlock];
      o[kGpuRegisterWorkingSetPerBlock] = reg_bytes * tpb;
      o[kGpuL2WorkingSet] = o[kGpuGlobalWorkingSetPerBlock] *
                            std::min(blocks, params.gpu_sms * active);
      for (int i = 0; i < kS; ++i)
        if (!std::isfinite(o[i]) || o[i] < 0)
          o[i] = 0;
    }
  }
}

} // namespace hkfac::sched
