// Bilinear resize of a float RGB image by a run-time scale factor (pixel centres aligned), as a
// horizontal then a vertical interpolation.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class ResizeBilinear : public Generator<ResizeBilinear> {
public:
  GeneratorParam<int> width{"width", 3840}; // of the input, for the estimates
  GeneratorParam<int> height{"height", 2160};

  Input<Buffer<float>> input{"input", 3}; // RGB in [0, 1]
  Input<float> scale{"scale", 0.5f};      // output size / input size
  Output<Buffer<float>> output{"output", 3};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("resize_bilinear", width, 2, kMaxExtent);
    require_in_range("resize_bilinear", height, 2, kMaxExtent);

    Func clamped = BoundaryConditions::repeat_edge(input);
    // Output pixel centre x + 1/2 lies at (x + 1/2) / scale in the input.
    Expr source_x = (x + 0.5f) / scale - 0.5f;
    Expr source_y = (y + 0.5f) / scale - 0.5f;
    Expr left = cast<int>(floor(source_x)), top = cast<int>(floor(source_y));
    Expr fx = source_x - left, fy = source_y - top;

    // Indexed by output column and input row.
    interpolated_x(x, y, c) = lerp(clamped(left, y, c), clamped(left + 1, y, c), fx);
    output(x, y, c) = lerp(interpolated_x(x, top, c), interpolated_x(x, top + 1, c), fy);

    input.set_estimates({{0, width}, {0, height}, {0, 3}});
    scale.set_estimate(0.5f);
    output.set_estimates({{0, width / 2}, {0, height / 2}, {0, 3}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"}, c{"c"};
  Func interpolated_x{"interpolated_x"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(ResizeBilinear, resize_bilinear)
