// Training the cost model with K-FAC or Adam, one pipeline's schedules per step.
#pragma once

#include <functional>

#include "hkfac/cost_model/evaluation.h"
#include "hkfac/cost_model/train_options.h"
#include "hkfac/cost_model/training_data.h"
#include "hkfac/cost_model/weights.h"

namespace hkfac::cost_model {

struct EpochRecord {
  int epoch = 0;        // 0: before training
  double seconds = 0.0; // training time so far (evaluation excluded)
  int steps = 0;
  Score train, validation;
  int rejected_steps = 0; // non-finite updates skipped
};

// Trains from `initial` and returns the weights after the last epoch; the options are validated
// first (validate). `on_epoch` sees epoch 0 (the initial weights) and every epoch after it.
Weights train(const TrainingData &data, const Weights &initial, const TrainOptions &options,
              const std::function<void(const EpochRecord &)> &on_epoch);

} // namespace hkfac::cost_model
