// A point of the search space: where and how each Func is computed.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace hkfac::sched {

enum class Placement : uint8_t { Undecided, Inline, Root, At };

// The level of a consumer's tile loops a producer is computed at.
enum SiteLevel : uint8_t {
  kPerTile = 0, // the innermost tile loop: one realization per consumer tile
  kPerTask = 1, // the parallel loop: one realization per parallel task (a strip of tiles)
};

// The decision for one Func. A Root Func is tiled: each dimension d splits into an outer loop
// and an inner loop of `tile[d]` iterations (no split where tile[d] covers the region); the
// `parallel_dims` outermost tile loops are fused into one parallel loop; the innermost storage
// dimension is vectorized at the native width. An At Func is computed inside the tile loops of
// the Root Func `at_func`, at `at_level`, and vectorized the same way. Inline Funcs have no loops.
struct FuncChoice {
  Placement placement = Placement::Undecided;
  int at_func = -1;
  SiteLevel at_level = kPerTile;
  std::vector<double> tile;
  int parallel_dims = 0;
  bool vectorize = true;
  bool unroll_rvars = false;
  // Register blocking of update stages (see blocks_rows): each vectorized update computes
  // `update_rows` rows of dimension 1 at once, unrolled, inside its RVar loops, so one load of a
  // reduction's operand serves that many accumulators. 1: no blocking.
  int update_rows = 1;

  bool operator==(const FuncChoice &o) const {
    return placement == o.placement && at_func == o.at_func && at_level == o.at_level &&
           tile == o.tile && parallel_dims == o.parallel_dims && vectorize == o.vectorize &&
           unroll_rvars == o.unroll_rvars && update_rows == o.update_rows;
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
    }
    return h;
  }
};

using StatePtr = std::shared_ptr<const State>;

} // namespace hkfac::sched
