// The beam search driver (see beam_search.h).
#include "beam_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "completion.h"
#include "gpu_search_space.h"
#include "loop_nest_model.h"
#include "parallel_for.h"
#include "search_space.h"

namespace hkfac::sched {

namespace {

using Clock = std::chrono::steady_clock;

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

// Any placement (a pass or fallback that restricts none).
const std::set<PlacementKey> kAnything;

struct Pass {
  bool coarse = false;
  std::vector<std::set<PlacementKey>> allowed; // per Func; empty: anything
};

// A child of a beam state, and (rollout search) the complete schedule it was scored as.
struct Candidate {
  std::shared_ptr<State> state;
  std::shared_ptr<State> completion;
};

// One search over the pipeline: its passes share the model, the random stream, the deadline,
// the counts it reports and, for the rollout search, the best complete schedule seen.
class Search {
public:
  Search(const PipelineAnalysis &dag, CostModel &model, const Parameters &params,
         SearchResult &result, Clock::time_point deadline)
      : dag_(dag), model_(model), params_(params), result_(result), deadline_(deadline),
        rng_(params.seed * 0x9E3779B97F4A7C15ull + 1) {}

  // The coarse-to-fine passes (beam_search.h), their final beams appended to `all`. With an
  // incumbent they are rollout passes, and they end early once one leaves it unchanged.
  void run_passes(const char *label, std::vector<StatePtr> &all);

  // The rollout search's base schedule: children are scored as it completes them
  // (completion.h), and each step's best completion replaces it when cheaper, so a pass never
  // returns worse than the schedule it started from.
  StatePtr incumbent;
  // Each step's best completion, for the final ranking.
  std::vector<StatePtr> completions;

private:
  // Decides every Func, keeping `width` states per step; the final beam, cheapest first.
  std::vector<StatePtr> run_pass(const Pass &pass, size_t width);
  std::vector<Candidate> expand(const std::vector<StatePtr> &beam, int id, const Pass &pass,
                                const std::set<PlacementKey> &keys, const Parameters &space);

