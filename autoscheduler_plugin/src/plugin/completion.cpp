// Completing a partial schedule with an incumbent's decisions (see completion.h).
#include "completion.h"

#include "gpu_search_space.h"
#include "loop_nest_model.h"
#include "search_space.h"

namespace hkfac::sched {

namespace {

// Func `id`'s choices in `state` (whose Funcs after `id` are decided and legal), in the order
// a repair tries them: the incumbent's placement kind first, then compute_root, then the rest.
std::vector<FuncChoice> repair_order(const PipelineAnalysis &dag, const State &state, int id,
                                     const FuncChoice &wanted, const Parameters &params,
                                     bool coarse) {
  const LoopNestModel model(dag, state);
  std::vector<FuncChoice> options = target_func_choices(dag, state, model, id, params, coarse, {});
  const PlacementKey key = placement_key(wanted);
  std::vector<FuncChoice> ordered;
  for (int rank = 0; rank < 3; ++rank)
    for (const FuncChoice &c : options) {
      const int r = placement_key(c) == key ? 0 : c.placement == Placement::Root ? 1 : 2;
      if (r == rank)
        ordered.push_back(c);
    }
  return ordered;
}

} // namespace

std::shared_ptr<State> complete_with(const PipelineAnalysis &dag, const State &partial,
                                     const State &incumbent, const Parameters &params,
                                     bool coarse) {
  const int n = static_cast<int>(dag.funcs.size());
  const int last_undecided = n - partial.decided - 1;
  auto out = std::make_shared<State>(partial);
  for (int id = last_undecided; id >= 0; --id)
    out->choices[id] = incumbent.choices[id];
  out->decided = n;
  // Each repair fixes the Func the model first rejects; the model is rebuilt from the outputs,
  // so a repaired Func never fails again for the Funcs after it.
  int failing = -1;
  size_t attempt = 0;
  std::vector<FuncChoice> order;
  for (int tries = 0; tries < 4 * n + 16; ++tries) {
    const LoopNestModel model(dag, *out);
    if (model.legal())
      return out;
    const int bad = model.illegal_func();
    if (bad > last_undecided || bad < 0)
      return nullptr;
    if (bad != failing) {
      State before = *out;
      before.decided = n - bad - 1;
      order = repair_order(dag, before, bad, incumbent.choices[bad], params, coarse);
      failing = bad;
      attempt = 0;
    }
    if (attempt >= order.size())
      return nullptr;
    out->choices[bad] = order[attempt++];
  }
  return nullptr;
}

} // namespace hkfac::sched
