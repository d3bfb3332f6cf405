// 5-tap binomial Gaussian blur of an 8-bit RGB image, summed in 16 bits and rounded back to 8.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class GaussianBlur : public Generator<GaussianBlur> {
public:
  GeneratorParam<int> width{"width", 1920}; // for the estimates
  GeneratorParam<int> height{"height", 1080};

  Input<Buffer<uint8_t>> input{"input", 3}; // RGB, planar
  Output<Buffer<uint8_t>> output{"output", 3};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("gaussian_blur", width, 1, kMaxExtent);
    require_in_range("gaussian_blur", height, 1, kMaxExtent);

    Func clamped = BoundaryConditions::repeat_edge(input);
    widened(x, y, c) = cast<uint16_t>(clamped(x, y, c));
    // Taps 1 4 6 4 1 (sum 16) each way: at most 255 * 256 = 65280, within uint16.
    blur_x(x, y, c) = widened(x - 2, y, c) + 4 * widened(x - 1, y, c) + 6 * widened(x, y, c) +
                      4 * widened(x + 1, y, c) + widened(x + 2, y, c);
    blur_y(x, y, c) = blur_x(x, y - 2, c) + 4 * blur_x(x, y - 1, c) + 6 * blur_x(x, y, c) +
                      4 * blur_x(x, y + 1, c) + blur_x(x, y + 2, c);
    output(x, y, c) = cast<uint8_t>((blur_y(x, y, c) + 128) >> 8);

    input.set_estimates({{0, width}, {0, height}, {0, 3}});
    output.set_estimates({{0, width}, {0, height}, {0, 3}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"}, c{"c"};
  Func widened{"widened"}, blur_x{"blur_x"}, blur_y{"blur_y"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(GaussianBlur, gaussian_blur)
