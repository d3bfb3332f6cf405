// The cost model refitted on this machine's own timings (the tuning cache's samples).
#pragma once

#include <optional>
#include <string>

#include "hkfac/cost_model/tuning_cache.h"
#include "hkfac/kernels/cost_model.h"
#include "parameters.h"

namespace hkfac::sched {

// Every candidate measured selection times on a quiet host is a sample of this machine
// (tuning_cache.h). Once there are enough of them (kMinPipelines pipelines with two or more
// timed schedules), the weights' last layer — the map from a stage's embeddings to the 32
// cost-term coefficients, where a machine's balance of compute, cache and parallel overhead
// lives — is refitted to them, pulled towards the file's values so that few samples move it
// little. The relative-throughput loss of training (cost_model_train) is minimised by gradient
// descent with a backtracking line search (deterministic, no optimizer state to keep).
//
// The refit is used only where it orders this machine's timings better than the file does on
// pipelines it did not see: k-fold by pipeline, each fold refitted without its pipelines and
// scored on them (pairwise ordering accuracy, each pipeline weighted alike); adopted when the
// mean held-out accuracy gains kMinGain. The outcome, adopted or not, is kept in the cache with
// the count of samples it saw, and fitted again once that count has grown by a quarter, so a
// parallel build does not refit in every generator.
struct MachineRefit {
  kernels::CostModelWeights weights;
  std::string note; // for the log: samples, pipelines, held-out accuracy before and after
};

constexpr int kMinPipelines = 4;
constexpr double kMinGain = 0.01;

// The refitted weights for `base` on this host, or nothing (too few samples, not adopted, or
// the cache unreadable; `note` says which where there is something to say).
std::optional<MachineRefit> machine_refit(cost_model::TuningCache &cache,
                                          const kernels::CostModelWeights &base,
                                          const Parameters &params, std::string &note);

} // namespace hkfac::sched
