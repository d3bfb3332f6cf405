// The 39 CPU schedule features of every stage under a schedule (the cost model's inputs).
#pragma once

#include <vector>

#include "loop_nest_model.h"
#include "parameters.h"
#include "pipeline_analysis.h"

namespace hkfac::sched {

// Writes S = 39 features per stage, stage-major (stage s's feature f at out[s * 39 + f]), for
// every stage of the pipeline in realization order (the order of the .featurization file).
// The features are defined, one comment each, in generators/cost_model_features.h (CpuFeature);
// stages of undecided Funcs are all zero. Inlined Funcs carry only their inlined calls.
void cpu_schedule_features(const PipelineAnalysis &dag, const State &state,
                           const LoopNestModel &model, float *out);

// The schedule features as the network sees them: the raw features with the machine's cache
// size and balance folded in (stage-major rows of 39, as cpu_schedule_features writes them).
void machine_adjusted_features(const Parameters &params, float *stage_features, int stages);

// The number of schedule features on the target: 39 on CPUs, 73 on GPUs.
inline int schedule_feature_count(const Parameters &params) { return params.gpu ? 73 : 39; }

// The schedule features as the network sees them on the target: machine-adjusted CPU features,
// or the GPU features (gpu_features.h), schedule_feature_count(params) per stage.
void schedule_features(const PipelineAnalysis &dag, const State &state,
                       const LoopNestModel &model, const Parameters &params, float *out);

// The featurization file of a complete schedule: per stage, the schedule features as the
// network sees them (schedule_features) then the 287 algorithm features, float32 (the layout
// Halide 14's .featurization uses), so a sample trains exactly what the search scores.
std::vector<uint8_t> featurization_bytes(const PipelineAnalysis &dag, const State &state,
                                         const Parameters &params);

} // namespace hkfac::sched
