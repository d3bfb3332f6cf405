// Applying a chosen schedule, or the fallback, to the pipeline's Funcs (see apply_schedule.h).
#include "apply_schedule.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "fixed_dims.h"
#include "gpu_atomics.h"
#include "loop_nest_model.h"
#include "schedule_writer.h"
#include "update_nest.h"

namespace hkfac::sched {

using namespace Halide;
using namespace Halide::Internal;

namespace {

// A pure definition's split shifts its last tile inwards where shifts_inwards allows (Halide's
// own default for pure definitions: full vectors, no predicated tail, whose code LLVM took
// minutes over); updates and everything else use GuardWithIf.
TailStrategy pure_tail(const FuncNode &f, double extent, double factor) {
  return shifts_inwards(f, extent, factor) ? TailStrategy::ShiftInwards : TailStrategy::GuardWithIf;
}

// Every Func of the pipeline and its index in Pipeline::get_func's order.
std::map<std::string, std::pair<Function, int>> pipeline_funcs(const std::vector<Function> &outputs) {
  std::map<std::string, Function> env;
  for (const Function &f : outputs) {
    auto more = find_transitive_calls(f);
    env.insert(more.begin(), more.end());
  }
  std::vector<std::string> order = topological_order(outputs, env);
  std::map<std::string, std::pair<Function, int>> out;
  for (size_t i = 0; i < order.size(); ++i)
    out.emplace(order[i], std::make_pair(env.at(order[i]), static_cast<int>(i)));
  return out;
}

// The loop a Root Func offers its producers at `level` (see LoopNestModel::has_site).
std::string site_var(const FuncNode &f, const FuncChoice &c, const Box &region, SiteLevel level) {
  if (c.placement == Placement::At) // an At Func's row loop
    return f.func.args()[1];
  const std::vector<int> split = split_dims_outermost_first(c, region);
  const std::string fused = f.func.args()[split[0]] + "_par";
  const bool fused_several = c.parallel_dims > 1;
  if (level == kPerTask || static_cast<int>(split.size()) == c.parallel_dims)
    return fused_several ? fused : f.func.args()[split[0]] + "_o";
  return f.func.args()[split.back()] + "_o";
}

// The tile loop around a Root Func's innermost one (FuncChoice::store_outer); empty for root.
std::string outer_var(const FuncNode &f, const FuncChoice &c, const Box &region) {
  const std::vector<int> split = split_dims_outermost_first(c, region);
  if (split.size() < 2)
    return "";
  if (static_cast<int>(split.size()) - 1 == c.parallel_dims)
    return site_var(f, c, region, kPerTask);
  return f.func.args()[split[split.size() - 2]] + "_o";
}

// Splits dimension 0's innermost loop by the vector width and vectorizes it.
// A Func slid along a tile loop (store_outer) guards its tail: a shifted-in last vector would
// recompute columns before the slid region from producers whose folded storage has moved on.
// So does one whose vectors read at a stride (FuncModel::strided_lanes says why).
void vectorize_pure(ScheduleWriter &w, const FuncNode &f, const FuncModel &m, const std::string &v,
                    bool slid = false) {
  const double extent = m.inner[0];
  const int width = m.vector_width;
  w.split(0, v, false, v, v + "_v", width,
          slid || m.strided_lanes ? TailStrategy::GuardWithIf : pure_tail(f, extent, width));
  w.loop_type(0, v + "_v", false, "vectorize");
}

// A register tile (FuncChoice::pure_rows) of a vectorized pure definition: the innermost loop of
// dimension 1, `y`, split by the rows, the rows unrolled inside the loop over the vectors of
// dimension 0 (`x`, whose lanes are `x`_v), so each vector is computed for all the rows at once.
void register_tile(ScheduleWriter &w, const FuncNode &f, const FuncChoice &c, const FuncModel &m,
                   const std::string &x, const std::string &y) {
  if (c.pure_rows <= 1 || m.vector_width <= 1 || f.dims < 2)
    return;
  w.split(0, y, false, y, y + "_r", c.pure_rows, pure_tail(f, m.inner[1], c.pure_rows));
  w.reorder(0, {{x + "_v", false}, {y + "_r", false}, {x, false}});
  w.loop_type(0, y + "_r", false, "unroll");
}

void schedule_updates(ScheduleWriter &w, const FuncNode &f, const FuncChoice &c,
                      const FuncModel &m) {
  for (size_t i = 1; i < f.stages.size(); ++i) {
    const int s = static_cast<int>(i);
    const UpdateNest n = update_nest(f, f.stages[i], c, m);
    for (const UpdateSplit &sp : n.splits)
      w.split(s, sp.old, sp.rvar, sp.outer, sp.inner, sp.factor, TailStrategy::GuardWithIf);
    if (n.reordered) {
      std::vector<std::pair<std::string, bool>> order;
      for (const UpdateLoop &l : n.loops)
        order.push_back({l.var, l.rvar});
      w.reorder(s, order);
    }
    // Vector lanes, unrolled rows, the parallel loop, unrolled RVars: the order the calls read.
    bool scheduled = false;
    auto mark = [&](UpdateLoop::Kind kind, bool rvar, const char *what) {
      for (const UpdateLoop &l : n.loops)
        if (l.kind == kind && l.rvar == rvar) {
          w.loop_type(s, l.var, l.rvar, what);
          scheduled = true;
        }
    };
    mark(UpdateLoop::kVectorized, false, "vectorize");
    mark(UpdateLoop::kUnrolled, false, "unroll");
    mark(UpdateLoop::kParallel, false, "parallel");
    mark(UpdateLoop::kUnrolled, true, "unroll");
    if (!scheduled && !n.reordered && n.splits.empty())
      w.unscheduled(s);
  }
}

// GPU targets: the loops of one stage of a device Root Func (FuncChoice::gpu). Dimensions 0
// and 1 (where the stage has them as pure loops) split by the block's extent, whose inner loop
// splits again by the thread count when each thread computes a register tile: `d_r` (unrolled,
// strided by the thread count so a warp's lanes stay neighbours), `d_t` (threads), `d_o`
// (blocks). They are split even where one block covers the estimated region, so that thread
// loops have constant extents at any size. Higher pure dimensions are fused into one block
// loop. RVars (updates) run serially in each thread, inside the thread loops and outside the
// register tile. An update without a pure loop over dimension 0 or 1 runs its RVars in blocks
// and threads with atomic writes where gpu_atomic_launch allows; else this returns false,
// issuing nothing, and it stays a host loop.
bool schedule_device_stage(ScheduleWriter &w, const FuncNode &f, const FuncChoice &c,
                           const FuncModel &m, int s) {
  const StageNode &st = f.stages[s];
  const auto &args = f.func.args();
  auto pure = [&](int d) {
    if (s == 0)
      return d < f.dims;
    for (const LoopDim &l : st.loops)
      if (!l.is_rvar && l.pure_arg == d)
        return true;
    return false;
  };
  const TailStrategy guard = TailStrategy::GuardWithIf;
  if (!pure(0) && !pure(1)) {
    const AtomicLaunch a = gpu_atomic_launch(f, st);
    if (!a.ok)
      return false;
    w.atomic(s);
    w.split(s, a.inner, true, a.inner + "_o", a.inner + "_i", a.threads, guard);
    w.loop_type(s, a.inner + "_i", true, "gpu_threads");
    if (a.outer.empty()) {
      w.loop_type(s, a.inner + "_o", true, "gpu_blocks");
    } else {
      w.reorder(s, {{a.inner + "_o", true}, {a.inner + "_i", true}, {a.outer, true}});
      w.loop_type(s, a.outer, true, "gpu_blocks");
    }
    return true;
  }
  std::vector<std::pair<std::string, bool>> regs, rvars, threads, blocks;
  for (int d = 0; d < 2; ++d) {
    if (!pure(d))
      continue;
    const std::string a = args[d];
    w.split(s, a, false, a + "_o", a + "_i", c.tile[d],
            s == 0 ? pure_tail(f, m.region[d].extent(), c.tile[d]) : guard);
    blocks.push_back({a + "_o", false});
    const int t = static_cast<int>(m.threads[d]);
    if (c.reg[d] > 1) {
      w.split(s, a + "_i", false, a + "_r", a + "_t", t, guard);
      regs.push_back({a + "_r", false});
      threads.push_back({a + "_t", false});
    } else {
      threads.push_back({a + "_i", false});
    }
  }
  std::string higher;
  for (int d = 2; d < f.dims; ++d) {
    if (!pure(d))
      continue;
    if (higher.empty()) {
      higher = args[d];
    } else {
      const std::string fused = args[d] + "_" + higher;
      w.fuse(s, higher, args[d], fused);
      higher = fused;
    }
  }
  if (!higher.empty())
    blocks.push_back({higher, false});
  for (const LoopDim &l : st.loops)
    if (l.is_rvar)
      rvars.push_back({l.var, true});
  std::vector<std::pair<std::string, bool>> order = regs;
  order.insert(order.end(), rvars.begin(), rvars.end());
  order.insert(order.end(), threads.begin(), threads.end());
  order.insert(order.end(), blocks.begin(), blocks.end());
  w.reorder(s, order);
  for (const auto &v : regs)
    w.loop_type(s, v.first, false, "unroll");
  for (const auto &v : threads)
    w.loop_type(s, v.first, false, "gpu_threads");
  for (const auto &v : blocks)
    w.loop_type(s, v.first, false, "gpu_blocks");
  return true;
}

// GPU targets: a Func staged in a device Root Func's kernel. Per block it is computed by the
// block's threads (its dimensions 0 and 1 split by the consumer's thread counts, the threads
// outermost so each thread strides over the rest) into shared memory; per thread it runs
// serially in the thread that needs it.
void schedule_staged(ScheduleWriter &w, const FuncNode &f, const FuncChoice &c,
                     const FuncModel &site) {
  if (c.at_level == kPerThread)
    return;
  w.store_in_shared();
  const auto &args = f.func.args();
  std::vector<std::pair<std::string, bool>> serial, threads;
  for (int d = 0; d < std::min(f.dims, 2); ++d) {
    const int t = static_cast<int>(site.threads[d]);
    if (t <= 1) {
      serial.push_back({args[d], false});
      continue;
    }
    w.split(0, args[d], false, args[d] + "_s", args[d] + "_t", t, TailStrategy::GuardWithIf);
    serial.push_back({args[d] + "_s", false});
    threads.push_back({args[d] + "_t", false});
  }
  for (int d = 2; d < f.dims; ++d)
    serial.push_back({args[d], false});
  if (threads.empty()) // a block-wide producer with one thread: computed by thread 0
    return;
  std::vector<std::pair<std::string, bool>> order = serial;
  order.insert(order.end(), threads.begin(), threads.end());
  w.reorder(0, order);
  for (const auto &v : threads)
    w.loop_type(0, v.first, false, "gpu_threads");
}

// The loop of a device Root Func its producers are staged at: the innermost block loop, or the
// innermost thread loop.
std::string device_site_var(const FuncNode &f, const FuncChoice &c, SiteLevel level) {
  const std::string a = f.func.args()[0];
  if (level == kPerTile)
    return a + "_o";
  return a + (c.reg[0] > 1 ? "_t" : "_i");
}

// A Root Func's pure definition: tiled (`split`, outermost first), the tile loops fused into
// its parallel loop, dimension 0 vectorized. Each dimension of `fixed` (fixed_dims) is split
// by its extent too, its tile loop outermost, so the sites its producers are computed at and
// the parallel loop are those of the unsplit schedule.
void schedule_root_pure(ScheduleWriter &w, const FuncNode &f, const FuncChoice &c,
                        const FuncModel &m, const std::vector<int> &split,
                        const std::vector<std::pair<int, int>> &fixed) {
  const auto &args = f.func.args();
  std::vector<bool> inner_split = m.split;
  for (const auto &[d, e] : fixed) {
    w.split(0, args[d], false, args[d] + "_o", args[d] + "_i", e, TailStrategy::ShiftInwards);
    inner_split[d] = true;
  }
  for (int d : split)
    w.split(0, args[d], false, args[d] + "_o", args[d] + "_i", c.tile[d],
            pure_tail(f, m.region[d].extent(), c.tile[d]));
  std::vector<std::pair<std::string, bool>> order;
  for (int d = 0; d < f.dims; ++d)
    order.push_back({inner_split[d] ? args[d] + "_i" : args[d], false});
  for (auto d = split.rbegin(); d != split.rend(); ++d)
    order.push_back({args[*d] + "_o", false});
  for (const auto &[d, e] : fixed)
    order.push_back({args[d] + "_o", false});
  if (!split.empty() || !fixed.empty())
    w.reorder(0, order);
  if (c.parallel_dims > 0) {
    std::string fused = args[split[0]] + "_o";
    if (c.parallel_dims > 1) {
      std::string current = fused;
      for (int i = 1; i < c.parallel_dims; ++i) {
        const std::string next = args[split[0]] + (i + 1 == c.parallel_dims ? "_par" : "_par" + std::to_string(i));
        w.fuse(0, args[split[i]] + "_o", current, next);
        current = next;
      }
      fused = current;
    }
    w.loop_type(0, fused, false, "parallel");
  }
  if (m.vector_width > 1 && f.dims > 0) {
    vectorize_pure(w, f, m, inner_split[0] ? args[0] + "_i" : args[0]);
    if (f.dims > 1)
      register_tile(w, f, c, m, inner_split[0] ? args[0] + "_i" : args[0],
                    inner_split[1] ? args[1] + "_i" : args[1]);
  }
}

// Applies one Func's decision on a GPU target.
void apply_device(ScheduleWriter &w, const PipelineAnalysis &dag, const State &state,
                  const LoopNestModel &model, const FuncNode &f) {
  const FuncChoice &c = state.choices[f.id];
  const FuncModel &m = model.func(f.id);
  if (c.placement == Placement::At) {
    const FuncNode &site = dag.funcs[c.at_func];
    w.compute_at(site.func, site.name,
                 device_site_var(site, state.choices[c.at_func], c.at_level));
    schedule_staged(w, f, c, model.func(c.at_func));
  } else {
    w.compute_root();
  }
  const bool device_root = c.placement == Placement::Root && c.gpu;
  for (size_t s = 0; s < f.stages.size(); ++s) {
    const bool on_device = device_root && schedule_device_stage(w, f, c, m, static_cast<int>(s));
    if (!on_device && s > 0)
      w.unscheduled(static_cast<int>(s));
  }
}

} // namespace

std::string apply_schedule(const PipelineAnalysis &dag, const State &state,
                           const std::vector<Function> &outputs, bool apply) {
  const auto funcs = pipeline_funcs(outputs);
  LoopNestModel model(dag, state);
  plugin_check(model.legal()) << "Hkfac: the chosen schedule is not legal";
  std::ostringstream src;
  ScheduleWriter w(apply, src);
  // Consumers first, so each compute_at names a Func already written.
  for (auto it = dag.funcs.rbegin(); it != dag.funcs.rend(); ++it) {
    const FuncNode &f = *it;
    const FuncChoice &c = state.choices[f.id];
    const FuncModel &m = model.func(f.id);
    if (c.placement == Placement::Inline)
      continue;
    plugin_check(c.placement != Placement::Undecided) << f.name << " was not decided";
    w.begin(f.func, funcs.at(f.name).second);
    if (f.is_extern) {
      w.compute_root();
      continue;
    }
    if (dag.gpu) {
      apply_device(w, dag, state, model, f);
      src << "\n";
      continue;
    }
    if (c.placement == Placement::At) {
      const FuncNode &site = dag.funcs[c.at_func];
      w.compute_at(site.func, site.name,
                   site_var(site, state.choices[c.at_func], model.func(c.at_func).region,
                            c.at_level));
      if (c.store_outer)
        w.store_at(site.func, site.name,
                   outer_var(site, state.choices[c.at_func], model.func(c.at_func).region));
      w.store_in_stack();
      if (m.vector_width > 1) {
        vectorize_pure(w, f, m, f.func.args()[0], c.store_outer);
        if (f.dims > 1)
          register_tile(w, f, c, m, f.func.args()[0], f.func.args()[1]);
      }
      schedule_updates(w, f, c, m);
      src << "\n";
      continue;
    }
    w.compute_root();
    const std::vector<int> split = split_dims_outermost_first(c, m.region);
    const std::vector<std::pair<int, int>> fixed = fixed_dims(dag, state, model, f, split);
    if (!fixed.empty()) {
      w.specialize_fixed(fixed);
      schedule_root_pure(w, f, c, m, split, fixed);
      w.general();
    }
    schedule_root_pure(w, f, c, m, split, {});
    schedule_updates(w, f, c, m);
    src << "\n";
  }
  return src.str();
}

std::string apply_fallback(const std::vector<Function> &outputs, bool gpu) {
  const auto funcs = pipeline_funcs(outputs);
  std::ostringstream src;
  ScheduleWriter w(true, src);
  for (const auto &kv : funcs) {
    const Function &f = kv.second.first;
    w.begin(f, kv.second.second);
    w.compute_root();
    if (!gpu || f.has_extern_definition() || f.args().empty())
      continue;
    const auto &args = f.args();
    w.split(0, args[0], false, args[0] + "_o", args[0] + "_i", 64, TailStrategy::GuardWithIf);
    w.loop_type(0, args[0] + "_i", false, "gpu_threads");
    w.loop_type(0, args[0] + "_o", false, "gpu_blocks");
    if (args.size() > 1)
      w.loop_type(0, args[1], false, "gpu_blocks");
    for (size_t u = 0; u < f.updates().size(); ++u)
      w.unscheduled(static_cast<int>(u) + 1);
  }
  return src.str();
}

ScheduleSnapshot::ScheduleSnapshot(const std::vector<Function> &outputs) {
  for (const auto &kv : pipeline_funcs(outputs)) {
    Function f = kv.second.first;
    Saved s{f, {}, {}, {}};
    std::map<FunctionPtr, FunctionPtr> copied;
    s.schedule = f.schedule().deep_copy(copied);
    s.stages.push_back(f.definition().schedule().get_copy());
    s.specializations = f.definition().specializations();
    for (const Definition &u : f.updates())
      s.stages.push_back(u.schedule().get_copy());
    saved_.push_back(std::move(s));
  }
}

void ScheduleSnapshot::restore() {
  for (Saved &s : saved_) {
    s.func.schedule() = s.schedule;
    s.func.definition().schedule() = s.stages[0];
    s.func.definition().specializations() = s.specializations;
    for (size_t i = 1; i < s.stages.size(); ++i)
      s.func.update(static_cast<int>(i) - 1).schedule() = s.stages[i];
  }
}

} // namespace hkfac::sched
