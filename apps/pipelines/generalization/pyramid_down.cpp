// A four-level Gaussian pyramid of a float gray image (5-tap binomial blur, then every second
// pixel, per level), every level below the input an output of its own.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

#include <string>

namespace {

using namespace Halide;

class PyramidDown : public Generator<PyramidDown> {
public:
  GeneratorParam<int> width{"width", 2048}; // of the input, for the estimates
  GeneratorParam<int> height{"height", 2048};

  Input<Buffer<float>> input{"input", 2};
  Output<Buffer<float>> level1{"level1", 2}; // half the input's size
  Output<Buffer<float>> level2{"level2", 2}; // a quarter
  Output<Buffer<float>> level3{"level3", 2};
  Output<Buffer<float>> level4{"level4", 2};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("pyramid_down", width, 16, kMaxExtent);
    require_in_range("pyramid_down", height, 16, kMaxExtent);

    Func level = BoundaryConditions::repeat_edge(input);
    Func levels[4];
    for (int l = 0; l < 4; l++) {
      level = downsample(level, std::to_string(l + 1));
      levels[l] = level;
    }
    level1(x, y) = levels[0](x, y);
    level2(x, y) = levels[1](x, y);
    level3(x, y) = levels[2](x, y);
    level4(x, y) = levels[3](x, y);

    input.set_estimates({{0, width}, {0, height}});
    level1.set_estimates({{0, width / 2}, {0, height / 2}});
    level2.set_estimates({{0, width / 4}, {0, height / 4}});
    level3.set_estimates({{0, width / 8}, {0, height / 8}});
    level4.set_estimates({{0, width / 16}, {0, height / 16}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(level1);
      hkfac::pipelines::schedule_reference(level2);
      hkfac::pipelines::schedule_reference(level3);
      hkfac::pipelines::schedule_reference(level4);
    }
  }

private:
  Var x{"x"}, y{"y"};

  // Taps 1 4 6 4 1 over 16 in each direction, evaluated at every second pixel.
  Func downsample(Func f, const std::string &suffix) {
    Func blur_x("blur_x_" + suffix), down("down_" + suffix);
    blur_x(x, y) = (f(2 * x - 2, y) + 4 * f(2 * x - 1, y) + 6 * f(2 * x, y) + 4 * f(2 * x + 1, y) +
                    f(2 * x + 2, y)) *
                   (1.0f / 16);
    down(x, y) = (blur_x(x, 2 * y - 2) + 4 * blur_x(x, 2 * y - 1) + 6 * blur_x(x, 2 * y) +
                  4 * blur_x(x, 2 * y + 1) + blur_x(x, 2 * y + 2)) *
                 (1.0f / 16);
    return down;
  }
};

} // namespace

HALIDE_REGISTER_GENERATOR(PyramidDown, pyramid_down)
