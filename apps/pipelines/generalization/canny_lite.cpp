// Canny-style edges of an 8-bit gray image in integer arithmetic: 5×5 binomial smoothing, Sobel
// gradients, non-maximum suppression along the quantized gradient direction, a double threshold
// and one step of hysteresis (a weak edge survives next to a strong one).
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class CannyLite : public Generator<CannyLite> {
public:
  GeneratorParam<int> width{"width", 1920}; // for the estimates
  GeneratorParam<int> height{"height", 1080};

  Input<Buffer<uint8_t>> input{"input", 2};
  Input<int> low_threshold{"low_threshold", 40};    // L1 gradient magnitude of a weak edge
  Input<int> high_threshold{"high_threshold", 100}; // and of a strong one
  Output<Buffer<uint8_t>> output{"output", 2};      // 255 on edges, 0 elsewhere

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("canny_lite", width, 1, kMaxExtent);
    require_in_range("canny_lite", height, 1, kMaxExtent);

    Func clamped = BoundaryConditions::repeat_edge(input);
    blur_x(x, y) = binomial5(cast<uint16_t>(clamped(x - 2, y)), cast<uint16_t>(clamped(x - 1, y)),
                             cast<uint16_t>(clamped(x, y)), cast<uint16_t>(clamped(x + 1, y)),
                             cast<uint16_t>(clamped(x + 2, y)));
    blur_y(x, y) = binomial5(blur_x(x, y - 2), blur_x(x, y - 1), blur_x(x, y), blur_x(x, y + 1),
                             blur_x(x, y + 2));
    smoothed(x, y) = cast<int16_t>((blur_y(x, y) + 128) >> 8);

    // At most 4 · 255 in magnitude each.
    grad_x(x, y) = (smoothed(x + 1, y - 1) + 2 * smoothed(x + 1, y) + smoothed(x + 1, y + 1)) -
                   (smoothed(x - 1, y - 1) + 2 * smoothed(x - 1, y) + smoothed(x - 1, y + 1));
    grad_y(x, y) = (smoothed(x - 1, y + 1) + 2 * smoothed(x, y + 1) + smoothed(x + 1, y + 1)) -
                   (smoothed(x - 1, y - 1) + 2 * smoothed(x, y - 1) + smoothed(x + 1, y - 1));
    magnitude(x, y) = abs(grad_x(x, y)) + abs(grad_y(x, y));

    // Direction in four bins by tan(22.5°) ≈ 53/128 and tan(67.5°) ≈ 309/128: 0 mostly along x,
    // 1 mostly along y, 2 the diagonal where gx and gy share a sign (y points down), 3 the other.
    Expr ax = cast<int32_t>(abs(grad_x(x, y))), ay = cast<int32_t>(abs(grad_y(x, y)));
    Expr same_sign = (grad_x(x, y) > 0) == (grad_y(x, y) > 0);
    direction(x, y) = select(128 * ay <= 53 * ax, cast<uint8_t>(0), 128 * ay >= 309 * ax,
                             cast<uint8_t>(1), same_sign, cast<uint8_t>(2), cast<uint8_t>(3));

    // A pixel survives if it beats its first neighbour along the gradient and ties at most with
    // the second, so a plateau two pixels wide keeps one of them.
    Expr d = direction(x, y);
    Expr before = select(d == 0, magnitude(x - 1, y), d == 1, magnitude(x, y - 1), d == 2,
                         magnitude(x - 1, y - 1), magnitude(x + 1, y - 1));
    Expr after = select(d == 0, magnitude(x + 1, y), d == 1, magnitude(x, y + 1), d == 2,
                        magnitude(x + 1, y + 1), magnitude(x - 1, y + 1));
    Expr m = magnitude(x, y);
    suppressed(x, y) = select(m > before && m >= after, m, cast<uint16_t>(0));

    // 2 strong, 1 weak, 0 none.
    Expr s = cast<int32_t>(suppressed(x, y));
    edge_class(x, y) = select(s >= high_threshold, cast<uint8_t>(2), s >= low_threshold,
                              cast<uint8_t>(1), cast<uint8_t>(0));
    Expr strongest_neighbour = cast<uint8_t>(0);
    for (int dy = -1; dy <= 1; dy++) {
      for (int dx = -1; dx <= 1; dx++) {
        strongest_neighbour = max(strongest_neighbour, edge_class(x + dx, y + dy));
      }
    }
    Expr c = edge_class(x, y);
    output(x, y) = select(c == 2 || (c == 1 && strongest_neighbour == 2), cast<uint8_t>(255),
                          cast<uint8_t>(0));

    input.set_estimates({{0, width}, {0, height}});
    low_threshold.set_estimate(40);
    high_threshold.set_estimate(100);
    output.set_estimates({{0, width}, {0, height}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"};
  Func blur_x{"blur_x"}, blur_y{"blur_y"}, smoothed{"smoothed"}, grad_x{"grad_x"}, grad_y{"grad_y"},
      magnitude{"magnitude"}, direction{"direction"}, suppressed{"suppressed"},
      edge_class{"edge_class"};

  // Taps 1 4 6 4 1: the sum of two passes stays within uint16 for 8-bit data.
  static Expr binomial5(Expr a, Expr b, Expr c, Expr d, Expr e) {
    return a + 4 * b + 6 * c + 4 * d + e;
  }
};

} // namespace

HALIDE_REGISTER_GENERATOR(CannyLite, canny_lite)
