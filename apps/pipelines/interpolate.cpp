// Multi-scale interpolation ("push-pull"): fill the transparent parts of an RGBA image from a
// pyramid of alpha-premultiplied downsamplings, then un-premultiply.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

#include <vector>

namespace {

using namespace Halide;

class Interpolate : public Generator<Interpolate> {
public:
  GeneratorParam<int> levels{"levels", 10};
  GeneratorParam<int> width{"width", 1536}; // for the estimates
  GeneratorParam<int> height{"height", 2560};

  Input<Buffer<float>> input{"input", 3};    // RGBA, alpha in [0, 1]
  Output<Buffer<float>> output{"output", 3}; // RGB

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    // 15 levels take the largest image down to one pixel; more would add nothing.
    require_in_range("interpolate", levels, 1, 15);
    require_in_range("interpolate", width, 1, kMaxExtent);
    require_in_range("interpolate", height, 1, kMaxExtent);

    Func clamped = BoundaryConditions::repeat_edge(input);
    const int n = levels;
    std::vector<Func> downsampled(n), interpolated(n);

    // Push: premultiply by alpha and build the pyramid with a [1 2 1] filter.
    downsampled[0] = Func("downsampled_0");
    downsampled[0](x, y, c) = select(c < 3, clamped(x, y, c) * clamped(x, y, 3), clamped(x, y, 3));
    for (int l = 1; l < n; l++) {
      Func prev = downsampled[l - 1];
      Func down_x("down_x_" + std::to_string(l));
      down_x(x, y, c) = (prev(2 * x - 1, y, c) + 2 * prev(2 * x, y, c) + prev(2 * x + 1, y, c)) / 4;
      downsampled[l] = Func("downsampled_" + std::to_string(l));
      downsampled[l](x, y, c) =
          (down_x(x, 2 * y - 1, c) + 2 * down_x(x, 2 * y, c) + down_x(x, 2 * y + 1, c)) / 4;
    }

    // Pull: each level keeps what it has and takes the rest from the upsampled coarser level.
    interpolated[n - 1] = downsampled[n - 1];
    for (int l = n - 2; l >= 0; l--) {
      Func coarse = interpolated[l + 1];
      Func up_x("up_x_" + std::to_string(l));
      up_x(x, y, c) = 0.25f * coarse(x / 2 - 1 + 2 * (x % 2), y, c) + 0.75f * coarse(x / 2, y, c);
      Func up("up_" + std::to_string(l));
      up(x, y, c) = 0.25f * up_x(x, y / 2 - 1 + 2 * (y % 2), c) + 0.75f * up_x(x, y / 2, c);
      interpolated[l] = Func("interpolated_" + std::to_string(l));
      interpolated[l](x, y, c) =
          downsampled[l](x, y, c) + (1.0f - downsampled[l](x, y, 3)) * up(x, y, c);
    }

    output(x, y, c) = interpolated[0](x, y, c) / interpolated[0](x, y, 3);

    input.set_estimates({{0, width}, {0, height}, {0, 4}});
    output.set_estimates({{0, width}, {0, height}, {0, 3}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"}, c{"c"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(Interpolate, interpolate)
