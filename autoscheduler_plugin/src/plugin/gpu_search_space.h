// The choices the search may make for one Func on a GPU target.
#pragma once

#include <set>
#include <vector>

#include "loop_nest_model.h"
#include "parameters.h"
#include "pipeline_analysis.h"
#include "schedule_state.h"
#include "search_space.h"

namespace hkfac::sched {

// The candidate decisions for Func `id` on a GPU target (see func_choices for the CPU's):
//  - inline, where Halide allows it;
//  - compute_root as a kernel: dimensions 0 and 1 tiled into blocks of threads (thread counts a
//    multiple of the warp where the region allows, at most HKFAC_GPU_MAX_THREADS a block), each
//    thread computing a small register tile, unrolled; higher dimensions are block loops; update
//    stages run the same blocks and threads over their pure loops with the RVars serial inside
//    each thread (inside the register tile, so its accumulators stay in registers);
//  - staged in one device Root Func's kernel: computed by the block's threads into shared memory
//    at its block loop (HKFAC_PLACEMENTS "tile"), or by each thread for its own point at its thread
//    loop ("task");
//  - compute_root on the host, for scalars and stages too small to be worth a launch.
// No parallel or vectorized loops: the device loops are blocks and threads.
std::vector<FuncChoice> gpu_func_choices(const PipelineAnalysis &dag, const State &state,
                                         const LoopNestModel &model, int id,
                                         const Parameters &params, bool coarse,
                                         const std::set<PlacementKey> &allowed);

// The candidate decisions for Func `id` on the pipeline's target: gpu_func_choices on a GPU
// target, func_choices (counting into `oversized_dropped`) on a CPU.
std::vector<FuncChoice> target_func_choices(const PipelineAnalysis &dag, const State &state,
                                            const LoopNestModel &model, int id,
                                            const Parameters &params, bool coarse,
                                            const std::set<PlacementKey> &allowed,
                                            long long *oversized_dropped = nullptr);

} // namespace hkfac::sched
