// Register-tiled variants of a complete schedule, for measured selection to try.
#pragma once

#include "pipeline_analysis.h"
#include "schedule_state.h"

namespace hkfac::sched {

// `state` with the pure definition of every Func that can take it register-tiled `rows` high
// (FuncChoice::pure_rows): each vector of dimension 0 computed for `rows` rows of dimension 1
// at once, unrolled, as hand-written and Adams2019's schedules compute stencils, so rows that
// read the same input rows or inlined terms load and compute them once. Funcs that can take it:
// computed (Root or At) on the host, vectorized, two dimensions or more, whose innermost tile or
// region spans at least 2 x `rows` rows, neither slid along a tile loop (its rows are computed
// one at a time) nor a row loop for other Funcs. nullptr where none can.
// The cost model does not see register tiles (its features were trained without them): only a
// timing can choose one.
StatePtr register_tiled(const PipelineAnalysis &dag, const State &state, int rows);

} // namespace hkfac::sched
