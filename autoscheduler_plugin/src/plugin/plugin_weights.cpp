// Loading the plugin's weights (see plugin_weights.h).
#include "plugin_weights.h"

#include "embedded_weights.h"
#include "hkfac/cost_model/ensemble.h"
#include "hkfac/cost_model/weights.h"
#include "hkfac/error.h"
#include "input_error.h"

namespace hkfac::sched {

using namespace hkfac::cost_model;

namespace {

// The GPU prior: until weights are trained on GPU timings (weights/README.md), a GPU target's
// default model is the network with every coefficient fixed (no dependence on the features'
// embeddings): the predicted runtime is a hand-weighted sum of the GPU cost terms
// (generators/cost_model.h, gpu_cost_terms), in units of one point's work on one SM slot.
Weights gpu_prior_weights() {
  // One coefficient per cost term, in gpu_cost_terms' order.
  static const float kCoefficients[kConv1Channels] = {
      1.0f,    // 0 points
      0.0f,    // 1 warp instructions (in 0)
      1.0f,    // 2 idle lanes
      0.0f,    // 3 recompute (in 0)
      0.5f,    // 4 inlined calls
      2.0f,    // 5 global load sectors
      1.0f,    // 6 uncoalesced loads
      2.0f,    // 7 global store sectors
      1.0f,    // 8 uncoalesced stores
      0.25f,   // 9 shared load wavefronts
      0.25f,   // 10 shared store wavefronts
      0.5f,    // 11 bank conflicts
      0.0f,    // 12 register reuse
      0.1f,    // 13 broadcasts
      0.0f,    // 14 lines per block (in 15)
      1.0f,    // 15 distinct sectors read
      0.5f,    // 16 all sectors read
      1.0f,    // 17 sectors written
      0.1f,    // 18 staging traffic
      4000.0f, // 19 launches (a few microseconds each)
      200.0f,  // 20 waves
      0.5f,    // 21 idle SM slots in the last wave
      0.5f,    // 22 latency low occupancy leaves exposed
      2.0f,    // 23 barriers
      4.0f,    // 24 spills
      0.2f,    // 25 register pressure
      0.2f,    // 26 shared-memory pressure
      0.2f,    // 27 L2 pressure
      0.2f,    // 28 per-block working set
      500.0f,  // 29 allocations
      0.5f,    // 30 pages allocated
      0.05f,   // 31 loop entries
  };
  Weights w = make_weights(kGpuScheduleFeatures);
  for (int i = 0; i < kConv1Channels; ++i)
    w.conv1_bias(i) = kCoefficients[i];
  return w;
}

} // namespace

std::vector<kernels::CostModelWeights> load_plugin_weights(const Parameters &params,
                                                           int schedule_features,
                                                           std::string &source) {
  WeightsLoadOptions opt;
  opt.expected_schedule_features = schedule_features;
  opt.allow_version_mismatch = params.allow_version_mismatch;
  // Said only where the file's feature versions are not ours: that setting loads nothing else.
  auto hint = [](const hkfac::Error &e) {
    const std::string what = e.what();
    return what.find(" version: expected ") == std::string::npos ||
                   what.find(" for S = ") != std::string::npos
               ? ""
               : " (weights trained on another featurization predict nothing useful for "
                 "Hkfac's; HKFAC_ALLOW_VERSION_MISMATCH=1 loads them anyway)";
  };
  std::vector<Weights> all;
  if (params.randomize_weights) {
    all.push_back(random_weights(schedule_features, params.weights_seed));
    source = "random weights (seed " + std::to_string(params.weights_seed) + ")";
  } else if (!params.weights_path.empty()) {
    std::vector<std::string> paths;
    try {
      paths = split_weights_list(params.weights_path);
    } catch (const hkfac::Error &e) {
      input_check(false) << "Hkfac: HL_WEIGHTS_DIR=" << e.what() << "\n";
    }
    for (const std::string &path : paths) {
      try {
        all.push_back(load_weights(path, opt));
      } catch (const hkfac::Error &e) {
        input_check(false) << "Hkfac: HL_WEIGHTS_DIR: " << e.what() << hint(e) << "\n";
      }
    }
    source = params.weights_path;
    if (all.size() > 1)
      source = "an ensemble of " + std::to_string(all.size()) + " (" + source + ")";
  } else if (schedule_features == kGpuScheduleFeatures) {
    all.push_back(gpu_prior_weights());
    source = "the GPU prior (hand-set cost-term coefficients; no GPU-trained weights yet)";
  } else {
    try {
      all.push_back(parse_weights(embedded_baseline_weights(), embedded_baseline_weights_size(),
                                  "the embedded weights/baseline.weights", opt));
    } catch (const hkfac::Error &e) {
      input_check(false) << "Hkfac: " << e.what() << hint(e) << "\n";
    }
    source = "embedded weights/baseline.weights";
  }
  std::vector<kernels::CostModelWeights> out;
  for (const Weights &w : all) {
    kernels::CostModelWeights k;
    k.head1_filter = w.head1_filter;
    k.head1_bias = w.head1_bias;
    k.head2_filter = w.head2_filter;
    k.head2_bias = w.head2_bias;
    k.conv1_filter = w.conv1_filter;
    k.conv1_bias = w.conv1_bias;
    out.push_back(k);
  }
  return out;
}

} // namespace hkfac::sched
