// 2×2 max pooling (stride 2) of an NCHW float tensor, then inference-time batch norm as a
// per-channel scale and shift, then ReLU.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class MaxpoolBnRelu : public Generator<MaxpoolBnRelu> {
public:
  GeneratorParam<int> batch{"batch", 4}; // for the estimates
  GeneratorParam<int> channels{"channels", 64};
  GeneratorParam<int> width{"width", 224}; // of the input; the output is half of it
  GeneratorParam<int> height{"height", 224};

  Input<Buffer<float>> input{"input", 4}; // (x, y, c, n)
  Input<Buffer<float>> scale{"scale", 1}; // (c): gamma / sqrt(running variance + eps)
  Input<Buffer<float>> shift{"shift", 1}; // (c): beta - running mean · scale
  Output<Buffer<float>> output{"output", 4};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("maxpool_bn_relu", batch, 1, 1024);
    require_in_range("maxpool_bn_relu", channels, 1, 4096);
    require_in_range("maxpool_bn_relu", width, 2, kMaxExtent);
    require_in_range("maxpool_bn_relu", height, 2, kMaxExtent);

    pooled(x, y, c, n) = max(max(input(2 * x, 2 * y, c, n), input(2 * x + 1, 2 * y, c, n)),
                             max(input(2 * x, 2 * y + 1, c, n), input(2 * x + 1, 2 * y + 1, c, n)));
    normalized(x, y, c, n) = pooled(x, y, c, n) * scale(c) + shift(c);
    output(x, y, c, n) = max(normalized(x, y, c, n), 0.0f);

    input.set_estimates({{0, width}, {0, height}, {0, channels}, {0, batch}});
    scale.set_estimates({{0, channels}});
    shift.set_estimates({{0, channels}});
    output.set_estimates({{0, width / 2}, {0, height / 2}, {0, channels}, {0, batch}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"}, c{"c"}, n{"n"};
  Func pooled{"pooled"}, normalized{"normalized"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(MaxpoolBnRelu, maxpool_bn_relu)
