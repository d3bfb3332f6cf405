// Local Laplacian filter (Paris, Hasinoff & Kautz 2011; sampled-levels form of Aubry et al.):
// detail enhancement and tone compression through Laplacian pyramids of remapped images.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

#include <vector>

namespace {

using namespace Halide;

class LocalLaplacian : public Generator<LocalLaplacian> {
public:
  GeneratorParam<int> intensity_levels{"intensity_levels", 8}; // K sampled reference intensities
  GeneratorParam<int> pyramid_levels{"pyramid_levels", 8};     // J
  GeneratorParam<int> width{"width", 1536};                    // for the estimates
  GeneratorParam<int> height{"height", 2560};

  Input<Buffer<uint16_t>> input{"input", 3}; // RGB
  Input<float> alpha{"alpha", 1.0f};         // detail gain (> 0 enhances)
  Input<float> beta{"beta", 1.0f};           // large-scale gain (< 1 compresses tones)
  Output<Buffer<uint16_t>> output{"output", 3};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    // Two reference intensities at least, 0 and 1; with more than 64 the detail width 1 / (K - 1)
    // shrinks to a few steps of the 1/256 remap table.
    require_in_range("local_laplacian", intensity_levels, 2, 64);
    require_in_range("local_laplacian", pyramid_levels, 1, 15); // 15: down to one pixel
    require_in_range("local_laplacian", width, 1, kMaxExtent);
    require_in_range("local_laplacian", height, 1, kMaxExtent);

    const int K = intensity_levels, J = pyramid_levels;
    Func clamped = BoundaryConditions::repeat_edge(input);
    floating(x, y, c) = cast<float>(clamped(x, y, c)) / 65535.0f;
    gray(x, y) =
        0.299f * floating(x, y, 0) + 0.587f * floating(x, y, 1) + 0.114f * floating(x, y, 2);

    // Remapping of a difference d to the reference intensity, tabulated at 1/256 steps: details
    // (|d| ≲ 1/K) are scaled by 1 + alpha, edges by beta.
    const float sigma = 1.0f / (K - 1);
    Expr d = cast<float>(t) / 256.0f;
    remap(t) = beta * d + alpha * d * exp(-d * d / (2 * sigma * sigma));

    // One processed copy of the image per reference intensity k. The table is interpolated, not
    // rounded: a rounded index is a step in the input, so float differences of one ulp between
    // schedules could flip it and move outputs by ~1000 / 65535 after the pyramid collapse.
    Expr level = cast<float>(k) / (K - 1);
    Expr position = clamp((gray(x, y) - level) * 256.0f, -256.0f, 255.0f);
    Expr index = cast<int>(floor(position));
    processed(x, y, k) = level + lerp(remap(index), remap(index + 1), position - index);

    std::vector<Func> g_pyramid(J), l_pyramid(J), in_g_pyramid(J), out_l_pyramid(J),
        out_g_pyramid(J);
    g_pyramid[0] = processed;
    in_g_pyramid[0] = gray;
    for (int j = 1; j < J; j++) {
      g_pyramid[j] = downsample(g_pyramid[j - 1], "g_pyramid_" + std::to_string(j));
      in_g_pyramid[j] = downsample(in_g_pyramid[j - 1], "in_g_pyramid_" + std::to_string(j));
    }
    l_pyramid[J - 1] = g_pyramid[J - 1];
    for (int j = J - 2; j >= 0; j--) {
      l_pyramid[j] = Func("l_pyramid_" + std::to_string(j));
      l_pyramid[j](x, y, k) =
          g_pyramid[j](x, y, k) - upsample(g_pyramid[j + 1], "up_g_" + std::to_string(j))(x, y, k);
    }

    // Each output coefficient interpolates the two processed pyramids whose reference
    // intensities bracket the input's local intensity at that scale.
    for (int j = 0; j < J; j++) {
      Expr position = clamp(in_g_pyramid[j](x, y), 0.0f, 1.0f) * (K - 1);
      Expr li = clamp(cast<int>(position), 0, K - 2);
      Expr lf = position - li;
      out_l_pyramid[j] = Func("out_l_pyramid_" + std::to_string(j));
      out_l_pyramid[j](x, y) = lerp(l_pyramid[j](x, y, li), l_pyramid[j](x, y, li + 1), lf);
    }

    // Collapse the output pyramid.
    out_g_pyramid[J - 1] = out_l_pyramid[J - 1];
    for (int j = J - 2; j >= 0; j--) {
      out_g_pyramid[j] = Func("out_g_pyramid_" + std::to_string(j));
      out_g_pyramid[j](x, y) = out_l_pyramid[j](x, y) +
                               upsample(out_g_pyramid[j + 1], "up_out_" + std::to_string(j))(x, y);
    }

    // Put the colour back by scaling each channel with the change in luminance.
    Expr ratio = out_g_pyramid[0](x, y) / max(gray(x, y), 1e-4f);
    Expr value = clamp(floating(x, y, c) * ratio, 0.0f, 1.0f);
    output(x, y, c) = cast<uint16_t>(value * 65535.0f + 0.5f);

    input.set_estimates({{0, width}, {0, height}, {0, 3}});
    alpha.set_estimate(1.0f);
    beta.set_estimate(1.0f);
    output.set_estimates({{0, width}, {0, height}, {0, 3}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"}, c{"c"}, k{"k"}, t{"t"};
  Func floating{"floating"}, gray{"gray"}, remap{"remap"}, processed{"processed"};

  // Halves the first two dimensions with a [1 3 3 1] / 8 filter (any further dimensions kept).
  Func downsample(Func f, const std::string &name) {
    const std::vector<Var> f_args = f.args();
    const std::vector<Var> rest(f_args.begin() + 2, f_args.end());
    auto args = [&](Expr px, Expr py) {
      std::vector<Expr> a = {px, py};
      a.insert(a.end(), rest.begin(), rest.end());
      return a;
    };
    Func down_x(name + "_x"), down(name);
    std::vector<Expr> out_args = args(x, y);
    down_x(out_args) = (f(args(2 * x - 1, y)) + 3.0f * (f(args(2 * x, y)) + f(args(2 * x + 1, y))) +
                        f(args(2 * x + 2, y))) /
                       8.0f;
    down(out_args) =
        (down_x(args(x, 2 * y - 1)) + 3.0f * (down_x(args(x, 2 * y)) + down_x(args(x, 2 * y + 1))) +
         down_x(args(x, 2 * y + 2))) /
        8.0f;
    return down;
  }

  // Doubles the first two dimensions by linear interpolation (weights 1/4, 3/4).
  Func upsample(Func f, const std::string &name) {
    const std::vector<Var> f_args = f.args();
    const std::vector<Var> rest(f_args.begin() + 2, f_args.end());
    auto args = [&](Expr px, Expr py) {
      std::vector<Expr> a = {px, py};
      a.insert(a.end(), rest.begin(), rest.end());
      return a;
    };
    Func up_x(name + "_x"), up(name);
    std::vector<Expr> out_args = args(x, y);
    up_x(out_args) = 0.25f * f(args(x / 2 - 1 + 2 * (x % 2), y)) + 0.75f * f(args(x / 2, y));
    up(out_args) = 0.25f * up_x(args(x, y / 2 - 1 + 2 * (y % 2))) + 0.75f * up_x(args(x, y / 2));
    return up;
  }
};

} // namespace

HALIDE_REGISTER_GENERATOR(LocalLaplacian, local_laplacian)
