// Scoring a cost model on samples: predictions, relative-throughput loss and ordering accuracy.
#pragma once

#include <vector>

#include "hkfac/cost_model/training_data.h"
#include "hkfac/cost_model/weights.h"
#include "hkfac/device.h"

namespace hkfac::cost_model {

// Predicted runtimes of the given schedules of `p` (inference kernel, in chunks).
std::vector<float> predict(const Weights &w, const PipelineData &p,
                           const std::vector<int> &schedules, int num_cores,
                           Device device = default_device());

struct Score {
  double loss = 0.0;     // Σ over pipelines of L_rel / number of schedules scored
  double accuracy = 0.0; // fraction of well-separated pairs predicted in the right order
  size_t pairs = 0;      // pairs more than 1.3x apart (the accuracy's denominator)
  size_t correct = 0;    // of those, ordered right
  size_t schedules = 0;
  // How much slower the schedule predicted fastest ran than the fastest measured, as a geometric
  // mean over pipelines (1 is perfect): what a search that trusts the model loses, which pair
  // counts weigh no more near the top of a ranking than below it.
  double top_regret = 1.0;
  double log_regret_sum = 0.0; // Σ over pipelines of log(t[argmin p] / min t)
  size_t regret_pipelines = 0;
};

// Pairs of one pipeline whose runtimes differ by more than this factor count for the accuracy:
// closer pairs are within benchmark noise.
constexpr double kOrderingRatio = 1.3;

// L_rel, ordering accuracy and top regret of predictions against runtimes, over one pipeline (accumulates).
void accumulate_score(const std::vector<float> &predicted, const std::vector<float> &runtimes,
                      Score &score);
void finish_score(Score &score);

// The score of `w` on every pipeline's validation (or training) schedules.
Score evaluate(const Weights &w, const TrainingData &data, bool validation, int num_cores,
               Device device = default_device());

} // namespace hkfac::cost_model
