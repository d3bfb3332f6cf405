// Completing a partial schedule with the decisions of a complete one (the rollout search).
#pragma once

#include <memory>

#include "parameters.h"
#include "pipeline_analysis.h"
#include "schedule_state.h"

namespace hkfac::sched {

// The complete schedule that keeps `partial`'s decided Funcs and takes each undecided Func's
// decision from `incumbent`, a complete schedule. A partial schedule's cost leaves out what its
// decisions cost the producers still undecided (a consumer's tiling fixes where they can be
// computed); scored by its completion, a candidate is compared with the others as a whole
// schedule, the base policy of a rollout search. Where the incumbent's decision is illegal under
// the new consumers (its compute_at site is gone), that Func takes instead the first legal
// choice the search space offers of the same placement kind, else of compute_root, else any.
// nullptr where `partial` itself is illegal or no completion is found.
std::shared_ptr<State> complete_with(const PipelineAnalysis &dag, const State &partial,
                                     const State &incumbent, const Parameters &params,
                                     bool coarse);

} // namespace hkfac::sched
