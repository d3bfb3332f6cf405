// Evaluating a schedule into loop counts and regions (see loop_nest_model.h).
#include "loop_nest_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace hkfac::sched {

namespace {
// Bounds on recompute, as multiples of the points a Func has at root (Adams2019 prunes compute_at
// at 8x and deep inlining similarly).
constexpr double kMaxInlineRecompute = 32;
constexpr double kMaxAtRecompute = 8;
constexpr double kMaxInlineFanout = 32;
} // namespace

bool shifts_inwards(const FuncNode &f, double extent, double factor) {
  return !f.reads_input && extent >= factor;
}

double gpu_threads_along(const FuncChoice &c, int d, double extent) {
  return std::max(1.0, std::min<double>(c.threads[d], std::ceil(extent / c.reg[d])));
}

std::vector<int> split_dims_outermost_first(const FuncChoice &c, const Box &region) {
  std::vector<int> dims;
  for (int d = static_cast<int>(region.size()) - 1; d >= 0; --d)
    if (d < static_cast<int>(c.tile.size()) && c.tile[d] < region[d].extent())
      dims.push_back(d);
  return dims;
}

LoopNestModel::LoopNestModel(const PipelineAnalysis &dag, const State &state)
    : dag_(dag), state_(state), funcs_(dag.funcs.size()) {
  const int n = static_cast<int>(dag.funcs.size());
  for (int id = n - 1; id >= n - state.decided && legal_; --id) {
    model_func(id);
    if (!legal_)
      illegal_func_ = id;
  }
}

bool LoopNestModel::has_site(int consumer, SiteLevel level) const {
  const FuncChoice &c = state_.choices[consumer];
  if (!funcs_[consumer].computed)
    return false;
  if (dag_.gpu) {
    // Producers are staged at a device Root Func's block loop (kPerTile) or, where each thread
    // computes one point (no register tile), at its thread loop; nothing nests in At Funcs.
    if (c.placement != Placement::Root || !c.gpu)
      return false;
    if (level == kPerThread)
      return c.reg[0] == 1 && c.reg[1] == 1;
    return level == kPerTile && !split_dims_outermost_first(c, funcs_[consumer].region).empty();
  }
  if (level == kPerThread)
    return false;
  if (c.placement == Placement::At) {
    // An At Func's row loop (its dimension 1 and above fixed), where it has rows and no update
    // that would run outside that loop, and is not slid: Halide 14 warms a slid Func up before
    // the tile loop's start, and what was nested in it then read an input out of bounds.
    const FuncNode &f = dag_.funcs[consumer];
    return level == kPerTile && f.dims >= 2 && f.stages.size() == 1 && !c.store_outer &&
           funcs_[consumer].region[1].extent() > 1;
  }
  if (c.placement != Placement::Root)
    return false;
  const std::vector<int> split = split_dims_outermost_first(c, funcs_[consumer].region);
  if (split.empty())
    return false;
  if (level == kPerTask)
    return c.parallel_dims > 0 && c.parallel_dims < static_cast<int>(split.size());
  return true;
}

bool LoopNestModel::slides_at(int consumer) const {
  const FuncChoice &c = state_.choices[consumer];
  if (c.placement != Placement::Root || !funcs_[consumer].computed)
    return false;
  const std::vector<int> split = split_dims_outermost_first(c, funcs_[consumer].region);
  return static_cast<int>(split.size()) > c.parallel_dims;
}

Box LoopNestModel::tiles_box(int consumer, size_t count) const {
  const FuncChoice &c = state_.choices[consumer];
  const FuncModel &m = funcs_[consumer];
  Box b = m.region;
  const std::vector<int> split = split_dims_outermost_first(c, m.region);
  for (size_t i = 0; i < count && i < split.size(); ++i)
    b[split[i]].max = b[split[i]].min + c.tile[split[i]] - 1;
  return b;
}

Box LoopNestModel::outer_box(int consumer) const {
  const FuncChoice &c = state_.choices[consumer];
  const size_t loops = split_dims_outermost_first(c, funcs_[consumer].region).size();
  return tiles_box(consumer, loops > 0 ? loops - 1 : 0);
}

Box LoopNestModel::site_box(int consumer, SiteLevel level) const {
  const FuncChoice &c = state_.choices[consumer];
  if (level == kPerThread) { // one point of a block's tile
    Box b = tiles_box(consumer, SIZE_MAX);
    for (Span &sp : b)
      sp.max = sp.min;
    return b;
  }
  if (c.placement == Placement::At) {
    Box b = funcs_[consumer].region;
    for (size_t d = 1; d < b.size(); ++d)
      b[d].max = b[d].min;
    return b;
  }
  // Inside one iteration of the site loop, the split dimensions at or outside it cover one
  // tile; the rest run whole.
  return tiles_box(consumer, level == kPerTask ? static_cast<size_t>(c.parallel_dims) : SIZE_MAX);
}

