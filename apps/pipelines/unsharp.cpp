// Unsharp masking: sharpen the luminance against a separable Gaussian blur and scale the colour
// channels by the same ratio.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

#include <cmath>

namespace {

using namespace Halide;

class Unsharp : public Generator<Unsharp> {
public:
  GeneratorParam<float> blur_sigma{"blur_sigma", 1.5f};
  GeneratorParam<int> width{"width", 1536}; // for the estimates
  GeneratorParam<int> height{"height", 2560};

  Input<Buffer<float>> input{"input", 3}; // RGB in [0, 1]
  Output<Buffer<float>> output{"output", 3};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    // Below 0.1 the kernel is a delta in float, and tiny sigmas make its centre tap 0 / 0.
    require_in_range("unsharp", blur_sigma, 0.1f, 32.0f);
    require_in_range("unsharp", width, 1, kMaxExtent);
    require_in_range("unsharp", height, 1, kMaxExtent);

    const float sigma = blur_sigma;
    const int radius = static_cast<int>(std::ceil(3 * sigma));
    float norm = 0;
    for (int i = -radius; i <= radius; i++) {
      norm += std::exp(-(i * i) / (2 * sigma * sigma));
    }
    auto kernel = [&](int i) { return std::exp(-(i * i) / (2 * sigma * sigma)) / norm; };

    Func clamped = BoundaryConditions::repeat_edge(input);
    gray(x, y) = 0.299f * clamped(x, y, 0) + 0.587f * clamped(x, y, 1) + 0.114f * clamped(x, y, 2);

    Expr bx = 0.0f, by = 0.0f;
    for (int i = -radius; i <= radius; i++) {
      bx += kernel(i) * gray(x + i, y);
    }
    blur_x(x, y) = bx;
    for (int i = -radius; i <= radius; i++) {
      by += kernel(i) * blur_x(x, y + i);
    }
    blur_y(x, y) = by;

    sharpen(x, y) = 2 * gray(x, y) - blur_y(x, y);
    ratio(x, y) = sharpen(x, y) / max(gray(x, y), 1e-4f);
    output(x, y, c) = clamped(x, y, c) * ratio(x, y);

    input.set_estimates({{0, width}, {0, height}, {0, 3}});
    output.set_estimates({{0, width}, {0, height}, {0, 3}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"}, c{"c"};
  Func gray{"gray"}, blur_x{"blur_x"}, blur_y{"blur_y"}, sharpen{"sharpen"}, ratio{"ratio"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(Unsharp, unsharp)
