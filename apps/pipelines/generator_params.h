// Range checks for the evaluation apps' GeneratorParams, run first in each generate().
#pragma once

#include "Halide.h"

#include <string>

namespace hkfac::pipelines {

// The largest width or height an app accepts: a 16384 × 16384 image of four channels still has
// int32 strides, as Halide's buffers need.
inline constexpr int kMaxExtent = 16384;

// Stops the generator with "<generator>: <param>=<value> is out of range [min, max]" unless
// min <= value <= max. Halide reports it as an error and exits nonzero. Checked here rather than
// with GeneratorParam's own min/max, whose message names neither the parameter nor the range.
template <typename T>
void require_in_range(const std::string &generator, const Halide::GeneratorParam<T> &param, T min,
                      T max) {
  const T value = param.value();
  // Written so that a NaN fails too.
  _halide_user_assert(value >= min && value <= max)
      << generator << ": " << param.name() << "=" << value << " is out of range [" << min << ", "
      << max << "]\n";
}

// As require_in_range, and the value must be odd: for sizes of windows centred on a pixel.
inline void require_odd_in_range(const std::string &generator,
                                 const Halide::GeneratorParam<int> &param, int min, int max) {
  require_in_range(generator, param, min, max);
  _halide_user_assert(param.value() % 2 == 1)
      << generator << ": " << param.name() << "=" << param.value()
      << " must be odd (a window centred on the pixel), in [" << min << ", " << max << "]\n";
}

} // namespace hkfac::pipelines