bool LoopNestModel::need_at_site(int producer, int site_func, SiteLevel level, Box &need, int depth,
                                 bool outer) const {
  if (depth > 64)
    return false;
  const FuncNode &p = dag_.funcs[producer];
  for (int g : p.consumers) {
    const FuncNode &gn = dag_.funcs[g];
    const FuncChoice &gc = state_.choices[g];
    Box gbox;
    if (g == site_func) {
      if (gn.stages.size() > 1)
        return false; // an update of the site Func would run outside the site loop
      gbox = outer ? outer_box(site_func) : site_box(site_func, level);
    } else if (outer && gc.placement == Placement::At && gc.at_func == site_func) {
      gbox = funcs_[g].outer_region;
    } else if (gc.placement == Placement::At && gc.at_func == site_func && gc.at_level == level) {
      gbox = funcs_[g].region;
    } else if (gc.placement == Placement::Inline) {
      if (!need_at_site(g, site_func, level, gbox, depth + 1, outer))
        return false;
    } else {
      return false;
    }
    for (const StageNode &s : gn.stages) {
      const std::vector<double> values = s.box_values(gbox);
      for (const Access &a : s.accesses)
        if (a.producer == producer)
          box_union_into(need, PipelineAnalysis::required(a, values, p.root_region));
    }
  }
  return !need.empty();
}

double LoopNestModel::bytes_per_iteration(int producer, int site, SiteLevel level,
                                          bool store_outer, double *site_points) const {
  Box need;
  if (!has_site(site, level) || !need_at_site(producer, site, level, need, 0, store_outer))
    return -1;
  if (site_points)
    *site_points = box_points(site_box(site, level));
  double bytes = box_points(need) * dag_.funcs[producer].bytes_per_point;
  for (const FuncNode &g : dag_.funcs) {
    const FuncChoice &c = state_.choices[g.id];
    if (g.id != producer && funcs_[g.id].computed && c.placement == Placement::At &&
        c.at_func == site && c.at_level == level)
      bytes += box_points(funcs_[g.id].storage) * g.bytes_per_point;
  }
  return bytes;
}

bool LoopNestModel::reads_strided_lanes(int id, int depth) const {
  if (depth > 64)
    return false;
  for (const Access &a : dag_.funcs[id].stages[0].accesses) {
    if (a.producer < 0)
      continue;
    if (a.lane_strided_calls > 0)
      return true;
    if (state_.choices[a.producer].placement == Placement::Inline &&
        reads_strided_lanes(a.producer, depth + 1))
      return true;
  }
  return false;
}

bool LoopNestModel::model_device(int id) {
  const FuncChoice &c = state_.choices[id];
  FuncModel &m = funcs_[id];
  const double bytes = box_points(m.region) * dag_.funcs[id].bytes_per_point;
  if (c.placement == Placement::Root && c.gpu) {
    m.on_device = true;
    m.blocks = m.tiles;
    for (int d = 0; d < 2 && d < static_cast<int>(m.inner.size()); ++d)
      m.threads[d] = gpu_threads_along(c, d, m.inner[d]);
    return true;
  }
  if (c.placement != Placement::At)
    return true;
  // Staged in a kernel: per block in shared memory, whose share per block is limited, or per
  // thread, where it must stay small enough for registers and local memory.
  FuncModel &site = funcs_[c.at_func];
  m.on_device = true;
  m.blocks = site.blocks;
  m.threads = site.threads;
  if (c.at_level == kPerThread) {
    m.threads = {1, 1};
    if (bytes > dag_.gpu_thread_bytes)
      legal_ = false;
  } else {
    site.staged_bytes += bytes;
    if (site.staged_bytes > dag_.gpu_shared_bytes || dag_.funcs[id].stages.size() > 1)
      legal_ = false;
  }
  return legal_;
}

