// Histogram equalization of a 16-bit gray image over 1024 bins (the top 10 bits): a histogram
// over every pixel, its running sum, and the normalized sum applied as a lookup table.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class HistogramEqualize : public Generator<HistogramEqualize> {
public:
  GeneratorParam<int> width{"width", 3840}; // for the estimates
  GeneratorParam<int> height{"height", 2160};

  Input<Buffer<uint16_t>> input{"input", 2};
  Output<Buffer<uint16_t>> output{"output", 2};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("histogram_equalize", width, 1, kMaxExtent);
    require_in_range("histogram_equalize", height, 1, kMaxExtent);

    const int bins = 1024;
    bin(x, y) = clamp(cast<int32_t>(input(x, y) >> 6), 0, bins - 1);

    RDom pixels(0, input.dim(0).extent(), 0, input.dim(1).extent());
    histogram(b) = 0;
    histogram(bin(pixels.x, pixels.y)) += 1;

    RDom rest(1, bins - 1);
    cdf(b) = histogram(0);
    cdf(rest) = cdf(rest - 1) + histogram(rest);

    // The fraction of pixels at or below the bin, rounded to 16 bits; int64 as 65535 times a
    // pixel count overflows int32 past 32768 pixels.
    Expr total = cast<int64_t>(cdf(bins - 1));
    equalize(b) = cast<uint16_t>((cast<int64_t>(cdf(b)) * 65535 + total / 2) / total);
    output(x, y) = equalize(bin(x, y));

    input.set_estimates({{0, width}, {0, height}});
    output.set_estimates({{0, width}, {0, height}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"}, b{"b"};
  Func bin{"bin"}, histogram{"histogram"}, cdf{"cdf"}, equalize{"equalize"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(HistogramEqualize, histogram_equalize)
