// The choices the search may make for one Func, given the Funcs already decided.
#pragma once

#include <set>
#include <tuple>
#include <vector>

#include "loop_nest_model.h"
#include "parameters.h"
#include "pipeline_analysis.h"
#include "schedule_state.h"

namespace hkfac::sched {

// A placement without its tiling, as the coarse-to-fine passes compare them.
using PlacementKey = std::tuple<int, int, int, bool>; // placement, at_func, at_level, store_outer
PlacementKey placement_key(const FuncChoice &c);

// The computed Funcs that read Func `id` (following inlined consumers to theirs), in `out`;
// false while one of them is undecided.
bool computed_consumers(const PipelineAnalysis &dag, const State &state, int id,
                        std::vector<int> &out, int depth = 0);

// The candidate decisions for Func `id` in `state` (whose Funcs after `id` are decided; `model`
// is that state's loop-nest model):
//  - inline, where Halide allows it;
//  - compute_root with a tiling from a bounded set of factors (powers of two times the vector
//    width along dimension 0, powers of two elsewhere; `coarse` keeps every other factor), the
//    outermost tile loops fused into a parallel loop with at least 2 x parallelism tasks where the
//    region allows, the innermost dimension vectorized at the native width; tilings whose tile
//    is larger than one core's share of the last-level cache are dropped while a smaller one
//    exists;
//  - compute_at a loop (per tile or per parallel task) of the Root Func that all its consumers
//    are computed in; per tile also with the storage hoisted to the task loop (store_outer,
//    a sliding window), where a serial tile loop lies between and the Func has no update.
// `allowed`, when not empty, keeps only those placements (later passes). `oversized_dropped`,
// when given, counts the placements the allocation bound (Parameters::iteration_bytes) left out.
std::vector<FuncChoice> func_choices(const PipelineAnalysis &dag, const State &state,
                                     const LoopNestModel &model, int id, const Parameters &params,
                                     bool coarse, const std::set<PlacementKey> &allowed,
                                     long long *oversized_dropped = nullptr);

} // namespace hkfac::sched
