// The training loops: Adam on the training kernel's loss gradient, K-FAC through kfac::Optimizer.
#include "hkfac/cost_model/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

#include "hkfac/cost_model/network.h"
#include "hkfac/cost_model/relative_throughput_loss.h"
#include "hkfac/cost_model/schedule_batch.h"
#include "hkfac/cost_model/top_choice_loss.h"
#include "hkfac/error.h"
#include "hkfac/kernels/cost_model.h"
#include "hkfac/kfac/adam.h"
#include "hkfac/kfac/optimizer.h"

namespace hkfac::cost_model {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Pipelines in a fresh random order every epoch, each once or, with schedules_per_visit, once
// per that many of its schedules; each step takes one pipeline's training schedules (a random
// subset when there are more than batch_size).
class BatchStream {
public:
  BatchStream(const TrainingData &data, int batch_size, int schedules_per_visit, unsigned seed)
      : data_(data), batch_size_(batch_size), rng_(seed) {
    for (size_t i = 0; i < data.pipelines.size(); ++i) {
      const int n = static_cast<int>(data.pipelines[i].train.size());
      if (n < 2) // one schedule has nothing to compare with
        continue;
      const int visits =
          schedules_per_visit > 0 ? (n + schedules_per_visit - 1) / schedules_per_visit : 1;
      usable_.insert(usable_.end(), visits, static_cast<int>(i));
    }
    if (usable_.empty())
      throw Error("training: no pipeline has two or more training schedules");
  }
  int steps_per_epoch() const { return static_cast<int>(usable_.size()); }

  kfac::Batch next() {
    if (cursor_ == order_.size()) {
      order_ = usable_;
      std::shuffle(order_.begin(), order_.end(), rng_);
      cursor_ = 0;
    }
    const int pipeline = order_[cursor_++];
    std::vector<int> schedules = data_.pipelines[pipeline].train;
    if (static_cast<int>(schedules.size()) > batch_size_) {
      std::shuffle(schedules.begin(), schedules.end(), rng_);
      schedules.resize(batch_size_);
    }
    return make_batch(data_, pipeline, schedules);
  }

private:
  const TrainingData &data_;
  int batch_size_;
  std::mt19937 rng_;
  std::vector<int> usable_, order_;
  size_t cursor_ = 0;
};

// One Adam step's gradient from the training kernel: L_rel plus the conv1 penalty, both summed
// over the batch; the penalty weight is per (schedule, stage, channel) so it does not grow with
// the pipeline.
kfac::Params adam_gradient(const TrainingData &data, const kfac::Params &params,
                           const kfac::Batch &batch, const TrainOptions &o,
                           kernels::CostModelTrainOutputs &out) {
  const ScheduleBatch which = schedules_of(batch, data, "train (Adam)");
  const PipelineData &p = data.pipelines[which.pipeline];
  const std::vector<int> &schedules = which.schedules;
  const int B = static_cast<int>(schedules.size());
  const Weights w = weights_from_params(params, data.schedule_features);
  Buffer<float> runtimes(B), cotangent(B);
  for (int n = 0; n < B; ++n) {
    runtimes(n) = batch.targets(n, 0);
    cotangent(n) = 0.0f;
  }
  const float penalty =
      static_cast<float>(o.penalty_weight / (static_cast<double>(B) * p.num_stages * 32.0));
  kernels::cost_model_train(p.pipeline_features, pack_schedule_features(p, schedules),
                            kernel_weights(w), o.num_cores, runtimes, cotangent, 1.0f, penalty, out,
                            o.device);
  const kernels::CostModelWeights &g = out.grads;
  const Buffer<float> *buffers[] = {&g.head1_filter, &g.head1_bias,   &g.head2_filter,
                                    &g.head2_bias,   &g.conv1_filter, &g.conv1_bias};
  kfac::Params grads = kfac::zeros_like(params);
  for (size_t i = 0; i < grads.size(); ++i) {
    Buffer<float> b = *buffers[i];
    to_host(b);
    std::copy(b.data(), b.data() + grads[i].size(), grads[i].data());
  }
  return grads;
}

kfac::OptimizerOptions kfac_options(const TrainOptions &o, int steps_per_epoch) {
  kfac::OptimizerOptions k;
  k.estimation_mode = kfac::EstimationMode::ggn_exact;
  k.l2_reg = static_cast<float>(o.kfac_l2);
  k.num_burnin_steps = std::min(10, steps_per_epoch);
  k.inverse_update_period = o.kfac_inverse_period;
  k.curvature_update_period = o.kfac_curvature_period;
  k.curvature_ema = 0.95;
  // The adaptive learning rate sizes its own steps (the optimizer refuses a norm constraint then).
  if (!o.kfac_adaptive)
    k.norm_constraint = o.kfac_norm_constraint;
  k.seed = o.seed;
  k.serial_kernels = o.kfac_serial_kernels;
  k.initial_damping = o.kfac_damping;
  if (o.kfac_adaptive) {
    k.use_adaptive_damping = true;
    k.use_adaptive_learning_rate = true;
    k.use_adaptive_momentum = true;
  } else {
    const double mu = o.kfac_momentum, damping = o.kfac_damping;
    const int total = o.epochs * steps_per_epoch;
    k.learning_rate_schedule = [o, total](int t) { return scheduled_kfac_rate(o, t, total); };
    k.momentum_schedule = [mu](int) { return mu; };
    k.damping_schedule = [damping](int) { return damping; };
  }
  return k;
}

} // namespace

