// Lens vignetting correction of a float RGB image: a radial gain 1 + k1 r² + k2 r⁴ + k3 r⁶ (r
// relative to the half-diagonal), times a per-channel white balance.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class VignetteCorrect : public Generator<VignetteCorrect> {
public:
  GeneratorParam<int> width{"width", 4000}; // for the estimates: a 12-megapixel photo
  GeneratorParam<int> height{"height", 3000};

  Input<Buffer<float>> input{"input", 3}; // linear RGB
  Input<float> k1{"k1", 0.3f};            // radial gain polynomial in r²
  Input<float> k2{"k2", 0.1f};
  Input<float> k3{"k3", 0.05f};
  Input<float> wb_red{"wb_red", 1.9f}; // white balance gains
  Input<float> wb_green{"wb_green", 1.0f};
  Input<float> wb_blue{"wb_blue", 1.5f};
  Output<Buffer<float>> output{"output", 3};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("vignette_correct", width, 1, kMaxExtent);
    require_in_range("vignette_correct", height, 1, kMaxExtent);

    Expr cx = cast<float>(input.dim(0).extent() - 1) / 2;
    Expr cy = cast<float>(input.dim(1).extent() - 1) / 2;
    Expr dx = x - cx, dy = y - cy;
    radius_squared(x, y) = (dx * dx + dy * dy) / (cx * cx + cy * cy);
    Expr r2 = radius_squared(x, y);
    gain(x, y) = 1 + r2 * (k1 + r2 * (k2 + r2 * k3));
    output(x, y, c) = input(x, y, c) * gain(x, y) * mux(c, {wb_red, wb_green, wb_blue});

    input.set_estimates({{0, width}, {0, height}, {0, 3}});
    k1.set_estimate(0.3f);
    k2.set_estimate(0.1f);
    k3.set_estimate(0.05f);
    wb_red.set_estimate(1.9f);
    wb_green.set_estimate(1.0f);
    wb_blue.set_estimate(1.5f);
    output.set_estimates({{0, width}, {0, height}, {0, 3}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"}, c{"c"};
  Func radius_squared{"radius_squared"}, gain{"gain"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(VignetteCorrect, vignette_correct)
