// Layer sizes computed in 64 bits and checked against int (internal header).
#pragma once

#include <limits>
#include <string>

#include "hkfac/error.h"

namespace hkfac::kfac::detail {

// `value` as an int, or an hkfac::Error naming `layer` and `quantity`. Layers, Sequential and the
// curvature blocks hold widths and parameter counts in int, where an overflow would silently
// build a layer of the wrong size (Dense(65536, 65536) a block of dimension 0).
inline int checked_int(long long value, const std::string &layer, const std::string &quantity) {
  constexpr long long int_max = std::numeric_limits<int>::max();
  if (value > int_max) {
    throw Error(layer + ": " + quantity + " is " + std::to_string(value) +
                ", more than a 32-bit int holds (" + std::to_string(int_max) + ")");
  }
  return static_cast<int>(value);
}

} // namespace hkfac::kfac::detail
