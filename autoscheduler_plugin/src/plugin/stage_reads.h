// What a stage reads from its producers over a box of its Func: bytes, cache lines and the
// producers' allocations, counted the same way by the CPU and the GPU features.
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

} // namespace hkfac::sched
