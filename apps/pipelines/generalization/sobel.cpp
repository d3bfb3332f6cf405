// Gradient magnitude of a float gray image from 3×3 Sobel derivatives.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class Sobel : public Generator<Sobel> {
public:
  GeneratorParam<int> width{"width", 1920}; // for the estimates
  GeneratorParam<int> height{"height", 1080};

  Input<Buffer<float>> input{"input", 2}; // gray in [0, 1]
  Output<Buffer<float>> output{"output", 2};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("sobel", width, 1, kMaxExtent);
    require_in_range("sobel", height, 1, kMaxExtent);

    Func in = BoundaryConditions::repeat_edge(input);
    grad_x(x, y) = (in(x + 1, y - 1) + 2 * in(x + 1, y) + in(x + 1, y + 1)) -
                   (in(x - 1, y - 1) + 2 * in(x - 1, y) + in(x - 1, y + 1));
    grad_y(x, y) = (in(x - 1, y + 1) + 2 * in(x, y + 1) + in(x + 1, y + 1)) -
                   (in(x - 1, y - 1) + 2 * in(x, y - 1) + in(x + 1, y - 1));
    output(x, y) = sqrt(grad_x(x, y) * grad_x(x, y) + grad_y(x, y) * grad_y(x, y));

    input.set_estimates({{0, width}, {0, height}});
    output.set_estimates({{0, width}, {0, height}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"};
  Func grad_x{"grad_x"}, grad_y{"grad_y"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(Sobel, sobel)
