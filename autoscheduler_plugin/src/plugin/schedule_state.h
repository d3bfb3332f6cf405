// A point of the search space: where and how each Func is computed.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

namespace hkfac::sched {

enum class Placement : uint8_t { Undecided, Inline, Root, At };

// The level of a consumer's loops a producer is computed at.
enum SiteLevel : uint8_t {
  kPerTile = 0, // a Root consumer's innermost tile loop (one realization per tile); an At
                // consumer's row loop (one realization per row of its region, dimension 1)
  kPerTask = 1, // a Root consumer's parallel loop: one realization per task (a strip of tiles)
  // On a GPU target kPerTile is a device Root consumer's innermost block loop (the producer is
  // staged in shared memory, computed by the block's threads), and this one its innermost thread
  // loop (the producer is computed by each thread for its own points, in registers).
  kPerThread = 2,
};

// How the loops of a Func's update stages are ordered (FuncChoice::update_order); the update_nest
// helper turns it into splits and a loop order per stage. Every order is legal: each pure point of
// an update is reduced independently (Halide requires self-references to use the pure variables
// in place), and the RVars keep their relative order.
enum UpdateOrder : uint8_t {
  kRVarsInner = 0, // Halide's default: the RVars innermost (under the vector lanes and blocked
                   // rows), the pure loops around them over the whole region
  kRVarsOuter = 1, // the pure loops tiled as the pure definition is, the RVars between a tile's
                   // loops and the tile loops: each tile is reduced whole while it is in cache
  kRVarSplit = 2,  // as kRVarsOuter, but only the outer half of the outermost RVar, split by
                   // `rvar_split`, moves out; its inner half stays innermost (reduction blocking)
};

// The decision for one Func. A Root Func is tiled: each dimension d splits into an outer loop
// and an inner loop of `tile[d]` iterations (no split where tile[d] covers the region); the
// `parallel_dims` outermost tile loops are fused into one parallel loop; the innermost storage
// dimension is vectorized at the native width. An At Func is computed inside the tile loops of
// the Root Func `at_func`, at `at_level`, or per row of the At Func `at_func` (a nest), and
// vectorized the same way. Inline Funcs have no loops.
struct FuncChoice {
  Placement placement = Placement::Undecided;
  int at_func = -1;
  SiteLevel at_level = kPerTile;
  // An At Func computed per tile of a Root Func but stored one loop further out (store_at the
  // tile loop around the tile loop it is computed in, or store_root where there is none): Halide
  // then slides its computation along that one serial loop, so each tile computes only the part
  // its predecessor did not (halos are not recomputed), and folds the storage. One loop only:
  // Halide 14 slid along two and folded away rows the next outer iteration read again.
  bool store_outer = false;
  std::vector<double> tile;
  int parallel_dims = 0;
  bool vectorize = true;
  bool unroll_rvars = false;
  // Register blocking of update stages (see blocks_rows): each vectorized update computes
  // `update_rows` rows of dimension 1 at once, unrolled, inside its RVar loops, so one load of a
  // reduction's operand serves that many accumulators. 1: no blocking.
  int update_rows = 1;
  // The same along dimension 0 (see blocks_columns): `update_vectors` vectors side by side,
  // unrolled, so one broadcast of an operand no column depends on serves them all.
  int update_vectors = 1;
  // The pure dimension whose loop an update's vector lanes run along: 0, or a higher one, for an
  // update in Halide's default order (kRVarsInner) without a register tile, where the data it
  // reads along dimension 0 are strided (a histogram of cells vectorized across its bins). The
  // pure definition and the storage stay as they are (see update_lanes in update_nest.h).
  int update_lanes = 0;
  // Register tiling of the pure definition (see register_tiles.h): each vector of dimension 0 is
  // computed for `pure_rows` rows of dimension 1 at once, unrolled, so values the rows share
  // (a stencil's loads, an inlined producer's terms) are loaded or computed once. The model's
  // features do not see it: measured selection alone chooses it. 1: no register tile.
  int pure_rows = 1;
  UpdateOrder update_order = kRVarsInner;
  int rvar_split = 1; // kRVarSplit's factor
  // GPU targets (gpu_search_space.h). A device Root Func's `tile` is one block's extent per
  // dimension (1 beyond dimension 1: the higher dimensions are block loops whole); each block
  // runs threads[0] x threads[1] threads over dimensions 0 and 1, and each thread computes
  // reg[0] x reg[1] points, unrolled (register tiling), strided by the thread count so that a
  // warp's lanes touch neighbouring points. A Root Func with `gpu` false stays on the host.
  bool gpu = false;
  std::array<int, 2> threads{1, 1};
  std::array<int, 2> reg{1, 1};

  bool operator==(const FuncChoice &o) const {
    return placement == o.placement && at_func == o.at_func && at_level == o.at_level &&
           store_outer == o.store_outer && tile == o.tile && parallel_dims == o.parallel_dims && vectorize == o.vectorize &&
           unroll_rvars == o.unroll_rvars && update_rows == o.update_rows &&
           update_vectors == o.update_vectors && update_lanes == o.update_lanes &&
           pure_rows == o.pure_rows && update_order == o.update_order && rvar_split == o.rvar_split && gpu == o.gpu &&
           threads == o.threads && reg == o.reg;
  }
};

// A (partial) schedule: Funcs are decided from the last in realization order (the outputs) back
// to the first, so `decided` counts the suffix of PipelineAnalysis::funcs already chosen.
struct State {
  std::vector<FuncChoice> choices;
  int decided = 0;
  double cost = 0;
  // A hash of the placements alone (not the tilings): coarse-to-fine passes keep the
  // structures of the previous pass's best schedules.
  uint64_t structure_hash() const {
    uint64_t h = 1469598103934665603ull;
    for (const FuncChoice &c : choices) {
      h = (h ^ static_cast<uint64_t>(c.placement)) * 1099511628211ull;
      h = (h ^ static_cast<uint64_t>(c.at_func + 1)) * 1099511628211ull;
      h = (h ^ static_cast<uint64_t>(c.at_level)) * 1099511628211ull;
      h = (h ^ static_cast<uint64_t>(c.store_outer)) * 1099511628211ull;
    }
    return h;
  }
};

using StatePtr = std::shared_ptr<const State>;

} // namespace hkfac::sched
