// First-order recursive smoothing along the rows of a 16-bit gray image in fixed point, left to
// right then right to left: each pass is a scan along the innermost dimension.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class IirRowsU16 : public Generator<IirRowsU16> {
public:
  GeneratorParam<int> width{"width", 1920}; // for the estimates
  GeneratorParam<int> height{"height", 1080};

  Input<Buffer<uint16_t>> input{"input", 2};
  Input<int> alpha{"alpha", 64}; // weight of the new sample, in 1/256 (0 to 256)
  Output<Buffer<uint16_t>> output{"output", 2};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("iir_rows_u16", width, 2, kMaxExtent);
    require_in_range("iir_rows_u16", height, 1, kMaxExtent);

    Expr w = input.dim(0).extent();
    // y[x] = y[prev] + round(alpha (s[x] - y[prev]) / 256) stays between its two terms, so
    // within uint16, and the products within int32.
    smoothed(x, y) = cast<int32_t>(input(x, y));
    RDom forward(1, w - 1);
    Expr prev = smoothed(forward - 1, y);
    smoothed(forward, y) = prev + (((smoothed(forward, y) - prev) * alpha + 128) >> 8);
    RDom backward(1, w - 1);
    Expr xb = w - 1 - backward;
    Expr next = smoothed(xb + 1, y);
    smoothed(xb, y) = next + (((smoothed(xb, y) - next) * alpha + 128) >> 8);
    output(x, y) = cast<uint16_t>(smoothed(x, y));

    input.set_estimates({{0, width}, {0, height}});
    alpha.set_estimate(64);
    output.set_estimates({{0, width}, {0, height}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"};
  Func smoothed{"smoothed"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(IirRowsU16, iir_rows_u16)
