// Enumerating one Func's candidate decisions (see search_space.h).
#include "search_space.h"

#include <algorithm>
#include <cmath>

#include "update_nest.h"

namespace hkfac::sched {

namespace {

constexpr size_t kMaxTilings = 48;

} // namespace

bool computed_consumers(const PipelineAnalysis &dag, const State &state, int id,
                        std::vector<int> &out, int depth) {
  if (depth > 64)
    return false;
  for (int g : dag.funcs[id].consumers) {
    const FuncChoice &c = state.choices[g];
    if (c.placement == Placement::Inline) {
      if (!computed_consumers(dag, state, g, out, depth + 1))
        return false;
    } else if (c.placement == Placement::Undecided) {
      return false;
    } else if (std::find(out.begin(), out.end(), g) == out.end()) {
      out.push_back(g);
    }
  }
  return true;
}

namespace {

std::vector<double> factors(double extent, double base, bool coarse) {
  std::vector<double> f{extent};
  int k = 0;
  for (double t = base; t < extent; t *= 2, ++k)
    if (!coarse || k % 2 == 0)
      f.push_back(t);
  return f;
}

} // namespace

PlacementKey placement_key(const FuncChoice &c) {
  return {static_cast<int>(c.placement), c.at_func, static_cast<int>(c.at_level), c.store_outer};
}

namespace {

// Whether some update of `f` may be blocked by rows (blocks_rows decides per state).
bool has_blockable_update(const FuncNode &f) {
  for (const StageNode &s : f.stages)
    if (may_block_rows(f, s))
      return true;
  return false;
}

// Whether some update of `f` may change its loop order (update_nest.h).
bool has_reorderable_update(const FuncNode &f) {
  for (const StageNode &s : f.stages)
    if (reorderable(s))
      return true;
  return false;
}

// The factors kRVarSplit may split some update's outermost RVar by (none unless
// HKFAC_PLACEMENTS allows RVar splits): small enough to leave two splits.
std::vector<int> rvar_split_factors(const FuncNode &f, const Parameters &params) {
  std::vector<int> out;
  if (!(params.placements & kPlaceRSplit) || !has_reorderable_update(f))
    return out;
  for (int k : {16, 64}) {
    bool any = false;
    for (const StageNode &s : f.stages)
      any = any || (s.index > 0 && split_rvar(s, k) >= 0);
    if (any)
      out.push_back(k);
  }
  return out;
}

// The higher dimensions an update of `f` may vectorize instead of dimension 0 (none unless
// HKFAC_PLACEMENTS allows lanes): pure loops of some update that hold a vector at root.
std::vector<int> lane_dims(const FuncNode &f, const Parameters &params) {
  std::vector<int> out;
  if (!(params.placements & kPlaceLanes) || f.vector_width <= 1)
    return out;
  for (int d = 1; d < f.dims; ++d) {
    bool any = false;
    for (const StageNode &s : f.stages)
      any = any || (s.index > 0 && s.pure_arg_is_loop[d]);
    if (any && f.root_region[d].extent() >= f.vector_width)
      out.push_back(d);
  }
  return out;
}

std::vector<FuncChoice> unblocked_choices(const PipelineAnalysis &dag, const State &state,
                                          const LoopNestModel &model, int id,
                                          const Parameters &params, bool coarse,
                                          const std::set<PlacementKey> &allowed,
                                          long long *oversized_dropped);

} // namespace

std::vector<FuncChoice> func_choices(const PipelineAnalysis &dag, const State &state,
                                     const LoopNestModel &model, int id, const Parameters &params,
                                     bool coarse, const std::set<PlacementKey> &allowed,
                                     long long *oversized_dropped) {
  std::vector<FuncChoice> out =
      unblocked_choices(dag, state, model, id, params, coarse, allowed, oversized_dropped);
  const FuncNode &f = dag.funcs[id];
  if (f.is_extern)
    return out;
  // Register tiles (rows x vectors) where an update may be blocked: 8 accumulators, or 4 x 2
  // sharing both operands' loads.
  const std::vector<std::pair<int, int>> tiles =
      has_blockable_update(f) ? std::vector<std::pair<int, int>>{{4, 1}, {8, 1}, {4, 2}}
                              : std::vector<std::pair<int, int>>{};
  const std::vector<int> splits = rvar_split_factors(f, params);
  const std::vector<int> lanes = lane_dims(f, params);
  const bool reorder = (params.placements & kPlaceReorder) && has_reorderable_update(f);
  const size_t n = out.size();
  for (size_t i = 0; i < n; ++i) {
    if (out[i].placement == Placement::Inline)
      continue;
    FuncChoice c = out[i];
    for (int d : lanes) {
      c.update_lanes = d;
      out.push_back(c);
    }
    c.update_lanes = 0;
    for (auto [rows, vectors] : tiles) {
      c.update_rows = rows;
      c.update_vectors = vectors;
      out.push_back(c);
    }
    if (reorder) {
      c.update_rows = 1;
      c.update_vectors = 1;
      c.update_order = kRVarsOuter;
      out.push_back(c);
    }
    for (int k : splits) {
      c.update_order = kRVarSplit;
      c.rvar_split = k;
      c.update_rows = 1;
      c.update_vectors = 1;
      out.push_back(c);
      for (auto [rows, vectors] : tiles) {
        c.update_rows = rows;
        c.update_vectors = vectors;
        out.push_back(c);
      }
    }
  }
  return out;
}

namespace {

std::vector<FuncChoice> unblocked_choices(const PipelineAnalysis &dag, const State &state,
                                          const LoopNestModel &model, int id,
                                          const Parameters &params, bool coarse,
                                          const std::set<PlacementKey> &allowed,
                                          long long *oversized_dropped) {
  const FuncNode &f = dag.funcs[id];
  std::vector<FuncChoice> out;
  auto keep = [&](const FuncChoice &c) {
    return allowed.empty() || allowed.count(placement_key(c)) > 0;
  };
  bool unroll = false;
  for (const StageNode &s : f.stages)
    if (!s.loops.empty() && s.loops[0].is_rvar && s.loops[0].constant_extent &&
        s.loops[0].rextent <= 8)
      unroll = true;

  if (f.is_extern) {
    FuncChoice c;
    c.placement = Placement::Root;
    c.tile.assign(f.dims, 1e30);
    c.vectorize = false;
    out.push_back(c);
    return out;
  }
  if (f.can_inline && (params.placements & kPlaceInline)) {
    FuncChoice c;
    c.placement = Placement::Inline;
    if (keep(c))
      out.push_back(c);
  }

  // compute_at: a Func every computed consumer is, or is computed at: a Root Func's tile or task
  // loop, or the row loop of an At Func (a nest inside its tile). Placements whose producers
  // allocate more than params.iteration_bytes in each iteration of the site loop are kept only
  // where nothing else is legal: a program's heap grows and shrinks around every such buffer
  // (docs/RESULTS.md#measured-selection).
  std::vector<FuncChoice> oversized;
  std::vector<int> consumers;
  if (!f.must_be_root && computed_consumers(dag, state, id, consumers, 0) && !consumers.empty()) {
    std::vector<int> sites;
    for (size_t i = 0; i < consumers.size(); ++i) {
      const int g = consumers[i];
      const FuncChoice &c = state.choices[g];
      std::vector<int> mine;
      if (c.placement == Placement::Root || model.has_site(g, kPerTile))
        mine.push_back(g);
      if (c.placement == Placement::At)
        mine.push_back(c.at_func);
      if (i == 0) {
        sites = mine;
      } else {
        std::vector<int> both;
        for (int s : sites)
          if (std::find(mine.begin(), mine.end(), s) != mine.end())
            both.push_back(s);
        sites.swap(both);
      }
    }
    for (int site : sites) {
      // The level every consumer computed at the site shares (the model checks it too).
      int level = -1;
      bool ok = true;
      for (int g : consumers) {
        const FuncChoice &c = state.choices[g];
        if (c.placement == Placement::At && c.at_func == site) {
          ok = ok && (level < 0 || level == c.at_level);
          level = c.at_level;
        }
      }
      if (!ok)
        continue;
      const bool root_site = state.choices[site].placement == Placement::Root;
      for (SiteLevel l : {kPerTile, kPerTask}) {
        if ((level >= 0 && l != level) || !model.has_site(site, l))
          continue;
        FuncChoice c;
        c.placement = Placement::At;
        c.at_func = site;
        c.at_level = l;
        c.unroll_rvars = unroll;
        const unsigned kind = !root_site ? kPlaceNest : l == kPerTask ? kPlaceTask : kPlaceTile;
        auto place = [&](const FuncChoice &choice) {
          double points = 0;
          const double bytes = model.bytes_per_iteration(id, site, l, choice.store_outer, &points);
          const double limit =
              std::max(params.iteration_bytes, params.iteration_bytes_per_point * points);
          (bytes > limit ? oversized : out).push_back(choice);
        };
        if ((params.placements & kind) && keep(c))
          place(c);
        c.store_outer = true;
        if ((params.placements & kPlaceSlide) && root_site && l == kPerTile &&
            model.slides_at(site) && f.stages.size() == 1 && keep(c))
          place(c);
      }
    }
  }

  // compute_root with tilings (also where HKFAC_PLACEMENTS leaves nothing else).
  FuncChoice root;
  root.placement = Placement::Root;
  // A later pass that allows only oversized placements here gets none, and the search then
  // offers every placement (beam_search.cpp), compute_root among them.
  // Oversized placements left out of what is returned: the search without the bound can differ.
  const auto count_dropped = [&](const std::vector<FuncChoice> &returned) {
    if (oversized_dropped && &returned != &oversized)
      *oversized_dropped += static_cast<long long>(oversized.size());
  };
  if (!keep(root) || (!(params.placements & kPlaceRoot) && !out.empty())) {
    const std::vector<FuncChoice> &returned = out.empty() && allowed.empty() ? oversized : out;
    count_dropped(returned);
    return returned;
  }
  const Box &r = f.root_region;
  std::vector<std::vector<double>> per_dim(f.dims);
  for (int d = 0; d < f.dims; ++d) {
    const double e = std::max(1.0, r[d].extent());
    if (d == 0)
      per_dim[d] = factors(e, f.vector_width, coarse);
    else if (d == 1)
      per_dim[d] = factors(e, 1, coarse);
    else
      per_dim[d] = e > 8 ? std::vector<double>{e, 1, 8} : std::vector<double>{e, 1};
  }
  std::vector<std::vector<double>> tilings{{}};
  for (int d = 0; d < f.dims; ++d) {
    std::vector<std::vector<double>> next;
    for (const auto &t : tilings)
      for (double x : per_dim[d]) {
        auto u = t;
        u.push_back(x);
        next.push_back(u);
      }
    tilings.swap(next);
  }
  if (tilings.size() > kMaxTilings) {
    // An even spread over the product, always keeping the unsplit tiling (the first).
    std::vector<std::vector<double>> kept;
    const double stride = static_cast<double>(tilings.size()) / kMaxTilings;
    for (size_t i = 0; i < kMaxTilings; ++i)
      kept.push_back(tilings[static_cast<size_t>(i * stride)]);
    tilings.swap(kept);
  }
  std::vector<FuncChoice> roots;
  std::vector<double> tile_bytes;
  for (const auto &t : tilings) {
    FuncChoice c = root;
    c.tile = t;
    c.unroll_rvars = unroll;
    // Fuse the outermost tile loops until there are tasks for every core, twice over.
    const std::vector<int> split = split_dims_outermost_first(c, r);
    double tasks = 1;
    for (size_t i = 0; i < split.size(); ++i) {
      if (params.parallelism > 1 && tasks < 2.0 * params.parallelism) {
        tasks *= std::ceil(r[split[i]].extent() / t[split[i]]);
        c.parallel_dims = static_cast<int>(i) + 1;
      }
    }
    if (tasks < 2)
      c.parallel_dims = 0;
    double tile_points = 1;
    for (int d = 0; d < f.dims; ++d)
      tile_points *= std::min(t[d], std::max(1.0, r[d].extent()));
    roots.push_back(c);
    tile_bytes.push_back(tile_points * f.bytes_per_point);
  }
  const double smallest_tile = *std::min_element(tile_bytes.begin(), tile_bytes.end());
  for (size_t i = 0; i < roots.size(); ++i) {
    // A tile is worked on by one core: beyond its share of the last-level cache it streams
    // through memory, so such tilings are kept only when nothing smaller exists.
    if (tile_bytes[i] > params.last_level_cache / params.parallelism &&
        tile_bytes[i] > smallest_tile)
      continue;
    out.push_back(roots[i]);
  }
  count_dropped(out);
  return out;
}

} // namespace

} // namespace hkfac::sched
