// Building an update stage's loop nest (see update_nest.h).
#include "update_nest.h"

#include <algorithm>
#include <cmath>

namespace hkfac::sched {

namespace {

// Whether a tiled order splits the update's pure dimension `d` by the Func's tile: where the
// Func's tile splits it, except a scatter's dimension the tile does not divide (a histogram's
// channel loop split by 2 of 3 with GuardWithIf overflowed Halide 14's constant folding).
bool tiles_pure(const StageNode &s, const FuncChoice &c, const FuncModel &m, int d) {
  if (c.placement != Placement::Root || !m.split[d])
    return false;
  return !s.scatters || std::fmod(std::max(1.0, m.region[d].extent()), c.tile[d]) == 0;
}

// The extent one iteration of the stage's loops over dimension `d` covers: the Func's tile where
// a tiled order splits it, else the whole region.
double pure_extent(const StageNode &s, const FuncChoice &c, const FuncModel &m, UpdateOrder order,
                   int d) {
  if (order != kRVarsInner && tiles_pure(s, c, m, d))
    return c.tile[d];
  return std::max(1.0, m.region[d].extent());
}

bool vectorizes(const FuncNode &f, const StageNode &s, const FuncChoice &c, const FuncModel &m,
                UpdateOrder order) {
  return c.vectorize && f.dims > 0 && s.pure_arg_is_loop[0] && m.vector_width > 1 &&
         pure_extent(s, c, m, order, 0) >= m.vector_width;
}

UpdateLoop *find_loop(std::vector<UpdateLoop> &loops, const std::string &var) {
  for (UpdateLoop &l : loops)
    if (l.var == var)
      return &l;
  return nullptr;
}

// Splits `from`, the loop over dimension `var`, into the vector lanes (`var`_v) and, where the
// nest blocks columns, the n.vectors vectors side by side (`var`_u, unrolled); puts them at the
// front of `into`, lanes innermost. Returns the lanes' width times the vectors.
double split_lanes(UpdateNest &n, const std::string &var, const std::string &from, double vw,
                   std::vector<UpdateLoop> &into) {
  if (n.vectors > 1) {
    n.splits.push_back({from, from, var + "_w", false, vw * n.vectors});
    n.splits.push_back({var + "_w", var + "_u", var + "_v", false, vw});
    into.insert(into.begin(), {var + "_u", false, static_cast<double>(n.vectors), UpdateLoop::kUnrolled});
  } else {
    n.splits.push_back({from, from, var + "_v", false, vw});
  }
  into.insert(into.begin(), {var + "_v", false, vw, UpdateLoop::kVectorized});
  return vw * n.vectors;
}

UpdateNest inner_nest(const FuncNode &f, const StageNode &s, const FuncChoice &c,
                      const FuncModel &m) {
  UpdateNest n;
  for (const LoopDim &l : s.loops)
    n.loops.push_back({l.var, l.is_rvar,
                       l.is_rvar ? std::max(1.0, l.rextent) : std::max(1.0, m.region[l.pure_arg].extent())});
  const int lanes = update_lanes(f, s, c, m);
  const bool vectorized = lanes >= 0;
  n.blocked = lanes == 0 && blocks_rows(f, s, m, c);
  n.vectors = lanes == 0 && blocks_columns(f, s, m, c) ? c.update_vectors : 1;
  const std::string x = vectorized ? f.func.args()[lanes] : std::string();
  const std::string y = f.dims > 1 ? f.func.args()[1] : std::string();
  if (vectorized) {
    const int width = update_lane_width(f, lanes, m);
    UpdateLoop *lx = find_loop(n.loops, x);
    lx->extent = std::ceil(lx->extent / (width * n.vectors));
    split_lanes(n, x, x, width, n.loops);
    if (n.blocked) {
      // x_v (x_u), y_i innermost, the RVars around them, y_o where y was.
      n.splits.push_back({y, y + "_o", y + "_i", false, static_cast<double>(c.update_rows)});
      UpdateLoop *ly = find_loop(n.loops, y);
      ly->var = y + "_o";
      ly->extent = std::ceil(ly->extent / c.update_rows);
      n.loops.insert(n.loops.begin() + (n.vectors > 1 ? 2 : 1),
                     {y + "_i", false, static_cast<double>(c.update_rows), UpdateLoop::kUnrolled});
    }
    n.reordered = true;
  }
  const LoopDim &outer = s.loops.back();
  if (c.placement == Placement::Root && !outer.is_rvar && s.pure_arg_is_loop[outer.pure_arg] &&
      m.region[outer.pure_arg].extent() >= 2 && c.parallel_dims > 0 &&
      !(vectorized && outer.pure_arg == lanes)) {
    UpdateLoop *l = find_loop(n.loops, n.blocked && outer.var == y ? y + "_o" : outer.var);
    l->kind = UpdateLoop::kParallel;
    n.tasks = l->extent;
  } else if (c.placement == Placement::Root && !outer.is_rvar && vectorized &&
             outer.pure_arg == lanes && c.parallel_dims > 0 && m.tasks > 1) {
    // The outermost pure loop holds the lanes (a row sum's one loop): its vectors split into the
    // pure stage's tasks, which the features count for this stage, rather than running serial.
    UpdateLoop *l = find_loop(n.loops, x);
    const double vectors = l->extent;
    const double per_task = std::max(1.0, std::ceil(vectors / m.tasks));
    if (vectors / per_task >= 2) {
      n.splits.push_back({x, x + "_t", x + "_i", false, per_task});
      l->var = x + "_i";
      l->extent = per_task;
      n.tasks = std::ceil(vectors / per_task);
      n.loops.push_back({x + "_t", false, n.tasks, UpdateLoop::kParallel});
    }
  }
  if (!n.blocked && n.vectors == 1 && c.unroll_rvars && s.loops[0].is_rvar &&
      s.loops[0].constant_extent && s.loops[0].rextent <= 8)
    find_loop(n.loops, s.loops[0].var)->kind = UpdateLoop::kUnrolled;
  return n;
}

UpdateNest tiled_nest(const FuncNode &f, const StageNode &s, const FuncChoice &c,
                      const FuncModel &m, UpdateOrder order) {
  UpdateNest n;
  n.order = order;
  n.reordered = true;
  const bool vectorized = vectorizes(f, s, c, m, order);
  n.blocked = vectorized && blocks_rows(f, s, m, c);
  n.vectors = vectorized && blocks_columns(f, s, m, c) ? c.update_vectors : 1;
  std::vector<UpdateLoop> lanes, rvars_in, pure_in, rvars_out, tile_loops;
  for (const LoopDim &l : s.loops) {
    if (l.is_rvar)
      continue;
    const int d = l.pure_arg;
    std::string inner = l.var;
    double e = pure_extent(s, c, m, order, d);
    if (tiles_pure(s, c, m, d)) {
      n.splits.push_back({l.var, l.var + "_o", l.var + "_i", false, c.tile[d]});
      tile_loops.push_back({l.var + "_o", false, std::ceil(m.region[d].extent() / c.tile[d])});
      inner = l.var + "_i";
    }
    if (d == 0 && vectorized)
      e = std::ceil(e / split_lanes(n, l.var, inner, m.vector_width, lanes));
    if (d == 1 && n.blocked) {
      n.splits.push_back({inner, inner, l.var + "_r", false, static_cast<double>(c.update_rows)});
      lanes.push_back({l.var + "_r", false, static_cast<double>(c.update_rows),
                       UpdateLoop::kUnrolled});
      e = std::ceil(e / c.update_rows);
    }
    pure_in.push_back({inner, false, e});
  }
  const int split = order == kRVarSplit ? split_rvar(s, c.rvar_split) : -1;
  for (size_t i = 0; i < s.loops.size(); ++i) {
    const LoopDim &l = s.loops[i];
    if (!l.is_rvar)
      continue;
    const double e = std::max(1.0, l.rextent);
    if (static_cast<int>(i) == split) {
      n.splits.push_back({l.var, l.var + "_o", l.var + "_i", true, static_cast<double>(c.rvar_split)});
      rvars_in.push_back({l.var + "_i", true, static_cast<double>(c.rvar_split)});
      rvars_out.push_back({l.var + "_o", true, std::ceil(e / c.rvar_split)});
    } else {
      (order == kRVarSplit ? rvars_in : rvars_out).push_back({l.var, true, e});
    }
  }
  // A small constant RVar that stays innermost unrolls, as under kRVarsInner.
  if (!n.blocked && n.vectors == 1 && c.unroll_rvars && !rvars_in.empty() && s.loops[0].is_rvar &&
      rvars_in[0].var == s.loops[0].var && s.loops[0].constant_extent && s.loops[0].rextent <= 8)
    rvars_in[0].kind = UpdateLoop::kUnrolled;
  for (const UpdateLoop &l : tile_loops)
    n.tiles *= l.extent;
  if (c.placement == Placement::Root && c.parallel_dims > 0 && !tile_loops.empty() &&
      tile_loops.back().extent >= 2) {
    tile_loops.back().kind = UpdateLoop::kParallel;
    n.tasks = tile_loops.back().extent;
  }
  for (auto *part : {&lanes, &rvars_in, &pure_in, &rvars_out, &tile_loops})
    n.loops.insert(n.loops.end(), part->begin(), part->end());
  return n;
}

} // namespace

int update_lanes(const FuncNode &f, const StageNode &s, const FuncChoice &c, const FuncModel &m) {
  const UpdateOrder order = stage_update_order(s, c);
  const int d = c.update_lanes;
  // The native width, whether or not dimension 0 holds a vector (FuncModel::vector_width).
  if (c.vectorize && f.vector_width > 1 && d > 0 && d < f.dims && s.pure_arg_is_loop[d] &&
      order == kRVarsInner && c.update_rows == 1 && c.update_vectors == 1 &&
      std::max(1.0, m.region[d].extent()) >= f.vector_width)
    return d;
  return vectorizes(f, s, c, m, order) ? 0 : -1;
}

int update_lane_width(const FuncNode &f, int lanes, const FuncModel &m) {
  return lanes > 0 ? f.vector_width : m.vector_width;
}

bool reorderable(const StageNode &s) {
  bool rvar = false, pure = false;
  for (const LoopDim &l : s.loops)
    (l.is_rvar ? rvar : pure) = true;
  return s.index > 0 && rvar && pure;
}

UpdateOrder stage_update_order(const StageNode &s, const FuncChoice &c) {
  if (c.update_order == kRVarsInner || !reorderable(s))
    return kRVarsInner;
  if (c.update_order == kRVarSplit && split_rvar(s, c.rvar_split) < 0)
    return kRVarsOuter;
  return c.update_order;
}

int split_rvar(const StageNode &s, int factor) {
  int outermost = -1;
  for (size_t i = 0; i < s.loops.size(); ++i)
    if (s.loops[i].is_rvar)
      outermost = static_cast<int>(i);
  if (outermost < 0 || factor < 2)
    return -1;
  const LoopDim &l = s.loops[outermost];
  return l.constant_extent && l.rextent >= 2.0 * factor ? outermost : -1;
}

bool may_block_rows(const FuncNode &f, const StageNode &s) {
  if (s.index == 0 || f.dims < 2 || f.vector_width <= 1 || !s.pure_arg_is_loop[0] ||
      !s.pure_arg_is_loop[1])
    return false;
  for (const LoopDim &l : s.loops)
    if (l.is_rvar)
      return true;
  return false;
}

bool blocks_rows(const FuncNode &f, const StageNode &s, const FuncModel &m, const FuncChoice &c) {
  const int rows = c.update_rows;
  if (rows <= 1 || m.vector_width <= 1 || !may_block_rows(f, s))
    return false;
  const UpdateOrder order = stage_update_order(s, c);
  return order != kRVarsOuter && pure_extent(s, c, m, order, 0) >= m.vector_width &&
         pure_extent(s, c, m, order, 1) >= rows;
}

bool blocks_columns(const FuncNode &f, const StageNode &s, const FuncModel &m,
                    const FuncChoice &c) {
  const int vectors = c.update_vectors;
  if (vectors <= 1 || m.vector_width <= 1 || !may_block_rows(f, s))
    return false;
  const UpdateOrder order = stage_update_order(s, c);
  const double columns = pure_extent(s, c, m, order, 0), width = m.vector_width * vectors;
  if (order == kRVarsOuter || columns < width)
    return false;
  // Halide 14 miscompiles vectors side by side (unrolled, GuardWithIf) where they leave a tail
  // over a constant region, such as a Func's in a shifted-in tile: nearly every point wrong, and
  // beside blocked rows with a tail too, the stack allocation overrun (tests/halide_findings).
  // So they divide it.
  return std::fmod(columns, width) == 0;
}

UpdateNest update_nest(const FuncNode &f, const StageNode &s, const FuncChoice &c,
                       const FuncModel &m) {
  const UpdateOrder order = stage_update_order(s, c);
  return order == kRVarsInner ? inner_nest(f, s, c, m) : tiled_nest(f, s, c, m, order);
}

} // namespace hkfac::sched
