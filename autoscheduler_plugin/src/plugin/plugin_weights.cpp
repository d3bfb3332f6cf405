// Loading the plugin's weights (see plugin_weights.h).
#include "plugin_weights.h"

#include "embedded_weights.h"
#include "hkfac/cost_model/weights.h"
#include "hkfac/error.h"
#include "input_error.h"

namespace hkfac::sched {

using namespace hkfac::cost_model;

kernels::CostModelWeights load_plugin_weights(const Parameters &params, int schedule_features,
                                              std::string &source) {
  Weights w;
  WeightsLoadOptions opt;
  opt.expected_schedule_features = schedule_features;
  opt.allow_version_mismatch = params.allow_version_mismatch;
  const char *hint = " (weights trained on another featurization predict nothing useful for "
                     "Hkfac's; HKFAC_ALLOW_VERSION_MISMATCH=1 loads them anyway)";
  if (params.randomize_weights) {
    w = random_weights(schedule_features, params.weights_seed);
    source = "random weights (seed " + std::to_string(params.weights_seed) + ")";
  } else if (!params.weights_path.empty()) {
    try {
      w = load_weights(params.weights_path, opt);
    } catch (const hkfac::Error &e) {
      input_check(false) << "Hkfac: HL_WEIGHTS_DIR: " << e.what() << hint << "\n";
    }
    source = params.weights_path;
  } else {
    try {
      w = parse_weights(embedded_baseline_weights(), embedded_baseline_weights_size(),
                        "the embedded weights/baseline.weights", opt);
    } catch (const hkfac::Error &e) {
      input_check(false) << "Hkfac: " << e.what() << hint << "\n";
    }
    source = "embedded weights/baseline.weights";
  }
  kernels::CostModelWeights k;
  k.head1_filter = w.head1_filter;
  k.head1_bias = w.head1_bias;
  k.head2_filter = w.head2_filter;
  k.head2_bias = w.head2_bias;
  k.conv1_filter = w.conv1_filter;
  k.conv1_bias = w.conv1_bias;
  return k;
}

} // namespace hkfac::sched
