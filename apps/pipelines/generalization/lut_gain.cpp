// Per-channel gains on a float RGB image, then a gamma tone curve through a 1024-entry lookup
// table computed in the pipeline and read at the scaled value.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class LutGain : public Generator<LutGain> {
public:
  GeneratorParam<int> width{"width", 1920}; // for the estimates
  GeneratorParam<int> height{"height", 1080};

  Input<Buffer<float>> input{"input", 3}; // linear RGB in [0, 1]
  Input<float> gain_r{"gain_r", 1.0f};
  Input<float> gain_g{"gain_g", 1.0f};
  Input<float> gain_b{"gain_b", 1.0f};
  Input<float> gamma{"gamma", 1 / 2.2f}; // exponent of the tone curve
  Output<Buffer<float>> output{"output", 3};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("lut_gain", width, 1, kMaxExtent);
    require_in_range("lut_gain", height, 1, kMaxExtent);

    const int lut_size = 1024;
    lut(i) = pow(cast<float>(i) / (lut_size - 1), gamma);

    Expr scaled = input(x, y, c) * mux(c, {gain_r, gain_g, gain_b});
    output(x, y, c) = lut(clamp(cast<int>(scaled * (lut_size - 1.0f)), 0, lut_size - 1));

    input.set_estimates({{0, width}, {0, height}, {0, 3}});
    gain_r.set_estimate(1.0f);
    gain_g.set_estimate(1.0f);
    gain_b.set_estimate(1.0f);
    gamma.set_estimate(1 / 2.2f);
    output.set_estimates({{0, width}, {0, height}, {0, 3}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"}, c{"c"}, i{"i"};
  Func lut{"lut"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(LutGain, lut_gain)
