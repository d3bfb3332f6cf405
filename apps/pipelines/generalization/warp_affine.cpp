// Rotation and zoom about the image centre of a float gray image: each output pixel is the
// bilinear sample of the input at its inverse-mapped position, black outside the input.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class WarpAffine : public Generator<WarpAffine> {
public:
  GeneratorParam<int> width{"width", 1920}; // for the estimates
  GeneratorParam<int> height{"height", 1080};

  Input<Buffer<float>> input{"input", 2}; // gray in [0, 1]
  Input<float> angle{"angle", 0.3f};      // radians, counter-clockwise on screen
  Input<float> zoom{"zoom", 0.8f};        // < 1 shrinks: the rotated corners stay in frame
  Output<Buffer<float>> output{"output", 2};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("warp_affine", width, 1, kMaxExtent);
    require_in_range("warp_affine", height, 1, kMaxExtent);

    Func padded = BoundaryConditions::constant_exterior(input, 0.0f);
    Expr w = input.dim(0).extent(), h = input.dim(1).extent();
    // Positions in double: in float, a position 2000 pixels out is off by 1e-4 pixels, and how
    // far off depends on how a schedule contracts the arithmetic.
    Expr cx = cast<double>(w - 1) / 2, cy = cast<double>(h - 1) / 2;
    Expr cos_a = cast<double>(cos(angle) / zoom), sin_a = cast<double>(sin(angle) / zoom);

    // The inverse map: rotate the output offset from the centre back by the angle and shrink it.
    Expr dx = x - cx, dy = y - cy;
    source_x(x, y) = cos_a * dx - sin_a * dy + cx;
    source_y(x, y) = sin_a * dx + cos_a * dy + cy;

    Expr sx = source_x(x, y), sy = source_y(x, y);
    // The floor in float: Halide 14 cannot fold floor of a double, which Li2018 needs to size
    // the input at the estimates. Rounding there only moves a weight of ~0 or ~1 to a neighbour.
    Expr left = cast<int>(floor(cast<float>(sx))), top = cast<int>(floor(cast<float>(sy)));
    Expr fx = cast<float>(sx - left), fy = cast<float>(sy - top);
    // Taps far outside read the border of zeros just outside the input, which bounds the reads.
    Expr x0 = clamp(left, -1, w), x1 = clamp(left + 1, -1, w);
    Expr y0 = clamp(top, -1, h), y1 = clamp(top + 1, -1, h);
    output(x, y) = lerp(lerp(padded(x0, y0), padded(x1, y0), fx),
                        lerp(padded(x0, y1), padded(x1, y1), fx), fy);

    input.set_estimates({{0, width}, {0, height}});
    angle.set_estimate(0.3f);
    zoom.set_estimate(0.8f);
    output.set_estimates({{0, width}, {0, height}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"};
  Func source_x{"source_x"}, source_y{"source_y"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(WarpAffine, warp_affine)
