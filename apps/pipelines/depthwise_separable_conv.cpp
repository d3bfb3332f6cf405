// MobileNet's depthwise-separable block: 3×3 depthwise convolution + ReLU, then a 1×1 pointwise
// convolution + ReLU, with zero padding so the output keeps the input's size.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class DepthwiseSeparableConv : public Generator<DepthwiseSeparableConv> {
public:
  GeneratorParam<int> batch{"batch", 4};
  GeneratorParam<int> in_channels{"in_channels", 32};
  GeneratorParam<int> out_channels{"out_channels", 64};
  GeneratorParam<int> width{"width", 112};
  GeneratorParam<int> height{"height", 112};

  Input<Buffer<float>> input{"input", 4};                       // (ci, x, y, n)
  Input<Buffer<float>> depthwise_filter{"depthwise_filter", 3}; // (ci, fx, fy)
  Input<Buffer<float>> depthwise_bias{"depthwise_bias", 1};     // (ci)
  Input<Buffer<float>> pointwise_filter{"pointwise_filter", 2}; // (co, ci)
  Input<Buffer<float>> pointwise_bias{"pointwise_bias", 1};     // (co)
  Output<Buffer<float>> output{"output", 4};                    // (co, x, y, n)

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("depthwise_separable_conv", batch, 1, 1024);
    require_in_range("depthwise_separable_conv", in_channels, 1, 4096);
    require_in_range("depthwise_separable_conv", out_channels, 1, 4096);
    require_in_range("depthwise_separable_conv", width, 1, kMaxExtent);
    require_in_range("depthwise_separable_conv", height, 1, kMaxExtent);

    Func padded = BoundaryConditions::constant_exterior(input, 0.0f,
                                                        {{Expr(), Expr()},
                                                         {0, input.dim(1).extent()},
                                                         {0, input.dim(2).extent()},
                                                         {Expr(), Expr()}});

    RDom r(0, 3, 0, 3);
    depthwise(c, x, y, n) = depthwise_bias(c);
    depthwise(c, x, y, n) += depthwise_filter(c, r.x, r.y) * padded(c, x + r.x - 1, y + r.y - 1, n);
    depthwise_relu(c, x, y, n) = max(0.0f, depthwise(c, x, y, n));

    RDom ci(0, in_channels);
    pointwise(c, x, y, n) = pointwise_bias(c);
    pointwise(c, x, y, n) += pointwise_filter(c, ci) * depthwise_relu(ci, x, y, n);
    output(c, x, y, n) = max(0.0f, pointwise(c, x, y, n));

    input.dim(0).set_bounds(0, in_channels);
    input.set_estimates({{0, in_channels}, {0, width}, {0, height}, {0, batch}});
    depthwise_filter.set_estimates({{0, in_channels}, {0, 3}, {0, 3}});
    depthwise_bias.set_estimates({{0, in_channels}});
    pointwise_filter.set_estimates({{0, out_channels}, {0, in_channels}});
    pointwise_bias.set_estimates({{0, out_channels}});
    output.set_estimates({{0, out_channels}, {0, width}, {0, height}, {0, batch}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var c{"c"}, x{"x"}, y{"y"}, n{"n"};
  Func depthwise{"depthwise"}, depthwise_relu{"depthwise_relu"}, pointwise{"pointwise"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(DepthwiseSeparableConv, depthwise_separable_conv)
