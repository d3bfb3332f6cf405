// A 3×3 convolution layer with bias and ReLU, as in ResNet-style networks (channels innermost).
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class ConvLayer : public Generator<ConvLayer> {
public:
  GeneratorParam<int> batch{"batch", 5};
  GeneratorParam<int> in_channels{"in_channels", 128};
  GeneratorParam<int> out_channels{"out_channels", 128};
  GeneratorParam<int> width{"width", 100}; // output size; the input has a one-pixel border
  GeneratorParam<int> height{"height", 100};

  Input<Buffer<float>> input{"input", 4};   // (ci, x, y, n)
  Input<Buffer<float>> filter{"filter", 4}; // (ci, fx, fy, co)
  Input<Buffer<float>> bias{"bias", 1};     // (co)
  Output<Buffer<float>> relu{"relu", 4};    // (co, x, y, n)

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("conv_layer", batch, 1, 1024);
    require_in_range("conv_layer", in_channels, 1, 4096);
    require_in_range("conv_layer", out_channels, 1, 4096);
    require_in_range("conv_layer", width, 1, kMaxExtent);
    require_in_range("conv_layer", height, 1, kMaxExtent);

    RDom r(0, in_channels, 0, 3, 0, 3);
    conv(c, x, y, n) = bias(c);
    conv(c, x, y, n) += filter(r.x, r.y, r.z, c) * input(r.x, x + r.y, y + r.z, n);
    relu(c, x, y, n) = max(0.0f, conv(c, x, y, n));

    input.dim(0).set_bounds(0, in_channels);
    filter.dim(0).set_bounds(0, in_channels).dim(1).set_bounds(0, 3).dim(2).set_bounds(0, 3);
    input.set_estimates({{0, in_channels}, {0, width + 2}, {0, height + 2}, {0, batch}});
    filter.set_estimates({{0, in_channels}, {0, 3}, {0, 3}, {0, out_channels}});
    bias.set_estimates({{0, out_channels}});
    relu.set_estimates({{0, out_channels}, {0, width}, {0, height}, {0, batch}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(relu);
    }
  }

private:
  Var c{"c"}, x{"x"}, y{"y"}, n{"n"};
  Func conv{"conv"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(ConvLayer, conv_layer)
