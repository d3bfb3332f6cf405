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

double ensemble_prediction(const std::vector<float> &members) {
  for (float p : members)
    if (!std::isfinite(p))
      return INFINITY;
  if (members.size() == 1)
    return members[0];
  if (members.empty())
    throw Error("an ensemble of no weights files predicts nothing");
  std::vector<double> logs;
  for (float p : members)
    logs.push_back(std::log(std::max(static_cast<double>(p), 1e-30)));
  const size_t h = logs.size() / 2;
  std::nth_element(logs.begin(), logs.begin() + h, logs.end());
  double mid = logs[h];
  if (logs.size() % 2 == 0)
    mid = 0.5 * (mid + *std::max_element(logs.begin(), logs.begin() + h));
  return std::exp(mid);
}

} // namespace hkfac::cost_model
