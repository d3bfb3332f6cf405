// One training step's examples: some schedules of one pipeline of the training data, carried in a
// kfac::Batch as exact integer indices.
#pragma once

#include <vector>

#include "hkfac/cost_model/training_data.h"
#include "hkfac/kfac/types.h"

namespace hkfac::cost_model {

struct ScheduleBatch {
  int pipeline = 0;           // index into TrainingData::pipelines
  std::vector<int> schedules; // indices into that pipeline's schedules
};

// Batch::indices is B x 2 (pipeline, schedule), Batch::targets the B x 1 runtimes in ms; there
// are no float inputs.
kfac::Batch make_batch(const TrainingData &data, int pipeline, const std::vector<int> &schedules);

// The schedules `batch` names, checked against `data`: one pipeline, every index in range.
// Throws naming `who` otherwise.
ScheduleBatch schedules_of(const kfac::Batch &batch, const TrainingData &data, const char *who);

} // namespace hkfac::cost_model
