// Local contrast normalization of a float RGB image: each channel minus its 9×9 box mean, divided
// by its 9×9 box standard deviation (floored), scaled and offset back to a displayable range.
// The box sums are RDom reductions along x then y, as users write them with sum().
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class LocalContrast : public Generator<LocalContrast> {
public:
  GeneratorParam<int> width{"width", 1920}; // for the estimates
  GeneratorParam<int> height{"height", 1080};

  Input<Buffer<float>> input{"input", 3}; // (x, y, c)
  Input<float> strength{"strength"};
  Output<Buffer<float>> output{"output", 3};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("local_contrast", width, 1, kMaxExtent);
    require_in_range("local_contrast", height, 1, kMaxExtent);

    const int radius = 4;
    const float area = float((2 * radius + 1) * (2 * radius + 1));
    Func clamped = BoundaryConditions::mirror_interior(input);
    squared(x, y, c) = clamped(x, y, c) * clamped(x, y, c);
    RDom r(-radius, 2 * radius + 1);
    sum_x(x, y, c) = sum(clamped(x + r, y, c));
    sum_sq_x(x, y, c) = sum(squared(x + r, y, c));
    mean(x, y, c) = sum(sum_x(x, y + r, c)) / area;
    Expr mean_sq = sum(sum_sq_x(x, y + r, c)) / area;
    stddev(x, y, c) = sqrt(max(mean_sq - mean(x, y, c) * mean(x, y, c), 1e-4f));
    output(x, y, c) = 0.5f + strength * (input(x, y, c) - mean(x, y, c)) / stddev(x, y, c);

    input.set_estimates({{0, width}, {0, height}, {0, 3}});
    strength.set_estimate(0.25f);
    output.set_estimates({{0, width}, {0, height}, {0, 3}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"}, c{"c"};
  Func squared{"squared"}, sum_x{"sum_x"}, sum_sq_x{"sum_sq_x"}, mean{"mean"}, stddev{"stddev"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(LocalContrast, local_contrast)
