// The beam search driver (see beam_search.h).
#include "beam_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "loop_nest_model.h"
#include "gpu_search_space.h"
#include "search_space.h"

namespace hkfac::sched {

namespace {

using Clock = std::chrono::steady_clock;

// The candidate decisions for one Func on the pipeline's target.
std::vector<FuncChoice> choices(const PipelineAnalysis &dag, const State &state,
                                const LoopNestModel &model, int id, const Parameters &params,
                                bool coarse, const std::set<PlacementKey> &allowed) {
  return params.gpu ? gpu_func_choices(dag, state, model, id, params, coarse, allowed)
                    : func_choices(dag, state, model, id, params, coarse, allowed);
}

// Whether two scored states are one schedule: their choices differ at most in register tiles or
// update lanes, and they cost the same. A tile or lanes the loops cannot hold are not applied
// (update_nest.h), so such choices emit the plain schedule and featurize identically; applied
// ones change the features.
bool same_schedule(const State &a, const State &b) {
  if (a.cost != b.cost || a.choices.size() != b.choices.size())
    return false;
  for (size_t i = 0; i < a.choices.size(); ++i) {
    FuncChoice x = a.choices[i];
    x.update_rows = b.choices[i].update_rows;
    x.update_vectors = b.choices[i].update_vectors;
    x.update_lanes = b.choices[i].update_lanes;
    if (!(x == b.choices[i]))
      return false;
  }
  return true;
}

struct Pass {
  bool coarse = false;
  std::vector<std::set<PlacementKey>> allowed; // per Func; empty: anything
};

std::vector<StatePtr> run_pass(const PipelineAnalysis &dag, CostModel &model,
                               const Parameters &params, const Pass &pass, std::mt19937_64 &rng,
                               Clock::time_point deadline, bool &timed_out,
                               long long &duplicates) {
  const int n = static_cast<int>(dag.funcs.size());
  auto start = std::make_shared<State>();
  start->choices.resize(n);
  std::vector<StatePtr> beam{start};
  static const std::set<PlacementKey> kAnything;
  for (int id = n - 1; id >= 0; --id) {
    const bool out_of_time = params.time_limit_s > 0 && Clock::now() > deadline;
    timed_out |= out_of_time;
    const size_t width = out_of_time ? 1 : static_cast<size_t>(params.beam_size);
    if (beam.size() > width)
      beam.resize(width);
    // The children of every beam state, scored; a later pass tries only the placements its
    // predecessor ranked best, and where none of them is legal in this state it tries all.
    const auto &allowed = pass.allowed.empty() ? kAnything : pass.allowed[id];
    auto expand = [&](const std::set<PlacementKey> &keys, const Parameters &space) {
      std::vector<std::shared_ptr<State>> children;
      for (const StatePtr &s : beam) {
        LoopNestModel parent(dag, *s);
        std::vector<FuncChoice> options =
            choices(dag, *s, parent, id, space, pass.coarse, keys);
        if (options.empty() && !keys.empty())
          options = choices(dag, *s, parent, id, space, pass.coarse, kAnything);
        for (FuncChoice &c : options) {
          auto child = std::make_shared<State>(*s);
          child->choices[id] = std::move(c);
          child->decided = n - id;
          children.push_back(std::move(child));
        }
      }
      plugin_check(!children.empty()) << "Hkfac: no legal decision for " << dag.funcs[id].name;
      std::vector<State *> raw;
      for (auto &c : children)
        raw.push_back(c.get());
      model.evaluate(raw);
      std::stable_sort(children.begin(), children.end(),
                       [](const auto &a, const auto &b) { return a->cost < b->cost; });
      while (children.size() > 1 && !std::isfinite(children.back()->cost))
        children.pop_back();
      return children;
    };
    std::vector<std::shared_ptr<State>> children = expand(allowed, params);
    if (!std::isfinite(children.front()->cost) && !allowed.empty())
      children = expand(kAnything, params);
    if (!std::isfinite(children.front()->cost) && !(params.placements & kPlaceRoot)) {
      // HKFAC_PLACEMENTS left out compute_root, and nothing it allows is legal here.
      Parameters with_root = params;
      with_root.placements |= kPlaceRoot;
      children = expand(kAnything, with_root);
    }
    plugin_check(std::isfinite(children.front()->cost))
        << "Hkfac: every decision for " << dag.funcs[id].name << " is illegal";
    // Dropout as Adams2019 means it: HL_RANDOM_DROPOUT is the percent chance that no candidate
    // is dropped over the whole search, so each step keeps each candidate, the best included,
    // with probability (p / 100)^(1 / Funcs); where all drop, the best stays. Greedy searches
    // then take the second or third best now and then, which is what data generation needs.
    beam.clear();
    const double keep = std::pow(params.random_dropout / 100.0, 1.0 / std::max(1, n));
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    for (size_t i = 0; i < children.size() && beam.size() < width; ++i) {
      if (std::any_of(beam.begin(), beam.end(),
                      [&](const StatePtr &b) { return same_schedule(*b, *children[i]); })) {
        ++duplicates;
        continue;
      }
      if (params.random_dropout < 100 && unit(rng) >= keep)
        continue;
      beam.push_back(children[i]);
    }
    if (beam.empty())
      beam.push_back(children.front());
  }
  return beam;
}

} // namespace

SearchResult beam_search(const PipelineAnalysis &dag, CostModel &model, const Parameters &params) {
  SearchResult result;
  const auto t0 = Clock::now();
  const auto deadline =
      t0 + std::chrono::microseconds(static_cast<long long>(params.time_limit_s * 1e6));
  std::mt19937_64 rng(params.seed * 0x9E3779B97F4A7C15ull + 1);
  const int n = static_cast<int>(dag.funcs.size());
  std::vector<StatePtr> all;
  Pass pass;
  pass.coarse = params.num_passes > 1;
  for (int p = 0; p < params.num_passes; ++p) {
    std::vector<StatePtr> beam = run_pass(dag, model, params, pass, rng, deadline,
                                          result.timed_out, result.duplicates_skipped);
    all.insert(all.end(), beam.begin(), beam.end());
    std::ostringstream line;
    line << "pass " << p + 1 << " of " << params.num_passes << ": best cost "
         << beam.front()->cost << ", " << model.evaluated() << " states so far, "
         << result.duplicates_skipped << " duplicates kept out of the beam";
    log_line(params, 1, line.str());
    if (result.timed_out)
      break;
    // The next pass: full tilings over the placements of this pass's best schedules.
    pass.coarse = false;
    pass.allowed.assign(n, {});
    const size_t keep = std::max<size_t>(1, std::min<size_t>(beam.size(), 4));
    for (size_t i = 0; i < keep; ++i)
      for (int id = 0; id < n; ++id)
        pass.allowed[id].insert(placement_key(beam[i]->choices[id]));
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const StatePtr &a, const StatePtr &b) { return a->cost < b->cost; });
  // Distinct schedules only.
  for (const StatePtr &s : all) {
    bool dup = false;
    for (const StatePtr &b : result.best)
      dup |= b->choices == s->choices || same_schedule(*b, *s);
    if (!dup)
      result.best.push_back(s);
    if (static_cast<int>(result.best.size()) >= std::max(1, params.top_k))
      break;
  }
  result.states_evaluated = model.evaluated();
  result.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return result;
}

} // namespace hkfac::sched
