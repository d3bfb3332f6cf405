// Choosing and loading the weights the plugin's cost model runs with.
#pragma once

#include <string>
#include <vector>

#include "hkfac/kernels/cost_model.h"
#include "parameters.h"

namespace hkfac::sched {

// HL_RANDOMIZE_WEIGHTS, else HL_WEIGHTS_DIR, else the embedded baseline (S = 39) or the GPU
// prior (S = 73: fixed coefficients on the GPU cost terms), validated for S schedule
// features and our feature versions (HKFAC_ALLOW_VERSION_MISMATCH=1 accepts others). A file that
// fails validation is an InputError carrying the reader's message. HL_WEIGHTS_DIR may list
// several files separated by ':', an ensemble (CostModel): one set of weights each, in order.
// `source` says which were used.
std::vector<kernels::CostModelWeights> load_plugin_weights(const Parameters &params,
                                                           int schedule_features,
                                                           std::string &source);

} // namespace hkfac::sched
