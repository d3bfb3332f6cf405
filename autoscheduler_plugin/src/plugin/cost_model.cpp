// Batching schedules through the cost-model kernel (see cost_model.h).
#include "cost_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "cost_model_features.h"
#include "hkfac/cost_model/ensemble.h"
#include "plugin_weights.h"
#include "loop_nest_model.h"
#include "parallel_for.h"
#include "schedule_features.h"

namespace hkfac::sched {

using namespace hkfac::cost_model;

namespace {

constexpr int kMaxBatch = 1024;

} // namespace

CostModel::CostModel(const PipelineAnalysis &dag, const Parameters &params)
    : dag_(dag), params_(params), S_(schedule_feature_count(params)) {
  weights_ = load_plugin_weights(params, S_, source_);

  pipeline_features_ = Buffer<float>(kPipelineFeatureRows, kPipelineFeatureTypes, dag.num_stages);
  int s = 0;
  for (const FuncNode &f : dag.funcs)
    for (const StageNode &st : f.stages) {
      for (int i = 0; i < kPipelineFeatureRows; ++i)
        for (int j = 0; j < kPipelineFeatureTypes; ++j)
          pipeline_features_(i, j, s) = static_cast<float>(st.features[7 + i * 7 + j]);
      ++s;
    }
}

void CostModel::evaluate(std::vector<State *> &states) {
  const int stages = dag_.num_stages;
  for (size_t first = 0; first < states.size(); first += kMaxBatch) {
    const int batch = static_cast<int>(std::min<size_t>(kMaxBatch, states.size() - first));
    auto t0 = std::chrono::steady_clock::now();
    std::vector<float> rows(static_cast<size_t>(batch) * stages * S_);
    std::vector<char> legal(batch, 1);
    parallel_for(batch, params_.threads, [&](int n) {
      const State &st = *states[first + n];
      LoopNestModel model(dag_, st);
      if (!model.legal()) {
        legal[n] = 0;
        return;
      }
      float *out = rows.data() + static_cast<size_t>(n) * stages * S_;
      schedule_features(dag_, st, model, params_, out);
    });
    Buffer<float> features(batch, S_, stages);
    for (int n = 0; n < batch; ++n)
      for (int s = 0; s < stages; ++s)
        for (int f = 0; f < S_; ++f)
          features(n, f, s) = rows[(static_cast<size_t>(n) * stages + s) * S_ + f];
    auto t1 = std::chrono::steady_clock::now();
    // Each member's prediction of each state, a state's members side by side; the ensemble
    // scores their median (see the class).
    const size_t m_count = weights_.size();
    std::vector<float> by_state(static_cast<size_t>(batch) * m_count);
    Buffer<float> predictions(batch);
    for (size_t m = 0; m < m_count; ++m) {
      kernels::cost_model_predict(pipeline_features_, features, weights_[m], params_.parallelism,
                                  predictions, Device::cpu);
      for (int n = 0; n < batch; ++n)
        by_state[n * m_count + m] = predictions(n);
    }
    auto t2 = std::chrono::steady_clock::now();
    featurize_s_ += std::chrono::duration<double>(t1 - t0).count();
    network_s_ += std::chrono::duration<double>(t2 - t1).count();
    for (int n = 0; n < batch; ++n) {
      const double p = ensemble_prediction(by_state.data() + n * m_count, m_count);
      states[first + n]->cost = legal[n] && std::isfinite(p) ? p : INFINITY;
    }
    evaluated_ += batch;
  }
}

} // namespace hkfac::sched
