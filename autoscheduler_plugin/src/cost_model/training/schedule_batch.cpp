// A step's schedules to and from kfac::Batch's integer indices.
#include "hkfac/cost_model/schedule_batch.h"

#include <string>

#include "hkfac/error.h"

namespace hkfac::cost_model {

kfac::Batch make_batch(const TrainingData &data, int pipeline, const std::vector<int> &schedules) {
  const PipelineData &p = data.pipelines.at(pipeline);
  const auto rows = static_cast<Eigen::Index>(schedules.size());
  kfac::Batch b;
  b.indices.resize(rows, 2);
  b.targets.resize(rows, 1);
  for (Eigen::Index n = 0; n < rows; ++n) {
    b.indices(n, 0) = pipeline;
    b.indices(n, 1) = schedules[n];
    b.targets(n, 0) = p.runtimes_ms.at(schedules[n]);
  }
  return b;
}

ScheduleBatch schedules_of(const kfac::Batch &batch, const TrainingData &data, const char *who) {
  const kfac::IndexMatrix &ix = batch.indices;
  if (ix.rows() < 1 || ix.cols() != 2 || batch.inputs.size() != 0) {
    throw Error(std::string(who) +
                ": a batch names its schedules in indices, B x 2 (pipeline, schedule)");
  }
  ScheduleBatch s;
  const int64_t pipeline = ix(0, 0);
  if (pipeline < 0 || pipeline >= static_cast<int64_t>(data.pipelines.size())) {
    throw Error(std::string(who) + ": pipeline index " + std::to_string(pipeline) +
                " out of range");
  }
  s.pipeline = static_cast<int>(pipeline);
  const int64_t count = static_cast<int64_t>(data.pipelines[s.pipeline].runtimes_ms.size());
  s.schedules.resize(static_cast<size_t>(ix.rows()));
  for (Eigen::Index n = 0; n < ix.rows(); ++n) {
    if (ix(n, 0) != pipeline)
      throw Error(std::string(who) + ": a batch must hold schedules of one pipeline");
    if (ix(n, 1) < 0 || ix(n, 1) >= count)
      throw Error(std::string(who) + ": schedule index out of range");
    s.schedules[n] = static_cast<int>(ix(n, 1));
  }
  return s;
}

} // namespace hkfac::cost_model
