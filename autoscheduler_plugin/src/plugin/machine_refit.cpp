// Refitting the cost model's last layer on this machine's timings (see machine_refit.h).
#include "machine_refit.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "hkfac/cost_model/samples.h"
#include "hkfac/cost_model/weights.h"

namespace hkfac::sched {

using namespace hkfac::cost_model;

namespace {

// One pipeline's timed schedules as the training kernel takes them.
struct Batch {
  Buffer<float> pipeline_features; // (40, 7, stages)
  Buffer<float> schedule_features; // (n, 39, stages)
  Buffer<float> runtimes;          // (n)
  Buffer<float> cotangent;         // zeros (n)
};

std::vector<Batch> batches_of(const std::vector<TuningCache::Sample> &samples) {
  std::map<std::string, std::vector<const TuningCache::Sample *>> by_pipeline;
  for (const TuningCache::Sample &s : samples)
    by_pipeline[s.pipeline].push_back(&s);
  std::vector<Batch> out;
  for (const auto &[key, group] : by_pipeline) {
    if (group.size() < 2)
      continue;
    std::vector<Sample> parsed;
    try {
      for (const TuningCache::Sample *s : group) {
        const std::vector<uint8_t> bytes = featurization_to_sample(
            s->featurization, static_cast<float>(s->ms), 0, 0, kCpuScheduleFeatures, key);
        parsed.push_back(parse_sample(bytes.data(), bytes.size(), kCpuScheduleFeatures, key));
      }
    } catch (const hkfac::Error &) {
      continue; // a sample the reader refuses leaves its pipeline out
    }
    const int stages = parsed[0].num_stages;
    const int n = static_cast<int>(parsed.size());
    if (std::any_of(parsed.begin(), parsed.end(),
                    [&](const Sample &p) { return p.num_stages != stages; }))
      continue;
    Batch b;
    b.pipeline_features = parsed[0].pipeline_features.copy();
    b.schedule_features = Buffer<float>(n, kCpuScheduleFeatures, stages);
    b.runtimes = Buffer<float>(n);
    b.cotangent = Buffer<float>(n);
    b.cotangent.fill(0.0f);
    for (int i = 0; i < n; ++i) {
      b.runtimes(i) = parsed[i].runtime_ms;
      for (int s = 0; s < stages; ++s)
        for (int f = 0; f < kCpuScheduleFeatures; ++f)
          b.schedule_features(i, f, s) = parsed[i].schedule_features(f, s);
    }
    out.push_back(std::move(b));
  }
  return out;
}

kernels::CostModelWeights copy_of(const kernels::CostModelWeights &w) {
  return {w.head1_filter.copy(), w.head1_bias.copy(),   w.head2_filter.copy(),
          w.head2_bias.copy(),   w.conv1_filter.copy(), w.conv1_bias.copy()};
}

// The last layer's parameters, flattened (conv1_filter then conv1_bias).
std::vector<float> last_layer(const kernels::CostModelWeights &w) {
  std::vector<float> v(w.conv1_filter.data(),
                       w.conv1_filter.data() + w.conv1_filter.number_of_elements());
  v.insert(v.end(), w.conv1_bias.data(), w.conv1_bias.data() + w.conv1_bias.number_of_elements());
  return v;
}

void set_last_layer(kernels::CostModelWeights &w, const std::vector<float> &v) {
  const size_t nf = w.conv1_filter.number_of_elements();
  std::copy(v.begin(), v.begin() + nf, w.conv1_filter.data());
  std::copy(v.begin() + nf, v.end(), w.conv1_bias.data());
}

// The mean relative-throughput loss over `batches` plus the pull towards `anchor`, and its
// gradient with respect to the last layer.
double objective(const std::vector<const Batch *> &batches, kernels::CostModelWeights &w,
                 const std::vector<float> &anchor, double pull, int cores,
                 std::vector<float> *grad) {
  const std::vector<float> theta = last_layer(w);
  double j = 0;
  if (grad)
    grad->assign(theta.size(), 0.0f);
  kernels::CostModelTrainOutputs out;
  for (const Batch *b : batches) {
    kernels::cost_model_train(b->pipeline_features, b->schedule_features, w, cores, b->runtimes,
                              b->cotangent, 1.0f, 1e-4f, out, Device::cpu);
    j += (out.loss(0) + 1e-4 * out.loss(1)) / batches.size();
    if (grad) {
      const std::vector<float> g = last_layer(out.grads);
      for (size_t i = 0; i < g.size(); ++i)
        (*grad)[i] += g[i] / batches.size();
    }
  }
  for (size_t i = 0; i < theta.size(); ++i) {
    const double d = theta[i] - anchor[i];
    j += pull * d * d;
    if (grad)
      (*grad)[i] += static_cast<float>(2 * pull * d);
  }
  return j;
}

// Gradient descent with a backtracking (Armijo) line search on the last layer of `w`.
void fit(const std::vector<const Batch *> &batches, kernels::CostModelWeights &w, int cores) {
  const std::vector<float> anchor = last_layer(w);
  const double pull = 1e-3;
  std::vector<float> g;
  double step = 1e-2;
  double j = objective(batches, w, anchor, pull, cores, &g);
  for (int it = 0; it < 60; ++it) {
    double g2 = 0;
    for (float x : g)
      g2 += static_cast<double>(x) * x;
    if (!(g2 > 1e-20) || !std::isfinite(j))
      break;
    const std::vector<float> theta = last_layer(w);
    bool moved = false;
    for (int halve = 0; halve < 12; ++halve, step *= 0.5) {
      std::vector<float> next(theta.size());
      for (size_t i = 0; i < theta.size(); ++i)
        next[i] = static_cast<float>(theta[i] - step * g[i]);
      set_last_layer(w, next);
      const double jn = objective(batches, w, anchor, pull, cores, nullptr);
      if (std::isfinite(jn) && jn <= j - 1e-4 * step * g2) {
        j = objective(batches, w, anchor, pull, cores, &g);
        moved = true;
        step *= 2;
        break;
      }
    }
    if (!moved) {
      set_last_layer(w, theta);
      break;
    }
  }
}

// Pairwise ordering accuracy of `w` on one batch: the share of pairs with different runtimes
// the predictions order as the timings do.
double ordering(const Batch &b, const kernels::CostModelWeights &w, int cores) {
  const int n = b.runtimes.dim(0).extent();
  Buffer<float> p(n);
  kernels::cost_model_predict(b.pipeline_features, b.schedule_features, w, cores, p, Device::cpu);
  int right = 0, pairs = 0;
  for (int i = 0; i < n; ++i)
    for (int k = i + 1; k < n; ++k) {
      if (b.runtimes(i) == b.runtimes(k))
        continue;
      ++pairs;
      right += (p(i) < p(k)) == (b.runtimes(i) < b.runtimes(k));
    }
  return pairs ? static_cast<double>(right) / pairs : 1.0;
}

uint64_t weights_hash(const kernels::CostModelWeights &w) {
  uint64_t h = 1469598103934665603ull;
  for (const Buffer<float> *b : {&w.head1_filter, &w.head1_bias, &w.head2_filter, &w.head2_bias,
                                 &w.conv1_filter, &w.conv1_bias}) {
    const auto *p = reinterpret_cast<const unsigned char *>(b->data());
    for (size_t i = 0; i < b->size_in_bytes(); ++i)
      h = (h ^ p[i]) * 1099511628211ull;
  }
  return h;
}

std::vector<uint8_t> to_bytes(const kernels::CostModelWeights &k) {
  Weights w = make_weights(kCpuScheduleFeatures);
  w.head1_filter = k.head1_filter;
  w.head1_bias = k.head1_bias;
  w.head2_filter = k.head2_filter;
  w.head2_bias = k.head2_bias;
  w.conv1_filter = k.conv1_filter;
  w.conv1_bias = k.conv1_bias;
  return serialize_weights(w);
}

kernels::CostModelWeights from_bytes(const std::vector<uint8_t> &bytes) {
  Weights w = parse_weights(bytes.data(), bytes.size(), "the refitted weights in the cache");
  return {w.head1_filter, w.head1_bias, w.head2_filter, w.head2_bias, w.conv1_filter, w.conv1_bias};
}

} // namespace

std::optional<MachineRefit> machine_refit(TuningCache &cache, const kernels::CostModelWeights &base,
                                          const Parameters &params, std::string &note) {
  const std::string host = TuningCache::host_id();
  char id[80];
  std::snprintf(id, sizeof(id), "last-layer %016llx",
                static_cast<unsigned long long>(weights_hash(base)));
  const std::string key = std::string(id) + " " + host + " " + std::to_string(params.parallelism);
  const int64_t count = cache.sample_count(host, kCpuScheduleFeaturesVersion);
  const std::optional<TuningCache::Correction> kept = cache.correction(key);
  if (kept && 4 * count < 5 * kept->samples) {
    // Fitted on at least four fifths of what there is now: use it as it is.
    note = kept->note;
    if (kept->blob.empty())
      return std::nullopt;
    return MachineRefit{from_bytes(kept->blob), kept->note};
  }
  const std::vector<Batch> batches = batches_of(cache.samples(host, kCpuScheduleFeaturesVersion));
  if (static_cast<int>(batches.size()) < kMinPipelines) {
    note.clear();
    return std::nullopt;
  }
  const int cores = params.parallelism;
  // k-fold by pipeline: each fold's pipelines scored by a refit that never saw them.
  const int folds = std::min<int>(4, static_cast<int>(batches.size()));
  double before = 0, after = 0;
  for (int f = 0; f < folds; ++f) {
    std::vector<const Batch *> train;
    for (size_t i = 0; i < batches.size(); ++i)
      if (static_cast<int>(i % folds) != f)
        train.push_back(&batches[i]);
    kernels::CostModelWeights w = copy_of(base);
    fit(train, w, cores);
    for (size_t i = f; i < batches.size(); i += folds) {
      before += ordering(batches[i], base, cores) / batches.size();
      after += ordering(batches[i], w, cores) / batches.size();
    }
  }
  const bool adopted = after >= before + kMinGain;
  std::ostringstream text;
  text.precision(3);
  text << "refit on " << count << " samples of " << batches.size()
       << " pipelines timed here: held-out ordering " << before << " with the file, " << after
       << " refitted (" << (adopted ? "used" : "not used") << ")";
  note = text.str();
  std::optional<MachineRefit> out;
  std::vector<uint8_t> blob;
  if (adopted) {
    std::vector<const Batch *> all;
    for (const Batch &b : batches)
      all.push_back(&b);
    kernels::CostModelWeights w = copy_of(base);
    fit(all, w, cores);
    blob = to_bytes(w);
    out = MachineRefit{w, note};
  }
  cache.put_correction(key, count, blob, note);
  return out;
}

} // namespace hkfac::sched
