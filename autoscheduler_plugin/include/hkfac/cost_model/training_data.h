// The cost model's training data: samples grouped by pipeline, deduplicated, split into training
// and validation, and packed into the batches the kernels read.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "hkfac/buffer.h"
#include "hkfac/cost_model/samples.h"

namespace hkfac::cost_model {

// One pipeline's distinct schedules.
struct PipelineData {
  int32_t pipeline_id = 0;
  std::string name; // from the sample path: the directory generate_data made for the pipeline
  int num_stages = 0;
  Buffer<float> pipeline_features;              // (40, 7, stages)
  std::vector<Buffer<float>> schedule_features; // each (S, stages)
  std::vector<float> runtimes_ms;
  // The sample each runtime comes from: of merged repeats, the fastest one's.
  std::vector<std::string> paths;
  std::vector<int32_t> schedule_ids;
  std::vector<int> train, validation; // indices into the schedules
};

struct TrainingData {
  int schedule_features = 39;
  std::vector<PipelineData> pipelines;
  size_t duplicates = 0; // samples dropped as repeats of a schedule (same features)
  size_t train_schedules() const;
  size_t validation_schedules() const;
};

// How samples are split: "hash" puts a fixed fifth of each pipeline's schedules (by a hash of
// their features, so the split does not depend on file order) into validation; "app:NAME" holds
// out every schedule of the pipeline NAME (its pipeline id is the CRC-32 of the name, as
// generate_data assigns it) and trains on the rest; "pipelines" holds out every schedule of a
// fixed fifth of the pipelines (by their id): the question the autoscheduler asks of the model
// is about pipelines it has never seen; "none" validates on nothing.
struct Split {
  enum class Kind { hash, app, pipelines, none } kind = Kind::hash;
  std::string app;
};
Split parse_split(const std::string &text); // throws hkfac::Error naming the flag value

// The id generate_data gives a pipeline: CRC-32 of its name, top bit cleared.
int32_t pipeline_id_for(const std::string &name);

// Groups, deduplicates (identical schedule features keep the fastest runtime: the others are the
// same code timed again; off when every sample must stay, as for predictions) and splits. Throws
// when no schedule is left to train on.
TrainingData make_training_data(SampleSet &&samples, int schedule_features, const Split &split,
                                bool deduplicate = true);

// (batch, S, stages) schedule features of the given schedules of `p`.
Buffer<float> pack_schedule_features(const PipelineData &p, const std::vector<int> &schedules);

} // namespace hkfac::cost_model
