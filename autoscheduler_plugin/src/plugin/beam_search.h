// Coarse-to-fine beam search over schedules, scored by the cost model.
#pragma once

#include <vector>

#include "cost_model.h"
#include "parameters.h"
#include "pipeline_analysis.h"
#include "schedule_state.h"

namespace hkfac::sched {

struct SearchResult {
  std::vector<StatePtr> best; // complete schedules, cheapest first (up to max(1, top_k))
  long long states_evaluated = 0;
  long long duplicates_skipped = 0; // children that were a beam state's schedule again
  // Placements the allocation bound left out (0: the search without it takes the same path).
  long long oversized_dropped = 0;
  double seconds = 0;
  bool timed_out = false;
};

// Decides the Funcs one at a time from the outputs back to the inputs. Each step expands every
// state of the beam by the decisions search_space.h lists, scores the children in one batch and
// keeps the `beam_size` cheapest (HL_RANDOM_DROPOUT drops each other child with that chance;
// the cheapest always stays, so a fixed HL_SEED gives the same schedule every time). A child
// that is a kept state's schedule again (a register tile its loops cannot hold) takes no place.
// Pass 1 uses coarse tilings; each later pass uses every tiling but only the placements (inline,
// root, compute_at where) that the previous pass's best few complete schedules used. With a time
// limit the search finishes greedily once time is up, so it always returns a complete schedule.
//
// With HKFAC_ROLLOUT=1 the passes are run again comparing complete schedules (a rollout
// search; ProTuner argues for comparing complete schedules): the beam search's best schedule is
// the incumbent, every child is scored as the incumbent completes it (completion.h), the
// incumbent's own decision is always among the children, and each step's best completion
// becomes the incumbent when cheaper. The passes stop once a full-tiling pass leaves the
// incumbent unchanged. About twice the plain search's time; never a worse predicted cost.
SearchResult beam_search(const PipelineAnalysis &dag, CostModel &model, const Parameters &params);

} // namespace hkfac::sched
