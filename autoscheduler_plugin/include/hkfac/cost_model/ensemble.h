// Ensembles of weights files: one schedule scored by several cost models at once.
//
// A list of .weights files separated by ':' (HL_WEIGHTS_DIR for the plugin, --weights for
// predict) is an ensemble. It scores a schedule with the median of its members' predictions, the
// mean of the middle two in log space for an even count, so that two members score their
// geometric mean. Files trained alike can disagree by orders of magnitude on a schedule kind none
// of their samples held; with three or more members, one member's extrapolation is outvoted
// instead of averaged in (see docs/RESULTS.md#median-ensembles-of-bagged-files).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace hkfac::cost_model {

// The entries of a ':'-separated list of weights files, in order. Throws hkfac::Error when an
// entry is empty (a leading, trailing or doubled ':'), naming the list.
std::vector<std::string> split_weights_list(const std::string &list);

// The ensemble's prediction from its `count` members' predictions of one schedule: +inf if any
// member's is not finite, the prediction itself for one member (no allocation: the plugin's
// default path), else the median as above. A prediction of 0 (a schedule with nothing to pay for
// yet) counts as 1e-30 in log space.
double ensemble_prediction(const float *members, size_t count);
inline double ensemble_prediction(const std::vector<float> &members) {
  return ensemble_prediction(members.data(), members.size());
}

} // namespace hkfac::cost_model
