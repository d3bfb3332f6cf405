// The loop nest a (partial) schedule implies, in numbers: regions, trip counts, parallelism.
#pragma once

#include <array>
#include <vector>

#include "pipeline_analysis.h"
#include "schedule_state.h"

namespace hkfac::sched {

// What one Func's loops do under a schedule, counted over one run of the pipeline at its
// estimated size. Regions are per realization (one allocation); Root Funcs realize once, an At
// Func once per iteration of its site loop. This is the whole model the featurizer and the
// search's legality checks read; Halide's lowering is never consulted during the search.
struct FuncModel {
  bool computed = false;     // decided, and not inlined
  Box region;                // per realization
  double realizations = 0;   // computations over the whole pipeline
  double storages = 0;       // allocations over the whole pipeline (fewer when stored outer)
  std::vector<double> inner; // the tile's extent per dimension (Root), else the region's
  std::vector<bool> split;   // dimensions with a tile loop
  double tiles = 1;          // tiles per realization (product of the tile loops' extents)
  double tasks = 1;          // parallel tasks per realization (1: serial)
  double outer_parallelism = 1; // parallel instances around one realization
  int vector_width = 1;      // lanes of the innermost dimension (1: scalar)
  // Its vectors read a Func at a constant stride of 2 to 4 (a downsample), in its pure definition
  // or through Funcs inlined into it. Where its region is a constant, Halide 14 marks such a load
  // at a constant index off the stride aligned, and the aligned load may fault (docs/data.md,
  // known scheduler bugs): a shifted-in last vector makes such an index, and so does a loop of
  // one vector. So it guards its vector tail (GuardWithIf: the tail's predicated strided loads
  // are scalarized) and is vectorized only over two vectors or more.
  bool strided_lanes = false;
  double inlined_calls = 0;  // Inline: calls made to it in total
  // Inline: copies of its work computed in total, calls that common-subexpression elimination
  // shares counted once (Access::inline_copies); what the CPU features count.
  double inlined_work = 0;
  double inline_fanout = 0;  // Inline: copies of its expression per point of a computed Func
  double points_total = 0;   // pure stage points over all realizations
  double points_computed = 0; // pure stage points per realization, ShiftInwards overlaps counted
  Box storage;               // the allocation: the region, or outer_region when stored outer
  Box outer_region;          // At per tile: what one iteration of the loop around the tile loop
                             // needs of it (a sliding window's whole extent)
  // GPU targets: the stage runs as a kernel (a device Root Func, or one staged At in it).
  bool on_device = false;
  double blocks = 1;         // blocks per launch (device Root), or of the kernel it is staged in
  std::array<double, 2> threads{1, 1}; // threads of a block along dimensions 0 and 1
  double staged_bytes = 0;   // a device Root Func: the producers staged per block (shared memory)
};

class LoopNestModel {
public:
  LoopNestModel(const PipelineAnalysis &dag, const State &state);

  // False when the state asks for something the model (and so Halide) cannot do.
  bool legal() const { return legal_; }
  // The Func whose decision made the state illegal (the first in the order modeled, from the
  // outputs back), or -1.
  int illegal_func() const { return illegal_func_; }
  const FuncModel &func(int id) const { return funcs_[id]; }

  // The box one iteration of `consumer`'s loop at `level` covers (a tiled Root Func's tile or
  // task, an At Func's row).
  Box site_box(int consumer, SiteLevel level) const;
  // Whether `consumer` has a loop at `level`.
  bool has_site(int consumer, SiteLevel level) const;
  // Whether a producer computed per tile of `consumer` can be stored one loop further out, its
  // innermost tile loop being serial (FuncChoice::store_outer).
  bool slides_at(int consumer) const;
  // The bytes one allocation of `producer` computed at `site`'s loop at `level` would take (its
  // outer region when stored outer, a sliding window), plus what the Funcs already computed there
  // allocate in each iteration; -1 where it cannot be computed there. `site_points`, when given,
  // receives the points of `site` one iteration computes.
  double bytes_per_iteration(int producer, int site, SiteLevel level, bool store_outer,
                             double *site_points = nullptr) const;

private:
  // `consumer`'s region with its `count` outermost tile loops at one tile (the rest run whole).
  Box tiles_box(int consumer, size_t count) const;
  // The box one iteration of the loop around `consumer`'s innermost tile loop covers.
  Box outer_box(int consumer) const;
  // The box of `producer` that one iteration of `site_func`'s loop at `level` needs; with
  // `outer`, what one iteration of the loop around it needs (consumers At the site give their
  // outer_region).
  bool need_at_site(int producer, int site_func, SiteLevel level, Box &need, int depth,
                    bool outer) const;
  void model_func(int id);
  // FuncModel::strided_lanes of Func `id` under the state's inlining.
  bool reads_strided_lanes(int id, int depth = 0) const;
  // GPU targets: a decided Func's kernel and the device limits it must keep; false if illegal.
  bool model_device(int id);

  const PipelineAnalysis &dag_;
  const State &state_;
  std::vector<FuncModel> funcs_;
  bool legal_ = true;
  int illegal_func_ = -1;
};

// The thread count of a block along a device Root Func's dimension d (0 or 1) over `extent`.
double gpu_threads_along(const FuncChoice &c, int d, double extent);

// Whether a pure definition's split of a dimension with this extent shifts its last split
// inwards (ShiftInwards, computing the overlap twice) rather than guarding it (GuardWithIf):
// where the extent holds a whole split and the Func reads no input directly, whose boundary
// wrapper the shifted tail read out of bounds (docs/data.md). apply_schedule and the features
// both follow it.
bool shifts_inwards(const FuncNode &f, double extent, double factor);

// Tile loops of a Root Func, outermost first: the dimensions with tile[d] below the region's
// extent, from the last dimension to the first.
std::vector<int> split_dims_outermost_first(const FuncChoice &c, const Box &region);

} // namespace hkfac::sched
