// Histogram equalisation of the luma channel of an RGB image, chroma kept (integer YCbCr).
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class Hist : public Generator<Hist> {
public:
  GeneratorParam<int> width{"width", 1536}; // for the estimates
  GeneratorParam<int> height{"height", 2560};

  Input<Buffer<uint8_t>> input{"input", 3}; // RGB, planar
  Output<Buffer<uint8_t>> output{"output", 3};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("hist", width, 1, kMaxExtent);
    require_in_range("hist", height, 1, kMaxExtent);

    Expr r = cast<int32_t>(input(x, y, 0));
    Expr g = cast<int32_t>(input(x, y, 1));
    Expr b = cast<int32_t>(input(x, y, 2));
    // BT.601 in 8-bit fixed point.
    Y(x, y) = (77 * r + 150 * g + 29 * b + 128) >> 8;
    Cb(x, y) = ((-43 * r - 85 * g + 128 * b + 128) >> 8) + 128;
    Cr(x, y) = ((128 * r - 107 * g - 21 * b + 128) >> 8) + 128;

    RDom pixels(0, input.dim(0).extent(), 0, input.dim(1).extent());
    histogram(v) = 0;
    histogram(clamp(Y(pixels.x, pixels.y), 0, 255)) += 1;
    cdf(v) = histogram(0);
    RDom bins(1, 255);
    cdf(bins) = cdf(bins - 1) + histogram(bins);

    // Map each luma level to its rank, scaled to [0, 255].
    Expr total = cast<int64_t>(cdf(255));
    equalize(v) = cast<int32_t>((cast<int64_t>(cdf(v)) * 255 + total / 2) / total);
    Expr y_eq = equalize(clamp(Y(x, y), 0, 255));
    Expr cb = Cb(x, y) - 128, cr = Cr(x, y) - 128;
    Expr rgb = mux(c, {y_eq + ((359 * cr) >> 8), y_eq - ((88 * cb + 183 * cr) >> 8),
                       y_eq + ((454 * cb) >> 8)});
    output(x, y, c) = cast<uint8_t>(clamp(rgb, 0, 255));

    input.set_estimates({{0, width}, {0, height}, {0, 3}});
    output.set_estimates({{0, width}, {0, height}, {0, 3}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"}, c{"c"}, v{"v"};
  Func Y{"Y"}, Cb{"Cb"}, Cr{"Cr"}, histogram{"histogram"}, cdf{"cdf"}, equalize{"equalize"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(Hist, hist)
