// Bilateral grid (Chen, Paris & Durand 2007): edge-aware smoothing of a grey image.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class BilateralGrid : public Generator<BilateralGrid> {
public:
  GeneratorParam<int> s_sigma{"s_sigma", 8}; // grid cell size in pixels
  GeneratorParam<int> width{"width", 1536};  // sizes for the estimates only
  GeneratorParam<int> height{"height", 2560};

  Input<Buffer<float>> input{"input", 2}; // grey values in [0, 1]
  Input<float> r_sigma{"r_sigma", 0.1f};  // intensity extent of one grid bin
  Output<Buffer<float>> output{"output", 2};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("bilateral_grid", s_sigma, 1, 64);
    require_in_range("bilateral_grid", width, 1, kMaxExtent);
    require_in_range("bilateral_grid", height, 1, kMaxExtent);

    const int s = s_sigma;
    Func clamped = BoundaryConditions::repeat_edge(input);

    // Splat: each cell sums the (value, 1) pairs of its s×s pixels into the bin of their value.
    RDom r(0, s, 0, s);
    Expr val = clamp(clamped(x * s + r.x - s / 2, y * s + r.y - s / 2), 0.0f, 1.0f);
    Expr bin = cast<int>(val / r_sigma + 0.5f);
    histogram(x, y, z, c) = 0.0f;
    histogram(x, y, bin, c) += mux(c, {val, 1.0f});

    // Blur the grid with [1 4 6 4 1] along z, then x, then y.
    blur_z(x, y, z, c) = histogram(x, y, z - 2, c) + 4 * histogram(x, y, z - 1, c) +
                         6 * histogram(x, y, z, c) + 4 * histogram(x, y, z + 1, c) +
                         histogram(x, y, z + 2, c);
    blur_x(x, y, z, c) = blur_z(x - 2, y, z, c) + 4 * blur_z(x - 1, y, z, c) +
                         6 * blur_z(x, y, z, c) + 4 * blur_z(x + 1, y, z, c) +
                         blur_z(x + 2, y, z, c);
    blur_y(x, y, z, c) = blur_x(x, y - 2, z, c) + 4 * blur_x(x, y - 1, z, c) +
                         6 * blur_x(x, y, z, c) + 4 * blur_x(x, y + 1, z, c) +
                         blur_x(x, y + 2, z, c);

    // Slice: trilinear lookup of the blurred grid at each pixel's position and value.
    Expr v = clamp(clamped(x, y), 0.0f, 1.0f) / r_sigma;
    Expr zi = cast<int>(v);
    Expr zf = v - zi;
    Expr xi = x / s, yi = y / s;
    Expr xf = cast<float>(x % s) / s, yf = cast<float>(y % s) / s;
    interpolated(x, y, c) =
        lerp(lerp(lerp(blur_y(xi, yi, zi, c), blur_y(xi + 1, yi, zi, c), xf),
                  lerp(blur_y(xi, yi + 1, zi, c), blur_y(xi + 1, yi + 1, zi, c), xf), yf),
             lerp(lerp(blur_y(xi, yi, zi + 1, c), blur_y(xi + 1, yi, zi + 1, c), xf),
                  lerp(blur_y(xi, yi + 1, zi + 1, c), blur_y(xi + 1, yi + 1, zi + 1, c), xf), yf),
             zf);

    // Normalise: the weight channel counts how many pixels contributed.
    output(x, y) = interpolated(x, y, 0) / interpolated(x, y, 1);

    input.set_estimates({{0, width}, {0, height}});
    r_sigma.set_estimate(0.1f);
    output.set_estimates({{0, width}, {0, height}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"}, z{"z"}, c{"c"};
  Func histogram{"histogram"}, blur_z{"blur_z"}, blur_x{"blur_x"}, blur_y{"blur_y"};
  Func interpolated{"interpolated"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(BilateralGrid, bilateral_grid)
