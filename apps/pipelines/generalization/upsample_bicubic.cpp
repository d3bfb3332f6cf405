// 2× bicubic (Catmull-Rom) upsampling of a float gray image, separable, pixel centres aligned.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class UpsampleBicubic : public Generator<UpsampleBicubic> {
public:
  GeneratorParam<int> width{"width", 1920}; // of the input, for the estimates
  GeneratorParam<int> height{"height", 1080};

  Input<Buffer<float>> input{"input", 2}; // gray in [0, 1]
  Output<Buffer<float>> output{"output", 2};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("upsample_bicubic", width, 1, kMaxExtent / 2);
    require_in_range("upsample_bicubic", height, 1, kMaxExtent / 2);

    // Output pixel 2i samples the input at i - 1/4 (3/4 of the way from i - 1 to i), output
    // pixel 2i + 1 at i + 1/4; so the taps start at (x - 1) / 2 - 1 (floor division).
    Func clamped = BoundaryConditions::repeat_edge(input);
    Expr sum_x = 0.0f;
    for (int k = 0; k < 4; k++) {
      sum_x += phase_weight(x, k) * clamped((x - 1) / 2 - 1 + k, y);
    }
    upsampled_x(x, y) = sum_x;
    Expr sum_y = 0.0f;
    for (int k = 0; k < 4; k++) {
      sum_y += phase_weight(y, k) * upsampled_x(x, (y - 1) / 2 - 1 + k);
    }
    output(x, y) = sum_y;

    input.set_estimates({{0, width}, {0, height}});
    output.set_estimates({{0, 2 * width}, {0, 2 * height}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"};
  Func upsampled_x{"upsampled_x"};

  // Catmull-Rom weight of tap k (0..3, taps at -1, 0, 1, 2) for a sample t in [0, 1) past tap 1.
  static float catmull_rom(float t, int k) {
    switch (k) {
    case 0:
      return ((-t + 2) * t - 1) * t / 2;
    case 1:
      return ((3 * t - 5) * t * t + 2) / 2;
    case 2:
      return ((-3 * t + 4) * t + 1) * t / 2;
    default:
      return (t - 1) * t * t / 2;
    }
  }

  // The weight of tap k for output coordinate v: even outputs sit at t = 3/4, odd at 1/4.
  static Expr phase_weight(Expr v, int k) {
    return select(v % 2 == 0, catmull_rom(0.75f, k), catmull_rom(0.25f, k));
  }
};

} // namespace

HALIDE_REGISTER_GENERATOR(UpsampleBicubic, upsample_bicubic)
