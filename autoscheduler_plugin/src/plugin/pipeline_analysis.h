// What the search needs to know about a pipeline, computed once before it starts.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "Halide.h"
#include "input_error.h"
#include "algorithm_features.h"
#include "bound_expr.h"

namespace hkfac::sched {

// A closed interval of coordinates, in doubles (the search's arithmetic is all floating point).
struct Span {
  double min = 0, max = -1;
  double extent() const { return max - min + 1; }
};
using Box = std::vector<Span>;
double box_points(const Box &b);
void box_union_into(Box &into, const Box &b);


// One loop of a stage's default loop nest. Pure loops cover a dimension of the Func's region;
// reduction loops (RVars) cover their RDom's constant range.
struct LoopDim {
  std::string var;
  bool is_rvar = false;
  int pure_arg = -1;        // the Func dimension a pure loop covers
  double rmin = 0, rextent = 1; // an RVar's range (its estimate-free constant)
  bool constant_extent = false; // an RVar whose extent is a constant expression (unrollable)
};

// One producer read by one stage: the producer's region the stage needs, as a function of the
// stage's loop bounds, and how its loads behave along the innermost loop.
struct Access {
  int producer = -1; // index into PipelineAnalysis::funcs, or -1 for an input buffer
  std::string name;
  int elem_bytes = 4;
  bool exact = false;               // every bound compiled; otherwise use the producer's root region
  std::vector<BoundExpr> min, max;  // per producer dimension
  std::vector<Halide::Expr> raw_min, raw_max; // the same, uncompiled (for the root pass)
  int calls = 0;                    // call sites in the stage
  int dense_calls = 0;              // innermost loop variable with unit stride in dimension 0
  int broadcast_calls = 0;          // independent of the innermost loop variable
  int gather_calls = 0;             // any other dependence (strided, data-dependent)
  // The same three counts against the loop a vectorized stage vectorizes: the pure variable of
  // dimension 0 (an update's RVars stay outside the lanes), else the innermost loop. For a pure
  // definition they equal the counts above; for a matrix product's update they tell the
  // broadcast row operand and the dense column operand apart, which the RVar cannot.
  int lane_dense_calls = 0, lane_broadcast_calls = 0, lane_gather_calls = 0;
  // Of the lane gathers, those with a constant stride of 2 to 4 in dimension 0 (a downsample):
  // Halide 14 loads them as shuffled dense vectors (fixed_dims.h says why that matters).
  int lane_strided_calls = 0;
  // The same against the pure variable of each higher dimension d (index d - 1) that an update
  // may vectorize instead (FuncChoice::update_lanes): dense, broadcast and gather calls.
  std::vector<std::array<int, 3>> lanes_along;
  // Calls independent of the pure variable of dimension 1, where an update loops over it: a
  // schedule that blocks the update by rows (update_nest.h) loads them once for all its rows.
  int row_shared_calls = 0;
  // Where the producer is inlined: the copies of its work one point of the stage computes after
  // common-subexpression elimination (inline_sharing.h), 1 to `calls`.
  double inline_copies = 0;
};

// A stage: the pure definition (index 0) or an update of a Func.
struct StageNode {
  int func = -1;
  int index = 0;
  std::vector<LoopDim> loops; // innermost first
  std::vector<Access> accesses;
  AlgorithmFeatures features{};
  // Pure update loops that may be parallelised or vectorised: the update writes f(..., v, ...)
  // with v its own pure variable at that position (Halide's definition of a pure var).
  std::vector<bool> pure_arg_is_loop;
  // An update whose store coordinates read a Func or buffer (a histogram's bin): a scatter.
  bool scatters = false;
  double points_minimum = 0; // points computed when every Func is at root
  // Runs of the stage per point of its Func's pure stage: an update runs once per point of its
  // own domain (its RDom times its pure loops), scaled from the pure stage by their sizes at root.
  double runs_per_point = 1;
  // Call sites of `producer` in the stage, and the copies of its work they compute when it is
  // inlined (Access::inline_copies).
  double calls_to(int producer) const;
  double copies_of(int producer) const;
  // Symbols the accesses' bounds read: loop i's min and max at 2i and 2i + 1.
  std::vector<double> box_values(const Box &func_region) const;
};

// A Func of the pipeline with its stages and where it sits in the graph.
struct FuncNode {
  Halide::Internal::Function func;
  std::string name;
  int id = -1;
  int dims = 0;
  bool is_output = false;
  bool is_extern = false;
  bool can_inline = false;    // pure, not an output, not called by an extern stage
  bool must_be_root = false;  // an extern stage or a producer of one
  bool reads_input = false;   // reads an input buffer directly (tail strategies must not widen)
  int bytes_per_point = 4;    // all tuple values
  int elem_bytes = 4;         // the widest value
  int vector_width = 1;       // native lanes for its widest value type (1: never vectorized)
  // A data-dependent read whose index range is one point (a lookup through a clamp to a single
  // value): Halide 14's flatten-nested-ramps divides by zero on such a vector load (every lane's
  // offset is 0), so the Func is neither vectorized nor inlined into a Func that would be.
  bool gathers_one_point = false;
  std::vector<StageNode> stages;
  std::vector<int> consumers; // Funcs that read it (each once)
  Box root_region;            // region needed when everything is at root (estimates applied)
};

// The pipeline as a graph of Funcs in realization order (producers before consumers), with the
// output estimates applied and every producer's required region both as a number (at root) and
// as compiled bound expressions (for any consumer tile). Missing estimates on outputs are a
// Halide CompileError naming the Func and the dimension.
class PipelineAnalysis {
public:
  PipelineAnalysis(const std::vector<Halide::Internal::Function> &outputs,
                   const Halide::Target &target);

  std::vector<FuncNode> funcs; // realization order: producers first
  int num_stages = 0;
  // GPU targets: the device limits the loop-nest model holds schedules to (Parameters).
  bool gpu = false;
  double gpu_shared_bytes = 48 * 1024, gpu_thread_bytes = 512;
  const Halide::Target &target() const { return target_; }
  // The region of `access`'s producer that a stage with `box_values` (StageNode::box_values)
  // needs; `fallback` when the bounds did not compile.
  static Box required(const Access &access, const std::vector<double> &box_values,
                      const Box &fallback);

private:
  Halide::Target target_;
};

} // namespace hkfac::sched
