// 7×7 box blur of a 16-bit gray image as two 1-D passes with 32-bit sums, rounded to the mean.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class BoxBlurU16 : public Generator<BoxBlurU16> {
public:
  GeneratorParam<int> width{"width", 3840}; // for the estimates
  GeneratorParam<int> height{"height", 2160};

  Input<Buffer<uint16_t>> input{"input", 2};
  Output<Buffer<uint16_t>> output{"output", 2};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("box_blur_u16", width, 1, kMaxExtent);
    require_in_range("box_blur_u16", height, 1, kMaxExtent);

    const int radius = 3;
    const int taps = 2 * radius + 1;
    Func clamped = BoundaryConditions::repeat_edge(input);
    Expr row_sum = cast<uint32_t>(0);
    for (int i = -radius; i <= radius; i++) {
      row_sum += cast<uint32_t>(clamped(x + i, y));
    }
    sum_x(x, y) = row_sum;
    Expr column_sum = cast<uint32_t>(0);
    for (int i = -radius; i <= radius; i++) {
      column_sum += sum_x(x, y + i);
    }
    sum_y(x, y) = column_sum;
    output(x, y) = cast<uint16_t>((sum_y(x, y) + taps * taps / 2) / (taps * taps));

    input.set_estimates({{0, width}, {0, height}});
    output.set_estimates({{0, width}, {0, height}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"};
  Func sum_x{"sum_x"}, sum_y{"sum_y"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(BoxBlurU16, box_blur_u16)
