// Scoring schedules with the generated cost-model network.
#pragma once

#include <vector>

#include "hkfac/buffer.h"
#include "hkfac/kernels/cost_model.h"
#include "parameters.h"
#include "pipeline_analysis.h"
#include "schedule_state.h"

namespace hkfac::sched {

// The learned cost model over one pipeline: the pipeline's algorithm features are laid out once,
// and each batch of candidate schedules is featurized (on every core) and scored by one call of
// the generated inference kernel through hkfac::runtime. Weights come from HL_WEIGHTS_DIR (a
// .weights file or an old six-file directory), else the baseline embedded in the plugin; a file
// that fails validation is the user's error with the reader's message, never a silent switch to
// random weights, which only HL_RANDOMIZE_WEIGHTS asks for (data generation).
// An ensemble (HL_WEIGHTS_DIR=a.weights:b.weights:...) scores each schedule with the median of
// its members' predictions (two members: their geometric mean), so that one member's
// extrapolation to a cheap schedule the others rate dear is outvoted (file sets trained alike
// pick schedules far apart, and a geometric mean of two did not outvote such errors: see
// docs/RESULTS.md#median-ensembles-of-bagged-files).
class CostModel {
public:
  CostModel(const PipelineAnalysis &dag, const Parameters &params);

  // Sets each state's cost (predicted runtime, arbitrary units); illegal states get +inf.
  void evaluate(std::vector<State *> &states);
  // How the weights were chosen, for the log.
  const std::string &weights_source() const { return source_; }
  // The weights of each ensemble member, and a replacement for them (machine_refit.h).
  const std::vector<kernels::CostModelWeights> &weights() const { return weights_; }
  void replace_weights(std::vector<kernels::CostModelWeights> weights, const std::string &source) {
    weights_ = std::move(weights);
    source_ = source;
  }
  long long evaluated() const { return evaluated_; }
  double featurize_seconds() const { return featurize_s_; }
  double network_seconds() const { return network_s_; }

private:
  const PipelineAnalysis &dag_;
  const Parameters &params_;
  const int S_; // schedule features per stage (schedule_feature_count)
  Buffer<float> pipeline_features_;
  std::vector<kernels::CostModelWeights> weights_; // one per ensemble member
  std::string source_;
  long long evaluated_ = 0;
  double featurize_s_ = 0, network_s_ = 0;
};

} // namespace hkfac::sched
