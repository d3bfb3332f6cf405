// Synthetic depth of field from a stereo pair: depth by block matching over disparity slices,
// then a gather-form bokeh in which each neighbour contributes if its circle of confusion
// reaches this pixel.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class LensBlur : public Generator<LensBlur> {
public:
  GeneratorParam<int> slices{"slices", 32};        // disparities tried
  GeneratorParam<int> max_radius{"max_radius", 4}; // largest circle of confusion, pixels
  GeneratorParam<int> width{"width", 1536};        // for the estimates
  GeneratorParam<int> height{"height", 2560};

  Input<Buffer<uint8_t>> left{"left", 3}; // RGB
  Input<Buffer<uint8_t>> right{"right", 3};
  Input<int> focus_depth{"focus_depth", 13};                 // disparity in focus
  Input<float> blur_radius_scale{"blur_radius_scale", 0.5f}; // pixels per disparity step
  Output<Buffer<float>> output{"output", 3};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("lens_blur", slices, 1, 256);
    require_in_range("lens_blur", max_radius, 1, 32);
    require_in_range("lens_blur", width, 1, kMaxExtent);
    require_in_range("lens_blur", height, 1, kMaxExtent);

    Func left_c = BoundaryConditions::repeat_edge(left);
    Func right_c = BoundaryConditions::repeat_edge(right);

    // Matching cost of disparity z: colour distance to the right image shifted by z, 3×3 box.
    cost(x, y, z) = cast<uint16_t>(absd(left_c(x, y, 0), right_c(x - z, y, 0))) +
                    absd(left_c(x, y, 1), right_c(x - z, y, 1)) +
                    absd(left_c(x, y, 2), right_c(x - z, y, 2));
    cost_x(x, y, z) = cost(x - 1, y, z) + cost(x, y, z) + cost(x + 1, y, z);
    cost_box(x, y, z) = cost_x(x, y - 1, z) + cost_x(x, y, z) + cost_x(x, y + 1, z);

    RDom disparity(0, slices);
    depth(x, y) = argmin(cost_box(x, y, disparity))[0];

    // Circle of confusion in quarter pixels, integer so the comparison below is exact.
    const int r = max_radius;
    Expr defocus = cast<float>(abs(depth(x, y) - focus_depth)) * blur_radius_scale;
    coc(x, y) = cast<int>(min(defocus, cast<float>(r)) * 4);

    RDom d(-r, 2 * r + 1, -r, 2 * r + 1);
    d.where(d.x * d.x + d.y * d.y <= r * r);
    Expr distance = cast<int>(sqrt(cast<float>(d.x * d.x + d.y * d.y)) * 4);
    Expr reaches = coc(x + d.x, y + d.y) >= distance;
    Expr colour = select(c < 3, cast<float>(left_c(x + d.x, y + d.y, min(c, 2))), 1.0f);
    gathered(x, y, c) = 0.0f;
    gathered(x, y, c) += select(reaches, colour, 0.0f);

    // The weight channel is at least 1: the pixel itself is always at distance 0.
    output(x, y, c) = gathered(x, y, c) / gathered(x, y, 3) / 255.0f;

    left.set_estimates({{0, width}, {0, height}, {0, 3}});
    right.set_estimates({{0, width}, {0, height}, {0, 3}});
    focus_depth.set_estimate(13);
    blur_radius_scale.set_estimate(0.5f);
    output.set_estimates({{0, width}, {0, height}, {0, 3}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"}, z{"z"}, c{"c"};
  Func cost{"cost"}, cost_x{"cost_x"}, cost_box{"cost_box"}, depth{"depth"}, coc{"coc"};
  Func gathered{"gathered"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(LensBlur, lens_blur)