Weights train(const TrainingData &data, const Weights &initial, const TrainOptions &o,
              const std::function<void(const EpochRecord &)> &on_epoch) {
  validate(o);
  if (initial.schedule_features() != data.schedule_features) {
    throw Error("the initial weights have S = " + std::to_string(initial.schedule_features()) +
                " schedule features, the samples " + std::to_string(data.schedule_features));
  }
  kfac::Params params = params_from_weights(initial);
  BatchStream stream(data, o.batch_size, o.schedules_per_visit, o.seed);

  EpochRecord record;
  auto report = [&](const kfac::Params &p) {
    const Weights w = weights_from_params(p, data.schedule_features);
    record.train = evaluate(w, data, false, o.num_cores, o.device);
    record.validation = evaluate(w, data, true, o.num_cores, o.device);
    on_epoch(record);
  };
  report(params);

  CostModelNet net(data, o.num_cores, o.device);
  std::unique_ptr<kfac::Optimizer> kfac_opt;
  std::unique_ptr<kfac::Adam> adam;
  if (o.optimizer == OptimizerKind::kfac) {
    kfac::ValueFunction value = [o](const kfac::Matrix &outputs, const kfac::Batch &batch,
                                    kfac::ValueContext &ctx) {
      ctx.losses().add(std::make_unique<RelativeThroughputLoss>(outputs, &batch.targets));
      if (o.top_choice_weight > 0) {
        ctx.losses().add(std::make_unique<TopChoiceLoss>(
            outputs, &batch.targets, static_cast<float>(o.top_choice_temperature),
            static_cast<float>(o.top_choice_weight)));
      }
    };
    kfac_opt =
        std::make_unique<kfac::Optimizer>(net, value, kfac_options(o, stream.steps_per_epoch()));
  } else {
    adam = std::make_unique<kfac::Adam>(o.rate);
  }
  kernels::CostModelTrainOutputs scratch;
  const std::function<kfac::Batch()> next = [&] { return stream.next(); };
  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    const Clock::time_point start = Clock::now();
    for (int step = 0; step < stream.steps_per_epoch(); ++step) {
      if (kfac_opt) {
        const kfac::StepStats stats = kfac_opt->step(params, next);
        record.rejected_steps = stats.rejected_steps;
      } else {
        const kfac::Batch batch = stream.next();
        const kfac::Params g = adam_gradient(data, params, batch, o, scratch);
        if (kfac::all_finite(g)) {
          adam->step(params, g);
        } else {
          ++record.rejected_steps;
        }
      }
      ++record.steps;
    }
    record.seconds += seconds_since(start);
    record.epoch = epoch;
    report(params);
    if (o.max_seconds > 0 && record.seconds >= o.max_seconds)
      break;
  }
  return weights_from_params(params, data.schedule_features);
}

} // namespace hkfac::cost_model
