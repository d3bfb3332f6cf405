// Choosing diverse candidates for measured selection (see candidates.h).
#include "candidates.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "beam_search.h"
#include "loop_nest_model.h"
#include "search_space.h"

namespace hkfac::sched {

namespace {

double stage_ops(const StageNode &s) {
  double ops = 0;
  for (int i = kTypesInUse; i < kTypesInUse + kOpKinds * kFeatureTypes; ++i)
    ops += s.features[i];
  return std::max(1.0, ops);
}

// A candidate's shape where it matters: the placement of each costly Func, and for those at root
// (the outputs among them) the class of their tiles along dimensions 0 and 1 — whole, wide
// (128 or more), medium (32 to 127) or narrow — so that strips over the whole width and
// squarer tiles count as different shapes (a transposed read wants the second).
using Shape = std::vector<std::tuple<PlacementKey, int, int>>;

int tile_class(const FuncChoice &c, const Box &region, size_t d) {
  if (d >= c.tile.size() || d >= region.size() || c.tile[d] >= region[d].extent())
    return 0;
  return c.tile[d] >= 128 ? 1 : c.tile[d] >= 32 ? 2 : 3;
}

Shape shape_of(const PipelineAnalysis &dag, const State &s, const std::vector<int> &funcs) {
  Shape shape;
  for (int f : funcs) {
    const FuncChoice &c = s.choices[f];
    const bool root = c.placement == Placement::Root;
    const Box &r = dag.funcs[f].root_region;
    shape.emplace_back(placement_key(c), root ? tile_class(c, r, 0) : -1,
                       root ? tile_class(c, r, 1) : -1);
  }
  return shape;
}

// The best schedules of a search held to `placements` (plus compute_root where nothing else is
// legal, as the search itself does): a small beam, for their shape, not their last percent,
// whatever the main search's beam (a greedy one leaves a pool of one schedule per pass).
std::vector<StatePtr> restricted_search(const PipelineAnalysis &dag, CostModel &model,
                                        const Parameters &params, unsigned placements) {
  Parameters p = params;
  p.placements = placements | (params.placements & (kPlaceReorder | kPlaceRSplit | kPlaceLanes));
  p.beam_size = 8;
  p.num_passes = 2;
  p.top_k = 4;
  p.rollout = false;
  p.time_limit_s = 0;
  return beam_search(dag, model, p).best;
}

} // namespace

double largest_iteration_bytes(const PipelineAnalysis &dag, const State &state) {
  const LoopNestModel m(dag, state);
  std::map<std::pair<int, int>, double> per_site; // (site, level): bytes
  double largest = 0;
  for (const FuncNode &f : dag.funcs) {
    const FuncChoice &c = state.choices[f.id];
    if (c.placement != Placement::At)
      continue;
    double points = 1;
    for (const auto &d : m.func(f.id).storage)
      points *= std::max(1.0, d.extent());
    double &bytes = per_site[{c.at_func, static_cast<int>(c.at_level)}];
    bytes += points * f.bytes_per_point;
    largest = std::max(largest, bytes);
  }
  return largest;
}

StatePtr cache_sized_schedule(const PipelineAnalysis &dag, CostModel &model,
                              const Parameters &params, double l1_bytes) {
  Parameters p = params;
  p.iteration_bytes = l1_bytes;
  p.iteration_bytes_per_point = 0;
  p.top_k = 1;
  p.rollout = false;
  p.time_limit_s = 0;
  const SearchResult r = beam_search(dag, model, p);
  return r.best.empty() ? nullptr : r.best.front();
}

std::vector<int> costliest_funcs(const PipelineAnalysis &dag, int k) {
  std::vector<std::pair<double, int>> work;
  for (const FuncNode &f : dag.funcs) {
    if (f.is_output)
      continue;
    double w = 0;
    for (const StageNode &s : f.stages)
      w += s.points_minimum * stage_ops(s);
    work.push_back({w, f.id});
  }
  std::sort(work.begin(), work.end(), [](const auto &a, const auto &b) {
    return a.first != b.first ? a.first > b.first : a.second > b.second;
  });
  std::vector<int> out;
  for (int i = 0; i < k && i < static_cast<int>(work.size()); ++i)
    out.push_back(work[i].second);
  return out;
}

std::vector<Candidate> diverse_candidates(const PipelineAnalysis &dag, CostModel &model,
                                          const Parameters &params,
                                          const std::vector<StatePtr> &search_pool, int count,
                                          const std::vector<Candidate> &second_opinions) {
  std::vector<Candidate> pool;
  for (const StatePtr &s : search_pool)
    pool.push_back({s, "beam"});
  if (!params.gpu) {
    const std::pair<unsigned, const char *> kinds[] = {
        {kPlaceRoot | kPlaceInline, "root and inline"},
        {kPlaceRoot | kPlaceInline | kPlaceTile, "per tile"},
        {kPlaceRoot | kPlaceInline | kPlaceTask, "per task"},
    };
    for (const auto &[placements, label] : kinds)
      for (const StatePtr &s : restricted_search(dag, model, params, placements))
        pool.push_back({s, label});
  }
  std::vector<Candidate> out;
  if (pool.empty() || count <= 0)
    return out;
  // The search's pick first, then the plain schedule, then shapes of the costly Funcs not
  // yet seen (cheapest first), then any placement not yet seen.
  auto by_cost = [](const Candidate &a, const Candidate &b) {
    return a.state->cost < b.state->cost;
  };
  // The main search's pick stays first whatever the held searches predict: it is the schedule
  // the model alone would apply, the one measurement has to beat.
  std::stable_sort(pool.begin() + (search_pool.empty() ? 0 : 1), pool.end(), by_cost);
  std::vector<bool> taken(pool.size(), false);
  auto take = [&](size_t i) {
    taken[i] = true;
    out.push_back(pool[i]);
  };
  auto full_shape = [](const State &s) { return s.structure_hash(); };
  take(0);
  // A second opinion that places the Funcs as an earlier candidate but tiles them otherwise is
  // still another schedule (smaller pieces of the same placements are the cache-sized one's point).
  for (const Candidate &c : second_opinions) {
    bool seen = false;
    for (const Candidate &o : out)
      seen = seen || o.state->choices == c.state->choices;
    if (!seen && static_cast<int>(out.size()) < count)
      out.push_back(c);
  }
  for (size_t i = 0; i < pool.size() && static_cast<int>(out.size()) < count; ++i)
    if (!taken[i] && pool[i].origin == std::string("root and inline") &&
        full_shape(*pool[i].state) != full_shape(*out[0].state)) {
      take(i);
      break;
    }
  std::vector<int> costly = costliest_funcs(dag, 3);
  for (const FuncNode &f : dag.funcs)
    if (f.is_output)
      costly.push_back(f.id);
  std::set<Shape> shapes;
  std::set<uint64_t> structures;
  for (const Candidate &c : out) {
    shapes.insert(shape_of(dag, *c.state, costly));
    structures.insert(full_shape(*c.state));
  }
  for (size_t i = 0; i < pool.size() && static_cast<int>(out.size()) < count; ++i)
    if (!taken[i] && shapes.insert(shape_of(dag, *pool[i].state, costly)).second) {
      structures.insert(full_shape(*pool[i].state));
      take(i);
    }
  for (size_t i = 0; i < pool.size() && static_cast<int>(out.size()) < count; ++i)
    if (!taken[i] && structures.insert(full_shape(*pool[i].state)).second)
      take(i);
  // Where few placements are legal (every Func at root or inlined, say), schedules share their
  // structure and differ in tilings: those are candidates too, rather than timing one schedule.
  for (size_t i = 0; i < pool.size() && static_cast<int>(out.size()) < count; ++i) {
    bool seen = taken[i];
    for (size_t o = 0; o < out.size() && !seen; ++o)
      seen = out[o].state->choices == pool[i].state->choices;
    if (!seen)
      take(i);
  }
  return out;
}

} // namespace hkfac::sched
