// A squeeze-and-excitation block (Hu et al. 2018) on a batch of NCHW feature maps: each channel's
// global average, two small fully connected layers (ReLU, then sigmoid), and every channel scaled
// by its gate. A full-image reduction per channel feeding a tiny MLP feeding a pointwise scale.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class SqueezeExcite : public Generator<SqueezeExcite> {
public:
  GeneratorParam<int> width{"width", 56}; // for the estimates
  GeneratorParam<int> height{"height", 56};
  GeneratorParam<int> channels{"channels", 128};
  GeneratorParam<int> hidden{"hidden", 8}; // channels / 16, the paper's reduction
  GeneratorParam<int> batch{"batch", 8};

  Input<Buffer<float>> input{"input", 4}; // (x, y, c, n)
  Input<Buffer<float>> w1{"w1", 2};       // (k, c): channels -> hidden
  Input<Buffer<float>> b1{"b1", 1};       // (k)
  Input<Buffer<float>> w2{"w2", 2};       // (c, k): hidden -> channels
  Input<Buffer<float>> b2{"b2", 1};       // (c)
  Output<Buffer<float>> output{"output", 4};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("squeeze_excite", width, 1, kMaxExtent);
    require_in_range("squeeze_excite", height, 1, kMaxExtent);
    require_in_range("squeeze_excite", channels, 1, 1 << 14);
    require_in_range("squeeze_excite", hidden, 1, 1 << 14);
    require_in_range("squeeze_excite", batch, 1, 1 << 12);

    RDom xy(0, input.dim(0).extent(), 0, input.dim(1).extent());
    Expr pixels = cast<float>(input.dim(0).extent() * input.dim(1).extent());
    pooled(c, n) = 0.0f;
    pooled(c, n) += input(xy.x, xy.y, c, n);
    RDom rc(0, input.dim(2).extent());
    squeezed(k, n) = b1(k);
    squeezed(k, n) += w1(k, rc) * (pooled(rc, n) / pixels);
    RDom rk(0, w1.dim(0).extent());
    excited(c, n) = b2(c);
    excited(c, n) += w2(c, rk) * max(squeezed(rk, n), 0.0f);
    gate(c, n) = 1.0f / (1.0f + exp(-excited(c, n)));
    output(x, y, c, n) = input(x, y, c, n) * gate(c, n);

    input.set_estimates({{0, width}, {0, height}, {0, channels}, {0, batch}});
    w1.set_estimates({{0, hidden}, {0, channels}});
    b1.set_estimates({{0, hidden}});
    w2.set_estimates({{0, channels}, {0, hidden}});
    b2.set_estimates({{0, channels}});
    output.set_estimates({{0, width}, {0, height}, {0, channels}, {0, batch}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"}, c{"c"}, k{"k"}, n{"n"};
  Func pooled{"pooled"}, squeezed{"squeezed"}, excited{"excited"}, gate{"gate"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(SqueezeExcite, squeeze_excite)
