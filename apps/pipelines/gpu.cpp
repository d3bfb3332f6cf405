// A mixed image pipeline of the kinds GPU schedulers must handle together: separable blur,
// histogram with a scan, resampling to another size, and a pointwise tone curve (equalisation).
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

#include <algorithm>

namespace {

using namespace Halide;

class MixedPipeline : public Generator<MixedPipeline> {
public:
  GeneratorParam<int> width{"width", 1920}; // input size, for the estimates
  GeneratorParam<int> height{"height", 1080};
  GeneratorParam<int> down{"down", 3}; // the output is up/down times the input's size
  GeneratorParam<int> up{"up", 2};

  Input<Buffer<uint8_t>> input{"input", 3}; // RGB, planar
  Output<Buffer<uint8_t>> output{"output", 3};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("gpu", width, 1, kMaxExtent);
    require_in_range("gpu", height, 1, kMaxExtent);
    require_in_range("gpu", up, 1, 16);
    // The output estimates are width · up / down by height · up / down: at least one pixel.
    require_in_range("gpu", down, 1, std::min(16, std::min(int(width), int(height)) * int(up)));

    Func clamped = BoundaryConditions::repeat_edge(input);
    Expr in_w = input.dim(0).extent(), in_h = input.dim(1).extent();

    // Separable [1 4 6 4 1] blur in 16-bit integers (16 · 16 · 255 fits).
    blur_x(x, y, c) = u16(clamped(x - 2, y, c)) + 4 * u16(clamped(x - 1, y, c)) +
                      6 * u16(clamped(x, y, c)) + 4 * u16(clamped(x + 1, y, c)) +
                      u16(clamped(x + 2, y, c));
    blurred(x, y, c) =
        cast<uint8_t>((blur_x(x, y - 2, c) + 4 * blur_x(x, y - 1, c) + 6 * blur_x(x, y, c) +
                       4 * blur_x(x, y + 1, c) + blur_x(x, y + 2, c) + 128) >>
                      8);

    // Histogram of the blurred image and its cumulative sum, turned into an equalising curve.
    RDom pixels(0, in_w, 0, in_h, 0, 3);
    histogram(v) = 0;
    histogram(cast<int>(blurred(pixels.x, pixels.y, pixels.z))) += 1;
    cdf(v) = histogram(0);
    RDom bins(1, 255);
    cdf(bins) = cdf(bins - 1) + histogram(bins);
    Expr total = cast<int64_t>(cdf(255));
    tone(v) = cast<uint8_t>((cast<int64_t>(cdf(v)) * 255 + total / 2) / total);

    // Bilinear resampling by up/down in 8.8 fixed point, pixel centres aligned.
    const int u = up, d = down;
    Expr sx = ((2 * x + 1) * d * 128) / u - 128;
    Expr sy = ((2 * y + 1) * d * 128) / u - 128;
    Expr x0 = sx >> 8, fx = sx & 255, y0 = sy >> 8, fy = sy & 255;
    // Coordinates clamp to the image, so rows of resample_x outside it repeat the edge rows.
    auto at = [&](Expr px, Expr py) {
      return cast<uint32_t>(blurred(clamp(px, 0, in_w - 1), clamp(py, 0, in_h - 1), c));
    };
    resample_x(x, y, c) = at(x0, y) * cast<uint32_t>(256 - fx) + at(x0 + 1, y) * cast<uint32_t>(fx);
    resampled(x, y, c) = cast<uint8_t>((resample_x(x, y0, c) * cast<uint32_t>(256 - fy) +
                                        resample_x(x, y0 + 1, c) * cast<uint32_t>(fy) + 32768) >>
                                       16);

    output(x, y, c) = tone(cast<int>(resampled(x, y, c)));

    input.set_estimates({{0, width}, {0, height}, {0, 3}});
    output.set_estimates({{0, int(width) * u / d}, {0, int(height) * u / d}, {0, 3}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"}, c{"c"}, v{"v"};
  Func blur_x{"blur_x"}, blurred{"blurred"}, histogram{"histogram"}, cdf{"cdf"}, tone{"tone"};
  Func resample_x{"resample_x"}, resampled{"resampled"};

  static Expr u16(Expr e) { return cast<uint16_t>(e); }
};

} // namespace

HALIDE_REGISTER_GENERATOR(MixedPipeline, gpu)
