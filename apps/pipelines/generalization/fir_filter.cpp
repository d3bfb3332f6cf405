// A multichannel FIR filter over a 1-D signal (audio-like): y(t, c) = Σ_k taps(k)·x(t + k - k/2, c),
// zero outside the signal. The taps are an input, so the reduction's extent is the taps' own.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class FirFilter : public Generator<FirFilter> {
public:
  GeneratorParam<int> samples{"samples", 1 << 18}; // for the estimates
  GeneratorParam<int> channels{"channels", 8};
  GeneratorParam<int> num_taps{"num_taps", 63};

  Input<Buffer<float>> signal{"signal", 2}; // (t, c)
  Input<Buffer<float>> taps{"taps", 1};     // (k)
  Output<Buffer<float>> output{"output", 2};

  void generate() {
    using hkfac::pipelines::require_in_range;
    require_in_range("fir_filter", samples, 1, 1 << 26);
    require_in_range("fir_filter", channels, 1, 1024);
    require_in_range("fir_filter", num_taps, 1, 4096);

    Func padded = BoundaryConditions::constant_exterior(signal, 0.0f);
    Expr half = taps.dim(0).extent() / 2;
    RDom k(0, taps.dim(0).extent());
    filtered(t, c) = 0.0f;
    filtered(t, c) += taps(k) * padded(t + k - half, c);
    output(t, c) = filtered(t, c);

    signal.set_estimates({{0, samples}, {0, channels}});
    taps.set_estimates({{0, num_taps}});
    output.set_estimates({{0, samples}, {0, channels}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var t{"t"}, c{"c"};
  Func filtered{"filtered"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(FirFilter, fir_filter)
