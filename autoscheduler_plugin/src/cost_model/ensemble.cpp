// Ensembles of weights files: list parsing and the median of the members' predictions.
#include "hkfac/cost_model/ensemble.h"

#include <algorithm>
#include <cmath>

#include "hkfac/error.h"

namespace hkfac::cost_model {

std::vector<std::string> split_weights_list(const std::string &list) {
  std::vector<std::string> entries;
  for (size_t at = 0; at <= list.size();) {
    const size_t colon = std::min(list.find(':', at), list.size());
    entries.push_back(list.substr(at, colon - at));
    at = colon + 1;
    if (entries.back().empty())
      throw Error("\"" + list + "\" has an empty entry in its ':'-separated list");
  }
  return entries;
}

double ensemble_prediction(const float *members, size_t count) {
  if (count == 0)
    throw Error("an ensemble of no weights files predicts nothing");
  if (!std::all_of(members, members + count, [](float p) { return std::isfinite(p); }))
    return INFINITY;
  if (count == 1)
    return members[0];
  std::vector<double> logs(count);
  for (size_t k = 0; k < count; ++k)
    logs[k] = std::log(std::max(static_cast<double>(members[k]), 1e-30));
  const size_t h = count / 2;
  std::nth_element(logs.begin(), logs.begin() + h, logs.end());
  double mid = logs[h];
  if (count % 2 == 0)
    mid = 0.5 * (mid + *std::max_element(logs.begin(), logs.begin() + h));
  return std::exp(mid);
}

} // namespace hkfac::cost_model
