// The loop nest of one update stage under a Func's decision: its splits, its loop order, and
// which loops run parallel, vectorized or unrolled.
#pragma once

#include <string>
#include <vector>

#include "loop_nest_model.h"
#include "pipeline_analysis.h"
#include "schedule_state.h"

namespace hkfac::sched {

// One loop of an update's nest after its splits.
struct UpdateLoop {
  enum Kind : uint8_t { kSerial, kParallel, kVectorized, kUnrolled };
  std::string var;
  bool rvar = false;
  double extent = 1; // iterations per enclosing iteration
  Kind kind = kSerial;
};

// A split of an update's loop `old` into `outer` and `inner` (`factor` iterations), GuardWithIf.
struct UpdateSplit {
  std::string old, outer, inner;
  bool rvar = false;
  double factor = 1;
};

// An update stage's nest as apply_schedule issues it and the features count it. `order` is what the
// stage gets of FuncChoice::update_order: an update without both an RVar and a pure loop keeps
// Halide's order, and one whose outermost RVar cannot be split (its extent not a constant of at
// least two splits) moves its RVars out whole. kRVarsInner reproduces the schedules before the
// other orders existed: the vector lanes and blocked rows innermost, the RVars around them, the
// pure loops over the whole region, the outermost one parallel (where it holds the lanes, as a 1-D
// reduction's does, its vectors split into the pure stage's tasks). The tiled orders split the pure
// loops by the Func's tile (Root Funcs; a scatter's only where the tile divides them) and put,
// innermost first: lanes, blocked rows, the RVars that stay in, the tile's pure loops, the RVars
// moved out, the tile loops (the outermost parallel). Blocked columns split the vector loop once
// more: `x_v` lanes innermost, then `x_u`, the vectors side by side, unrolled.
struct UpdateNest {
  UpdateOrder order = kRVarsInner;
  std::vector<UpdateSplit> splits;
  std::vector<UpdateLoop> loops; // innermost first
  bool reordered = false;        // `loops` is issued as a reorder; else Halide's default order
  bool blocked = false;          // rows of dimension 1 blocked (FuncChoice::update_rows)
  int vectors = 1;               // vectors of dimension 0 side by side (FuncChoice::update_vectors)
  double tiles = 1;              // iterations of the tile loops (tiled orders)
  double tasks = 1;              // iterations of the parallel loop
};

// The dimension whose pure loop update stage `s` vectorizes under `c`, or -1 where it runs scalar:
// c.update_lanes where the stage may vectorize it (a higher dimension only under kRVarsInner,
// without a register tile, its pure loop covering a whole vector), else dimension 0 where its
// loop covers a whole vector.
int update_lanes(const FuncNode &f, const StageNode &s, const FuncChoice &c, const FuncModel &m);

// The lanes of a vector of the dimension update_lanes gave: a higher dimension vectorizes at the
// Func's native width, dimension 0 at the width the model chose for the Func.
int update_lane_width(const FuncNode &f, int lanes, const FuncModel &m);

// Whether update stage `s` has both an RVar and a pure loop, so that its loop order may change.
bool reorderable(const StageNode &s);

// The order update stage `s` gets under `c` (see UpdateNest).
UpdateOrder stage_update_order(const StageNode &s, const FuncChoice &c);

// The index in s.loops of the RVar kRVarSplit splits by `factor`: the outermost RVar, where its
// extent is a constant of at least two splits; -1 where there is none.
int split_rvar(const StageNode &s, int factor);

// Whether stage `s` of `f` is of the shape row blocking applies to, whatever the schedule: an
// update with an RVar whose pure loops include dimensions 0 and 1, of a Func that vectorizes.
bool may_block_rows(const FuncNode &f, const StageNode &s);

// Whether update stage `s` of `f` is blocked by c.update_rows rows (FuncChoice::update_rows): it
// has RVars that stay innermost (not kRVarsOuter), both dimensions 0 and 1 are its pure loops, it
// is vectorized along 0, and the rows its loop over dimension 1 covers hold a block.
bool blocks_rows(const FuncNode &f, const StageNode &s, const FuncModel &m, const FuncChoice &c);

// Whether update stage `s` of `f` computes c.update_vectors vectors of dimension 0 side by side
// (FuncChoice::update_vectors): of the shape row blocking applies to, not kRVarsOuter, and the
// columns its loop over dimension 0 covers hold that many vectors; with blocked rows too, the
// tile divides the columns or the rows (see update_nest.cpp). Rows and columns together make a
// register tile, the reduction's loops around it (Adams2019's innermost tiles).
bool blocks_columns(const FuncNode &f, const StageNode &s, const FuncModel &m,
                    const FuncChoice &c);

UpdateNest update_nest(const FuncNode &f, const StageNode &s, const FuncChoice &c,
                       const FuncModel &m);

} // namespace hkfac::sched
