// 8-bit RGB to BT.601 YUV in float, a gamma curve on the luma, and back to 8-bit RGB.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class RgbYuvRoundtrip : public Generator<RgbYuvRoundtrip> {
public:
  GeneratorParam<int> width{"width", 1920}; // for the estimates
  GeneratorParam<int> height{"height", 1080};

  Input<Buffer<uint8_t>> input{"input", 3}; // RGB, planar
  Input<float> gamma{"gamma", 0.8f};        // < 1 brightens the mid-tones
  Output<Buffer<uint8_t>> output{"output", 3};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("rgb_yuv_roundtrip", width, 1, kMaxExtent);
    require_in_range("rgb_yuv_roundtrip", height, 1, kMaxExtent);

    rgb(x, y, c) = cast<float>(input(x, y, c)) * (1.0f / 255);
    Expr r = rgb(x, y, 0), g = rgb(x, y, 1), b = rgb(x, y, 2);
    luma(x, y) = 0.299f * r + 0.587f * g + 0.114f * b;
    chroma_u(x, y) = 0.492f * (b - luma(x, y));
    chroma_v(x, y) = 0.877f * (r - luma(x, y));

    adjusted_luma(x, y) = pow(luma(x, y), gamma);

    Expr Y = adjusted_luma(x, y), U = chroma_u(x, y), V = chroma_v(x, y);
    Expr rgb_out = mux(c, {Y + 1.140f * V, Y - 0.395f * U - 0.581f * V, Y + 2.032f * U});
    output(x, y, c) = cast<uint8_t>(clamp(rgb_out * 255 + 0.5f, 0.0f, 255.0f));

    input.set_estimates({{0, width}, {0, height}, {0, 3}});
    gamma.set_estimate(0.8f);
    output.set_estimates({{0, width}, {0, height}, {0, 3}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"}, c{"c"};
  Func rgb{"rgb"}, luma{"luma"}, chroma_u{"chroma_u"}, chroma_v{"chroma_v"},
      adjusted_luma{"adjusted_luma"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(RgbYuvRoundtrip, rgb_yuv_roundtrip)
