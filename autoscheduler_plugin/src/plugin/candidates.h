// The diverse complete schedules that measured selection times.
#pragma once

#include <string>
#include <vector>

#include "cost_model.h"
#include "parameters.h"
#include "pipeline_analysis.h"
#include "schedule_state.h"

namespace hkfac::sched {

struct Candidate {
  StatePtr state;
  std::string origin; // how it was found, for the log: "beam", "root and inline", ...
};

// Up to `count` complete schedules for timing, the search's pick (search_pool[0]) first. Timing
// K near-copies of one beam state would measure the model's one guess K times, so the others
// differ where it matters: each places the costliest Funcs (the most points times operations at
// root) differently from every candidate before it, or tiles them or the outputs in another
// shape (strips or squarer tiles), where the pool allows; then any other placement; then, where
// the pool holds fewer placements than `count`, other tilings of the ones taken.
// The pool is the beam search's distinct schedules plus the best schedules of searches held to
// fewer kinds of placement — every Func inlined or at root (the plain, robust schedule that
// Halide users write first), then compute_at per tile or per parallel task alone — which the
// model ranks below its favourite but which bound how wrong that favourite can be.
// `second_opinions` (another model's picks: the weights file's own where a refit on this
// machine's timings steers the search) follow the pick, where they differ from it.
std::vector<Candidate> diverse_candidates(const PipelineAnalysis &dag, CostModel &model,
                                          const Parameters &params,
                                          const std::vector<StatePtr> &search_pool, int count,
                                          const std::vector<Candidate> &second_opinions = {});

// The best schedule of a search that lets no Func computed inside another's loops allocate more
// than `l1_bytes` in one iteration (params.iteration_bytes otherwise allows up to 128 KiB, or 8
// bytes per point of the iteration): producers in pieces that stay in a core's L1 data cache
// while their consumer reads them, as hand-written and Adams2019's schedules keep them. The
// model rates such small pieces below large strips it was rarely shown running slow (a 1 MB
// reduction buffer per parallel task: a 63-tap filter over 2^18 samples ran 1.6x slower so), so
// measured selection times this schedule beside its pick. The main search's beam and passes: the
// held searches' small beam ended with every Func at root there.
constexpr double kCacheSizedBytes = 32 * 1024;
StatePtr cache_sized_schedule(const PipelineAnalysis &dag, CostModel &model,
                              const Parameters &params, double l1_bytes = kCacheSizedBytes);

// The most bytes that the Funcs computed inside one loop of another allocate together in one
// iteration of it, over the loops of `state` (0 where every Func is inlined or at root).
double largest_iteration_bytes(const PipelineAnalysis &dag, const State &state);

// The Funcs whose placement defines a candidate's shape: the `k` with the most points times
// operations at root (ties to the later Func), excluding outputs, whose placement is fixed.
std::vector<int> costliest_funcs(const PipelineAnalysis &dag, int k);

} // namespace hkfac::sched
