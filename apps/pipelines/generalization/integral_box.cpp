// Box filter of radius 8 on an 8-bit gray image from four lookups into its integral image, which
// two scans build (along x, then along y); the window is cut at the borders and the mean taken
// over what remains.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class IntegralBox : public Generator<IntegralBox> {
public:
  GeneratorParam<int> width{"width", 1920}; // for the estimates
  GeneratorParam<int> height{"height", 1080};

  Input<Buffer<uint8_t>> input{"input", 2};
  Output<Buffer<uint8_t>> output{"output", 2};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("integral_box", width, 1, kMaxExtent);
    require_in_range("integral_box", height, 1, kMaxExtent);

    const int radius = 8;
    Expr w = input.dim(0).extent(), h = input.dim(1).extent();

    // integral(x, y): the sum of the pixels left of column x and above row y, for x in [0, w]
    // and y in [0, h]; uint32 holds 255 · w · h up to 4096 × 4096.
    row_prefix(x, y) = cast<uint32_t>(0);
    RDom along_x(1, w);
    row_prefix(along_x, y) = row_prefix(along_x - 1, y) + cast<uint32_t>(input(along_x - 1, y));
    integral(x, y) = cast<uint32_t>(0);
    RDom along_y(1, h);
    integral(x, along_y) = integral(x, along_y - 1) + row_prefix(x, along_y - 1);

    Expr x0 = clamp(x - radius, 0, w), x1 = clamp(x + radius + 1, 0, w);
    Expr y0 = clamp(y - radius, 0, h), y1 = clamp(y + radius + 1, 0, h);
    box_sum(x, y) = integral(x1, y1) - integral(x0, y1) - integral(x1, y0) + integral(x0, y0);
    Expr area = cast<uint32_t>((x1 - x0) * (y1 - y0));
    output(x, y) = cast<uint8_t>((box_sum(x, y) + area / 2) / area);

    input.set_estimates({{0, width}, {0, height}});
    output.set_estimates({{0, width}, {0, height}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"};
  Func row_prefix{"row_prefix"}, integral{"integral"}, box_sum{"box_sum"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(IntegralBox, integral_box)
