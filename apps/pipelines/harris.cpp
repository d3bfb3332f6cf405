// Harris corner response: structure tensor of Sobel gradients, summed over a 3×3 window,
// scored as det − k·trace².
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class Harris : public Generator<Harris> {
public:
  GeneratorParam<int> width{"width", 1536}; // for the estimates
  GeneratorParam<int> height{"height", 2560};

  Input<Buffer<float>> input{"input", 3}; // RGB in [0, 1]
  Output<Buffer<float>> output{"output", 2};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("harris", width, 1, kMaxExtent);
    require_in_range("harris", height, 1, kMaxExtent);

    Func clamped = BoundaryConditions::repeat_edge(input);
    gray(x, y) = 0.299f * clamped(x, y, 0) + 0.587f * clamped(x, y, 1) + 0.114f * clamped(x, y, 2);

    // Sobel gradients.
    Iy(x, y) = (gray(x - 1, y + 1) + 2 * gray(x, y + 1) + gray(x + 1, y + 1) - gray(x - 1, y - 1) -
                2 * gray(x, y - 1) - gray(x + 1, y - 1)) /
               8;
    Ix(x, y) = (gray(x + 1, y - 1) + 2 * gray(x + 1, y) + gray(x + 1, y + 1) - gray(x - 1, y - 1) -
                2 * gray(x - 1, y) - gray(x - 1, y + 1)) /
               8;

    Ixx(x, y) = Ix(x, y) * Ix(x, y);
    Iyy(x, y) = Iy(x, y) * Iy(x, y);
    Ixy(x, y) = Ix(x, y) * Iy(x, y);
    Sxx(x, y) = box3x3(Ixx);
    Syy(x, y) = box3x3(Iyy);
    Sxy(x, y) = box3x3(Ixy);

    const float k = 0.04f;
    Expr det = Sxx(x, y) * Syy(x, y) - Sxy(x, y) * Sxy(x, y);
    Expr trace = Sxx(x, y) + Syy(x, y);
    output(x, y) = det - k * trace * trace;

    input.set_estimates({{0, width}, {0, height}, {0, 3}});
    output.set_estimates({{0, width}, {0, height}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"};
  Func gray{"gray"}, Ix{"Ix"}, Iy{"Iy"}, Ixx{"Ixx"}, Iyy{"Iyy"}, Ixy{"Ixy"};
  Func Sxx{"Sxx"}, Syy{"Syy"}, Sxy{"Sxy"};

  Expr box3x3(Func f) {
    Expr sum = 0.0f;
    for (int dy = -1; dy <= 1; dy++) {
      for (int dx = -1; dx <= 1; dx++) {
        sum += f(x + dx, y + dy);
      }
    }
    return sum;
  }
};

} // namespace

HALIDE_REGISTER_GENERATOR(Harris, harris)
