// Stereo block matching of a rectified 8-bit pair: for each left pixel, the disparity in
// [0, max_disparity) whose 5×5 sum of absolute differences against the right image is smallest
// (the first on ties).
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class StereoSad : public Generator<StereoSad> {
public:
  GeneratorParam<int> max_disparity{"max_disparity", 32};
  GeneratorParam<int> width{"width", 1280}; // for the estimates
  GeneratorParam<int> height{"height", 720};

  Input<Buffer<uint8_t>> left{"left", 2};
  Input<Buffer<uint8_t>> right{"right", 2};
  Output<Buffer<uint8_t>> output{"output", 2}; // disparity: left(x) matches right(x - d)

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("stereo_sad", max_disparity, 1, 256);
    require_in_range("stereo_sad", width, 1, kMaxExtent);
    require_in_range("stereo_sad", height, 1, kMaxExtent);

    Func left_clamped = BoundaryConditions::repeat_edge(left);
    Func right_clamped = BoundaryConditions::repeat_edge(right);
    cost(x, y, d) = cast<uint16_t>(absd(left_clamped(x, y), right_clamped(x - d, y)));

    // A 5×5 window of 8-bit differences sums to at most 6375: uint16.
    Expr row = cast<uint16_t>(0);
    for (int i = -2; i <= 2; i++) {
      row += cost(x + i, y, d);
    }
    sad_x(x, y, d) = row;
    Expr window = cast<uint16_t>(0);
    for (int i = -2; i <= 2; i++) {
      window += sad_x(x, y + i, d);
    }
    sad(x, y, d) = window;

    RDom disparity(0, max_disparity);
    best(x, y) = argmin(sad(x, y, disparity));
    output(x, y) = cast<uint8_t>(best(x, y)[0]);

    left.set_estimates({{0, width}, {0, height}});
    right.set_estimates({{0, width}, {0, height}});
    output.set_estimates({{0, width}, {0, height}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"}, d{"d"};
  Func cost{"cost"}, sad_x{"sad_x"}, sad{"sad"}, best{"best"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(StereoSad, stereo_sad)
