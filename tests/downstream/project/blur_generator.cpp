// A 3x3 box blur with a boundary condition, left for an autoscheduler to schedule.
#include "Halide.h"

namespace {

class Blur : public Halide::Generator<Blur> {
public:
  Input<Buffer<float>> input{"input", 2};
  Output<Buffer<float>> output{"output", 2};

  void generate() {
    using namespace Halide;
    Var x("x"), y("y");
    Func clamped = BoundaryConditions::repeat_edge(input);
    Func blur_x("blur_x");
    blur_x(x, y) = (clamped(x - 1, y) + clamped(x, y) + clamped(x + 1, y)) / 3;
    output(x, y) = (blur_x(x, y - 1) + blur_x(x, y) + blur_x(x, y + 1)) / 3;
    input.set_estimates({{0, 512}, {0, 256}});
    output.set_estimates({{0, 512}, {0, 256}});
  }
};

} // namespace

HALIDE_REGISTER_GENERATOR(Blur, downstream_blur)
