// The 73 GPU schedule features of every stage under a schedule (the cost model's inputs on GPU
// targets).
#pragma once

#include "loop_nest_model.h"
#include "parameters.h"
#include "pipeline_analysis.h"

namespace hkfac::sched {

// Writes S = 73 features per stage, stage-major (stage s's feature f at out[s * 73 + f]), in
// realization order, as cpu_schedule_features does for 39. The features are defined, one comment
// each, in generators/cost_model_features.h (GpuFeature). They are counted from the loop-nest
// model under a warp of 32 lanes, 32-byte sectors and 128-byte lines:
//  - a device Root Func's stages are one launch each: blocks and threads as FuncModel counts
//    them, a warp's lanes along dimension 0, so loads dense along it coalesce, broadcasts take
//    one sector and gathers one per lane;
//  - a Func staged per block is stored to and read from shared memory (reads of it by its
//    consumer are shared loads, one barrier each side), one staged per thread lives in registers;
//    neither is a device-memory allocation (kGpuNumRealizations counts those alone);
//  - host stages (scalars, small stages, updates without a pure loop over dimensions 0 or 1)
//    count as one thread computing every point.
// Residency (blocks per SM) assumes 2,048 threads, 64 warps, 65,536 registers and twice the
// block's shared-memory limit per SM.
void gpu_schedule_features(const PipelineAnalysis &dag, const State &state,
                           const LoopNestModel &model, const Parameters &params, float *out);

} // namespace hkfac::sched
