// A 3×3 "same" convolution layer in NHWC layout (channels innermost) with an HWIO filter, zero
// padding at the image borders, bias and ReLU.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class Conv3x3Nhwc : public Generator<Conv3x3Nhwc> {
public:
  GeneratorParam<int> batch{"batch", 4}; // for the estimates
  GeneratorParam<int> in_channels{"in_channels", 32};
  GeneratorParam<int> out_channels{"out_channels", 32};
  GeneratorParam<int> width{"width", 64};
  GeneratorParam<int> height{"height", 64};

  Input<Buffer<float>> input{"input", 4};    // (ci, x, y, n)
  Input<Buffer<float>> filter{"filter", 4};  // (co, ci, fx, fy)
  Input<Buffer<float>> bias{"bias", 1};      // (co)
  Output<Buffer<float>> output{"output", 4}; // (co, x, y, n), the input's size

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("conv3x3_nhwc", batch, 1, 1024);
    require_in_range("conv3x3_nhwc", in_channels, 1, 4096);
    require_in_range("conv3x3_nhwc", out_channels, 1, 4096);
    require_in_range("conv3x3_nhwc", width, 1, kMaxExtent);
    require_in_range("conv3x3_nhwc", height, 1, kMaxExtent);

    // Zero outside the image in x and y only.
    Func padded = BoundaryConditions::constant_exterior(input, 0.0f,
                                                        {{Expr(), Expr()},
                                                         {0, input.dim(1).extent()},
                                                         {0, input.dim(2).extent()},
                                                         {Expr(), Expr()}});

    RDom r(0, input.dim(0).extent(), 0, 3, 0, 3); // ci, fx, fy
    conv(co, x, y, n) = bias(co);
    conv(co, x, y, n) += filter(co, r.x, r.y, r.z) * padded(r.x, x + r.y - 1, y + r.z - 1, n);
    output(co, x, y, n) = max(conv(co, x, y, n), 0.0f);

    input.set_estimates({{0, in_channels}, {0, width}, {0, height}, {0, batch}});
    filter.set_estimates({{0, out_channels}, {0, in_channels}, {0, 3}, {0, 3}});
    bias.set_estimates({{0, out_channels}});
    output.set_estimates({{0, out_channels}, {0, width}, {0, height}, {0, batch}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var co{"co"}, x{"x"}, y{"y"}, n{"n"};
  Func conv{"conv"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(Conv3x3Nhwc, conv3x3_nhwc)