  const PipelineAnalysis &dag_;
  CostModel &model_;
  const Parameters &params_;
  SearchResult &result_;
  Clock::time_point deadline_;
  std::mt19937_64 rng_;
};

// The children of every beam state for Func `id`, scored (by their completions where there is
// an incumbent), cheapest first, the illegal ones dropped unless all are.
std::vector<Candidate> Search::expand(const std::vector<StatePtr> &beam, int id, const Pass &pass,
                                      const std::set<PlacementKey> &keys,
                                      const Parameters &space) {
  const int n = static_cast<int>(dag_.funcs.size());
  std::vector<Candidate> children;
  for (const StatePtr &s : beam) {
    LoopNestModel parent(dag_, *s);
    std::vector<FuncChoice> options = target_func_choices(dag_, *s, parent, id, space,
                                                          pass.coarse, keys,
                                                          &result_.oversized_dropped);
    if (options.empty() && !keys.empty())
      options = target_func_choices(dag_, *s, parent, id, space, pass.coarse, kAnything,
                                    &result_.oversized_dropped);
    // The incumbent's own decision, which a pass's tilings need not list (another pass's, or a
    // repair's): so the incumbent's path stays open and each pass refines it. The model rejects
    // it where this state's consumers make it illegal.
    if (incumbent &&
        std::find(options.begin(), options.end(), incumbent->choices[id]) == options.end())
      options.push_back(incumbent->choices[id]);
    for (FuncChoice &c : options) {
      auto child = std::make_shared<State>(*s);
      child->choices[id] = std::move(c);
      child->decided = n - id;
      children.push_back({std::move(child), nullptr});
    }
  }
  plugin_check(!children.empty()) << "Hkfac: no legal decision for " << dag_.funcs[id].name;
  bool scored = false;
  if (incumbent) {
    parallel_for(static_cast<int>(children.size()), params_.threads, [&](int i) {
      children[i].completion =
          complete_with(dag_, *children[i].state, *incumbent, space, pass.coarse);
    });
    std::vector<State *> raw;
    for (Candidate &c : children)
      if (c.completion)
        raw.push_back(c.completion.get());
    model_.evaluate(raw);
    for (Candidate &c : children) {
      c.state->cost = c.completion ? c.completion->cost : INFINITY;
      scored |= std::isfinite(c.state->cost);
    }
  }
  if (!scored) {
    // No incumbent yet, or none of the children completes: the decided part alone is scored.
    std::vector<State *> raw;
    for (Candidate &c : children) {
      c.completion = nullptr;
      raw.push_back(c.state.get());
    }
    model_.evaluate(raw);
  }
  std::stable_sort(children.begin(), children.end(), [](const Candidate &a, const Candidate &b) {
    return a.state->cost < b.state->cost;
  });
  while (children.size() > 1 && !std::isfinite(children.back().state->cost))
    children.pop_back();
  return children;
}

std::vector<StatePtr> Search::run_pass(const Pass &pass, size_t beam_width) {
  const int n = static_cast<int>(dag_.funcs.size());
  auto start = std::make_shared<State>();
  start->choices.resize(n);
  std::vector<StatePtr> beam{start};
  for (int id = n - 1; id >= 0; --id) {
    const bool out_of_time = params_.time_limit_s > 0 && Clock::now() > deadline_;
    result_.timed_out |= out_of_time;
    const size_t width = out_of_time ? 1 : beam_width;
    if (beam.size() > width)
      beam.resize(width);
    // A later pass tries only the placements its predecessor ranked best, and where none of
    // them is legal in this state it tries all.
    const auto &allowed = pass.allowed.empty() ? kAnything : pass.allowed[id];
    std::vector<Candidate> children = expand(beam, id, pass, allowed, params_);
    if (!std::isfinite(children.front().state->cost) && !allowed.empty())
      children = expand(beam, id, pass, kAnything, params_);
    if (!std::isfinite(children.front().state->cost) && !(params_.placements & kPlaceRoot)) {
      // HKFAC_PLACEMENTS left out compute_root, and nothing it allows is legal here.
      Parameters with_root = params_;
      with_root.placements |= kPlaceRoot;
      children = expand(beam, id, pass, kAnything, with_root);
    }
    plugin_check(std::isfinite(children.front().state->cost))
        << "Hkfac: every decision for " << dag_.funcs[id].name << " is illegal";
    if (const auto &best = children.front().completion) {
      completions.push_back(best);
      if (best->cost < incumbent->cost)
        incumbent = best;
    }
    // Dropout as Adams2019 means it: HL_RANDOM_DROPOUT is the percent chance that no candidate
    // is dropped over the whole search, so each step keeps each candidate, the best included,
    // with probability (p / 100)^(1 / Funcs); where all drop, the best stays. Greedy searches
    // then take the second or third best now and then, which is what data generation needs.
    beam.clear();
    const double keep = std::pow(params_.random_dropout / 100.0, 1.0 / std::max(1, n));
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    for (size_t i = 0; i < children.size() && beam.size() < width; ++i) {
      const State &child = *children[i].state;
      if (std::any_of(beam.begin(), beam.end(),
                      [&](const StatePtr &b) { return same_schedule(*b, child); })) {
        ++result_.duplicates_skipped;
        continue;
      }
      if (params_.random_dropout < 100 && unit(rng_) >= keep)
        continue;
      beam.push_back(children[i].state);
    }
    if (beam.empty())
      beam.push_back(children.front().state);
  }
  return beam;
}

void Search::run_passes(const char *label, std::vector<StatePtr> &all) {
  const int n = static_cast<int>(dag_.funcs.size());
  Pass pass;
  pass.coarse = params_.num_passes > 1;
  for (int p = 0; p < params_.num_passes; ++p) {
    const StatePtr incumbent_before = incumbent;
    std::vector<StatePtr> beam = run_pass(pass, static_cast<size_t>(params_.beam_size));
    all.insert(all.end(), beam.begin(), beam.end());
    std::ostringstream line;
    line << label << "pass " << p + 1 << " of " << params_.num_passes << ": best cost "
         << beam.front()->cost << ", " << model_.evaluated() << " states so far, "
         << result_.duplicates_skipped << " duplicates kept out of the beam";
    if (incumbent)
      line << ", incumbent cost " << incumbent->cost;
    log_line(params_, 1, line.str());
    if (result_.timed_out)
      break;
    // A full-tiling rollout pass that did not better its incumbent leaves the next pass where
    // it started: without dropout that pass would search the same states again.
    if (incumbent && !pass.coarse && incumbent == incumbent_before &&
        params_.random_dropout >= 100)
      break;
    // The next pass: full tilings over the placements of this pass's best schedules.
    pass.coarse = false;
    pass.allowed.assign(n, {});
    const size_t keep = std::max<size_t>(1, std::min<size_t>(beam.size(), 4));
    for (size_t i = 0; i < keep; ++i)
      for (int id = 0; id < n; ++id)
        pass.allowed[id].insert(placement_key(beam[i]->choices[id]));
    if (incumbent)
      for (int id = 0; id < n; ++id)
        pass.allowed[id].insert(placement_key(incumbent->choices[id]));
  }
}

} // namespace

SearchResult beam_search(const PipelineAnalysis &dag, CostModel &model, const Parameters &params) {
  SearchResult result;
  const auto t0 = Clock::now();
  const auto deadline =
      t0 + std::chrono::microseconds(static_cast<long long>(params.time_limit_s * 1e6));
  Search search(dag, model, params, result, deadline);
  std::vector<StatePtr> all;
  search.run_passes("", all);
  if (params.rollout && !result.timed_out) {
    // The rollout search starts from the beam search's best schedule, so it can only better it.
    search.incumbent = *std::min_element(
        all.begin(), all.end(), [](const StatePtr &a, const StatePtr &b) { return a->cost < b->cost; });
    search.run_passes("rollout ", all);
  }
  all.insert(all.end(), search.completions.begin(), search.completions.end());
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