void LoopNestModel::model_func(int id) {
  const FuncNode &f = dag_.funcs[id];
  const FuncChoice &c = state_.choices[id];
  FuncModel &m = funcs_[id];
  if (c.placement == Placement::Inline) {
    for (int g : f.consumers) {
      const FuncModel &gm = funcs_[g];
      const std::vector<StageNode> &stages = dag_.funcs[g].stages;
      for (const StageNode &s : stages) {
        const double calls = s.calls_to(id);
        if (calls == 0)
          continue;
        const double copies = s.copies_of(id);
        const double points = gm.points_total * s.runs_per_point;
        m.inlined_calls += calls * (gm.computed ? points : gm.inlined_calls);
        m.inlined_work += copies * (gm.computed ? points : gm.inlined_work);
        m.inline_fanout += calls * (gm.computed ? 1.0 : gm.inline_fanout);
      }
    }
    // Each call site copies the Func's expression into its consumer's: chains of inlined
    // stencils or pyramid levels multiply, and so does LLVM's compile time.
    if (m.inline_fanout > kMaxInlineFanout)
      legal_ = false;
    // Inlining that recomputes a Func many times over grows the consumer's expression
    // exponentially (pyramids, stencils of stencils) and its compile time with it.
    if (m.inlined_calls > kMaxInlineRecompute * std::max(1.0, box_points(f.root_region)))
      legal_ = false;
    return;
  }
  m.computed = true;
  double storages = 1;
  if (c.placement == Placement::Root) {
    m.region = f.root_region;
    m.realizations = 1;
  } else {
    Box need;
    if (!has_site(c.at_func, c.at_level) ||
        !need_at_site(id, c.at_func, c.at_level, need, 0, false) ||
        (c.store_outer && (c.at_level != kPerTile || !slides_at(c.at_func)))) {
      legal_ = false;
      return;
    }
    m.region = need;
    m.outer_region = need;
    if (c.at_level == kPerTile && state_.choices[c.at_func].placement == Placement::Root) {
      Box outer;
      if (need_at_site(id, c.at_func, c.at_level, outer, 0, true))
        m.outer_region = outer;
    }
    const FuncModel &site = funcs_[c.at_func];
    const FuncChoice &sc = state_.choices[c.at_func];
    double iterations = 1, outer_iterations = 1;
    if (sc.placement == Placement::At) // one realization per row of the site's realization
      for (size_t d = 1; d < site.region.size(); ++d)
        iterations *= std::max(1.0, site.region[d].extent());
    const std::vector<int> split = split_dims_outermost_first(sc, site.region);
    const size_t count =
        c.at_level == kPerTask ? static_cast<size_t>(sc.parallel_dims) : split.size();
    for (size_t i = 0; i < count && i < split.size(); ++i) {
      const double e = std::ceil(site.region[split[i]].extent() / sc.tile[split[i]]);
      iterations *= e;
      if (i + 1 < split.size())
        outer_iterations *= e;
    }
    if (c.at_level == kPerThread)
      iterations *= site.threads[0] * site.threads[1];
    m.realizations = site.realizations * iterations;
    storages = c.store_outer ? site.realizations * outer_iterations : m.realizations;
    m.outer_parallelism = site.outer_parallelism * site.tasks;
  }
  m.storage = c.store_outer ? m.outer_region : m.region;
  m.storages = storages;
  m.inner.resize(f.dims);
  m.split.assign(f.dims, false);
  for (int d = 0; d < f.dims; ++d)
    m.inner[d] = std::max(1.0, m.region[d].extent());
  if (c.placement == Placement::Root) {
    const std::vector<int> split = split_dims_outermost_first(c, m.region);
    for (size_t i = 0; i < split.size(); ++i) {
      const int d = split[i];
      const double outer = std::ceil(m.region[d].extent() / c.tile[d]);
      m.split[d] = true;
      m.inner[d] = c.tile[d];
      m.tiles *= outer;
      if (static_cast<int>(i) < c.parallel_dims)
        m.tasks *= outer;
    }
  }
  m.strided_lanes = f.dims > 0 && reads_strided_lanes(id);
  if (c.vectorize && f.dims > 0 && m.inner[0] >= (m.strided_lanes ? 2 : 1) * f.vector_width)
    m.vector_width = f.vector_width;
  if (dag_.gpu && !model_device(id))
    return;
  // Along each dimension: whole tiles, and whole vectors inside them, where splits shift inwards.
  // Stored outer, the tiles of one iteration of the loop around them together compute its outer
  // region once (the sliding window), counted per realization as the average.
  m.points_computed = 1;
  for (int d = 0; d < f.dims; ++d) {
    const double e = std::max(1.0, m.storage[d].extent());
    double inner = m.inner[d], computed = e;
    if (c.store_outer)
      inner = e; // and its vectors are guarded (apply_schedule)
    // A guarded strided tail (FuncModel::strided_lanes) is counted as the whole vector it
    // replaces: Halide scalarizes it, which costs about as much.
    else if (d == 0 && m.vector_width > 1 &&
             (m.strided_lanes || shifts_inwards(f, inner, m.vector_width)))
      inner = std::ceil(inner / m.vector_width) * m.vector_width;
    if (m.split[d])
      computed = shifts_inwards(f, e, c.tile[d]) ? std::ceil(e / c.tile[d]) * inner : e;
    else if (d == 0)
      computed = inner;
    m.points_computed *= computed;
  }
  m.points_total = m.points_computed * storages;
  m.points_computed = m.points_total / std::max(1.0, m.realizations);
  // Tiles whose halos recompute most of the Func again are never worth it.
  if (c.placement == Placement::At &&
      m.points_total > kMaxAtRecompute * std::max(1.0, box_points(f.root_region)))
    legal_ = false;
  // Nor are updates redone whole per tile: an RDom that does not shrink with the region (a scan
  // down a column, an IIR filter) runs in full in every realization.
  if (c.placement == Placement::At) {
    for (const StageNode &s : f.stages) {
      if (s.index == 0)
        continue;
      double points = m.realizations;
      for (const LoopDim &l : s.loops)
        points *=
            l.is_rvar ? std::max(1.0, l.rextent) : std::max(1.0, m.region[l.pure_arg].extent());
      if (points > kMaxAtRecompute * std::max(1.0, s.points_minimum))
        legal_ = false;
    }
  }
}

} // namespace hkfac::sched
