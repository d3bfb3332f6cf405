// Constant tile sizes for outputs that compute reductions per tile (see fixed_dims).
#pragma once

#include <utility>
#include <vector>

#include "loop_nest_model.h"
#include "pipeline_analysis.h"
#include "schedule_state.h"

namespace hkfac::sched {

// The dimensions of a Root output that its tiling leaves whole but that are to be split anyway,
// each with its estimated extent. Where a reduction is computed inside its tile loops, a whole
// dimension makes the reduction's allocation as large as the output's run-time extent, so it is
// made per tile at a size known only then (Halide's pseudostack), and LLVM then reloads and
// stores the update's accumulators at every step of the reduction instead of keeping them in
// registers (see docs/RESULTS.md#producers-in-registers-stack-storage-and-constant-sizes). A
// split by the estimate gives the allocation a constant size. It is exact only where the extent
// is a multiple of the estimate (a shifted-in tile would write outside a smaller output), so it
// lives in a specialization for those extents; other sizes run the unsplit schedule. Pure
// producers are left alone: a single tile spanning a boundary condition's whole width loses the
// clamp-free steady state that Halide's loop partitioning gives the unsplit loop (the split
// measured slower there). Nor is a tile split whose Funcs read each other strided (a
// downsample): constant regions turn those reads' tails into loads at constant indices, which
// Halide 14 can emit as aligned loads at unaligned addresses (tests/halide_findings).
// `split` is the output's tile loops (split_dims_outermost_first); each pair is a dimension and
// its estimated extent.
std::vector<std::pair<int, int>> fixed_dims(const PipelineAnalysis &dag, const State &state,
                                            const LoopNestModel &model, const FuncNode &f,
                                            const std::vector<int> &split);

} // namespace hkfac::sched
