// Global Reinhard tone mapping of a float RGB radiance image: the log-average luminance from a
// reduction over every pixel (row sums, then their sum), then L(1 + L/white²)/(1 + L) per pixel
// with the colour ratios kept.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class ToneMapReinhard : public Generator<ToneMapReinhard> {
public:
  GeneratorParam<int> width{"width", 1920}; // for the estimates
  GeneratorParam<int> height{"height", 1080};

  Input<Buffer<float>> input{"input", 3}; // linear RGB radiance, >= 0
  Input<float> key{"key", 0.18f};         // the luminance the log-average maps to
  Input<float> white{"white", 2.0f};      // the smallest scaled luminance mapped to 1
  Output<Buffer<float>> output{"output", 3};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("tone_map_reinhard", width, 1, kMaxExtent);
    require_in_range("tone_map_reinhard", height, 1, kMaxExtent);

    luminance(x, y) =
        0.2126f * input(x, y, 0) + 0.7152f * input(x, y, 1) + 0.0722f * input(x, y, 2);

    // Rows first: float sums of a few thousand terms keep their precision.
    const float delta = 1e-4f; // keeps log finite on black pixels
    RDom columns(0, input.dim(0).extent());
    row_log_sum(y) = 0.0f;
    row_log_sum(y) += log(delta + luminance(columns, y));
    RDom rows(0, input.dim(1).extent());
    log_sum() = 0.0f;
    log_sum() += row_log_sum(rows);
    Expr pixels = cast<float>(input.dim(0).extent()) * cast<float>(input.dim(1).extent());
    log_average() = exp(log_sum() / pixels);

    Expr L = key / log_average() * luminance(x, y);
    mapped_luminance(x, y) = L * (1 + L / (white * white)) / (1 + L);
    ratio(x, y) = mapped_luminance(x, y) / max(luminance(x, y), 1e-6f);
    output(x, y, c) = input(x, y, c) * ratio(x, y);

    input.set_estimates({{0, width}, {0, height}, {0, 3}});
    key.set_estimate(0.18f);
    white.set_estimate(2.0f);
    output.set_estimates({{0, width}, {0, height}, {0, 3}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"}, c{"c"};
  Func luminance{"luminance"}, row_log_sum{"row_log_sum"}, log_sum{"log_sum"},
      log_average{"log_average"}, mapped_luminance{"mapped_luminance"}, ratio{"ratio"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(ToneMapReinhard, tone_map_reinhard)
