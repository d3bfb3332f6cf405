// Choosing the schedule by timing diverse candidates on this host.
#pragma once

#include <string>
#include <vector>

#include "Halide.h"
#include "candidates.h"
#include "cost_model.h"
#include "host_cpu.h"
#include "measure.h"
#include "parameters.h"
#include "pipeline_analysis.h"

namespace hkfac::sched {

// The outcome: every candidate with its timing, and the one chosen.
struct MeasuredSelection {
  std::vector<Candidate> candidates;
  std::vector<Timing> timings;
  int chosen = 0;        // index of the fastest measured; 0 (the model's pick) when none ran
  // The candidates [0, sampled) are the search's: their featurizations are what their timings
  // teach the model. Refinements after them (register tiles) look the same to its features.
  size_t sampled = 0;
  bool measured = false; // some candidate ran
  double seconds = 0;    // choosing the candidates, compiling and timing them
  std::string summary;   // one line for the user
};

// The default budget (HKFAC_TUNE_SECONDS unset) for a pipeline of this size: enough to compile
// and time the candidates, sized so that a generator run stays within Adams2019's beam-32
// generator time on the same pipeline (docs/RESULTS.md#measured-selection).
double default_tune_seconds(const PipelineAnalysis &dag);

// Times `candidates` (the first is the model's own pick) and chooses the fastest that ran;
// where none ran, the first.
MeasuredSelection choose_by_measurement(const PipelineAnalysis &dag,
                                        const std::vector<Halide::Internal::Function> &outputs,
                                        std::vector<Candidate> candidates,
                                        const MeasureSettings &settings, const Parameters &params);

// Times up to params.tune_candidates diverse candidates (candidates.h) drawn from `pool`, the
// search's distinct complete schedules (cheapest first), within `budget_s`, compiled for
// `host.jit`; see measure.h for what a failing candidate costs.
MeasuredSelection select_by_measurement(const PipelineAnalysis &dag,
                                        const std::vector<Halide::Internal::Function> &outputs,
                                        CostModel &model, const Parameters &params,
                                        const std::vector<StatePtr> &pool, const HostRun &host,
                                        double budget_s,
                                        const std::vector<Candidate> &second_opinions = {});

// The second round: register-tiled variants (register_tiles.h) of the chosen candidate, 2 and 4
// rows high, timed within `budget_s` beside the chosen one compiled again, so that they are
// compared side by side. A variant replaces it only where it ran 3% faster there or more (two
// timings of one schedule in one round differ by about that); the variants are
// appended to `sel` (after `sel.sampled`), with a line added to its summary.
void refine_by_measurement(const PipelineAnalysis &dag,
                           const std::vector<Halide::Internal::Function> &outputs,
                           const Parameters &params, const HostRun &host, double budget_s,
                           MeasuredSelection &sel);

} // namespace hkfac::sched
