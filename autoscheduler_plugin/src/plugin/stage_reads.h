// What a stage reads from its producers over a box of its Func (bytes, cache lines and the
// producers' allocations, counted the same way by the CPU and the GPU features) and per vector.
#pragma once

#include "loop_nest_model.h"
#include "pipeline_analysis.h"

namespace hkfac::sched {

// Distinct bytes and cache lines of a box of elements `elem_bytes` wide (dimension 0 contiguous).
void footprint(const Box &b, int elem_bytes, double &bytes, double &lines);

// The bytes and lines a stage reads from every producer over the box `stage_box` of its Func,
// and the bytes of the producers' allocations it reads from.
void reads(const PipelineAnalysis &dag, const LoopNestModel &model, const StageNode &s,
           const Box &stage_box, double &bytes, double &lines, double &alloc_bytes);

// What a stage computed `vw` lanes at a time (1: scalar) loads per vector, its loads classified
// against the vectorized loop (Access::lane_*): scalar and vector loads, and the unique bytes
// and cache lines they read, raw (before machine_adjusted_features). An update blocked by
// `rows` rows (update_nest.h) loads its row-independent calls once per block
// (Access::row_shared_calls), so they count 1 / rows per vector; one blocked by `vectors`
// vectors side by side broadcasts its column-independent calls (Access::lane_broadcast_calls)
// once for all of them, 1 / vectors per vector. An update vectorized along a higher dimension
// (`lanes`, FuncChoice::update_lanes) classifies its loads against that loop
// (Access::lanes_along).
struct VectorLoads {
  double scalar_loads = 0, vector_loads = 0, bytes = 0, lines = 0;
};
VectorLoads vector_loads(const StageNode &s, int vw, int rows = 1, int vectors = 1, int lanes = 0);

} // namespace hkfac::sched
