// Predictions and scores of a cost model on held-out or training schedules.
#include "hkfac/cost_model/evaluation.h"

#include <algorithm>
#include <cmath>

#include "hkfac/cost_model/network.h"
#include "hkfac/cost_model/relative_throughput_loss.h"
#include "hkfac/kernels/cost_model.h"

namespace hkfac::cost_model {

std::vector<float> predict(const Weights &w, const PipelineData &p,
                           const std::vector<int> &schedules, int num_cores, Device device) {
  constexpr size_t kChunk = 1024; // the batch the kernels are tuned for
  const kernels::CostModelWeights kw = kernel_weights(w);
  std::vector<float> out;
  out.reserve(schedules.size());
  for (size_t start = 0; start < schedules.size(); start += kChunk) {
    const std::vector<int> chunk(schedules.begin() + start,
                                 schedules.begin() + std::min(schedules.size(), start + kChunk));
    const Buffer<float> features = pack_schedule_features(p, chunk);
    Buffer<float> predictions(static_cast<int>(chunk.size()));
    kernels::cost_model_predict(p.pipeline_features, features, kw, num_cores, predictions, device);
    to_host(predictions);
    for (size_t n = 0; n < chunk.size(); ++n)
      out.push_back(predictions(static_cast<int>(n)));
  }
  return out;
}

void accumulate_score(const std::vector<float> &predicted, const std::vector<float> &runtimes,
                      Score &score) {
  const size_t n = predicted.size();
  if (n < 2)
    return; // a lone schedule has nothing to be compared with
  Eigen::VectorXd p(n), t(n);
  for (size_t i = 0; i < n; ++i) {
    p(i) = predicted[i];
    t(i) = runtimes[i];
  }
  score.loss += relative_throughput_loss(p, t);
  score.schedules += n;
  size_t correct = 0, pairs = 0;
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = a + 1; b < n; ++b) {
      const double hi = std::max(t(a), t(b)), lo = std::min(t(a), t(b));
      if (hi <= kOrderingRatio * lo)
        continue;
      ++pairs;
      correct += (p(a) < p(b)) == (t(a) < t(b)) && p(a) != p(b);
    }
  }
  score.correct += correct;
  score.pairs += pairs;
  Eigen::Index picked, fastest;
  p.minCoeff(&picked);
  t.minCoeff(&fastest);
  score.log_regret_sum += std::log(t(picked) / t(fastest));
  ++score.regret_pipelines;
}

void finish_score(Score &score) {
  score.loss = score.schedules ? score.loss / static_cast<double>(score.schedules) : 0.0;
  score.accuracy =
      score.pairs ? static_cast<double>(score.correct) / static_cast<double>(score.pairs) : 0.0;
  score.top_regret =
      score.regret_pipelines
          ? std::exp(score.log_regret_sum / static_cast<double>(score.regret_pipelines))
          : 1.0;
}

Score evaluate(const Weights &w, const TrainingData &data, bool validation, int num_cores,
               Device device) {
  Score score;
  for (const PipelineData &p : data.pipelines) {
    const std::vector<int> &set = validation ? p.validation : p.train;
    if (set.size() < 2)
      continue;
    std::vector<float> runtimes;
    for (int i : set)
      runtimes.push_back(p.runtimes_ms[i]);
    accumulate_score(predict(w, p, set, num_cores, device), runtimes, score);
  }
  finish_score(score);
  return score;
}

} // namespace hkfac::cost_model
