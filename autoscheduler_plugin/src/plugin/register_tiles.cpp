// Register-tiled variants of a schedule (see register_tiles.h).
#include "register_tiles.h"

#include <algorithm>
#include <memory>

#include "loop_nest_model.h"

namespace hkfac::sched {

StatePtr register_tiled(const PipelineAnalysis &dag, const State &state, int rows) {
  if (dag.gpu || rows < 2)
    return nullptr;
  const LoopNestModel model(dag, state);
  if (!model.legal())
    return nullptr;
  auto tiled = std::make_shared<State>(state);
  bool any = false;
  for (const FuncNode &f : dag.funcs) {
    const FuncChoice &c = state.choices[f.id];
    const FuncModel &m = model.func(f.id);
    if (f.is_extern || f.dims < 2 || m.vector_width <= 1 || !c.vectorize || c.store_outer ||
        (c.placement != Placement::Root && c.placement != Placement::At) ||
        m.inner.size() < 2 || m.inner[1] < 2.0 * rows)
      continue;
    // An At Func is the row loop of the Funcs computed at it: its rows stay one at a time.
    const auto computed_here = [&](const FuncChoice &p) {
      return p.placement == Placement::At && p.at_func == f.id;
    };
    if (c.placement == Placement::At &&
        std::any_of(state.choices.begin(), state.choices.end(), computed_here))
      continue;
    tiled->choices[f.id].pure_rows = rows;
    any = true;
  }
  return any ? tiled : nullptr;
}

} // namespace hkfac::sched
