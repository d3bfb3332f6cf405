// Camera pipeline (FCam-style raw processing): hot-pixel suppression, edge-directed demosaic of a
// GRBG Bayer mosaic, colour correction for the white point, tone curve and sharpening.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class CameraPipe : public Generator<CameraPipe> {
public:
  GeneratorParam<int> width{"width", 2560}; // output size, for the estimates
  GeneratorParam<int> height{"height", 1920};

  // The raw image is larger than the output by 16 pixels left/right and 12 above/below, so no
  // stage needs a boundary condition.
  Input<Buffer<uint16_t>> raw{"raw", 2};
  Input<Buffer<float>> matrix_3200{"matrix_3200", 2}; // 4×3 colour matrices calibrated at 3200 K
  Input<Buffer<float>> matrix_7000{"matrix_7000", 2}; // and at 7000 K (column 3 is an offset)
  Input<float> color_temp{"color_temp", 3700.0f};
  Input<float> gamma{"gamma", 2.0f};
  Input<float> contrast{"contrast", 50.0f};
  Input<float> sharpen_strength{"sharpen_strength", 1.0f};
  Input<int> black_level{"black_level", 25};
  Input<int> white_level{"white_level", 1023};
  Output<Buffer<uint8_t>> output{"output", 3};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("camera_pipe", width, 1, kMaxExtent);
    require_in_range("camera_pipe", height, 1, kMaxExtent);

    // The sensor delivers 10 bits; saturating there keeps the int16 arithmetic below in range.
    shifted(x, y) = cast<int16_t>(min(raw(x + 16, y + 12), 1023));

    // A hot pixel is brighter than all four same-colour neighbours: clamp it to their maximum.
    Expr neighbours =
        max(max(shifted(x - 2, y), shifted(x + 2, y)), max(shifted(x, y - 2), shifted(x, y + 2)));
    denoised(x, y) = min(shifted(x, y), neighbours);

    // Split the GRBG mosaic into four half-resolution planes.
    g_gr(x, y) = denoised(2 * x, 2 * y);
    r_r(x, y) = denoised(2 * x + 1, 2 * y);
    b_b(x, y) = denoised(2 * x, 2 * y + 1);
    g_gb(x, y) = denoised(2 * x + 1, 2 * y + 1);
    demosaic();

    // Colour correction: interpolate the calibrated matrices in inverse temperature and apply
    // them in 8.8 fixed point.
    Expr alpha = (1.0f / color_temp - 1.0f / 3200) / (1.0f / 7000 - 1.0f / 3200);
    Expr m = lerp(matrix_3200(x, y), matrix_7000(x, y), alpha);
    matrix(x, y) = cast<int32_t>(round(m * 256));
    Expr black = black_level;
    Expr r = cast<int32_t>(red(x, y)) - black;
    Expr g = cast<int32_t>(green(x, y)) - black;
    Expr b = cast<int32_t>(blue(x, y)) - black;
    corrected(x, y, c) =
        (matrix(0, c) * r + matrix(1, c) * g + matrix(2, c) * b + matrix(3, c) * 256) >> 8;

    // Tone curve as a lookup table over the 10-bit range: gamma, then a contrast S-curve.
    Expr v = clamp(cast<float>(t) / (white_level - black_level), 0.0f, 1.0f);
    Expr gc = pow(v, 1.0f / gamma);
    Expr k = contrast / 100.0f;
    Expr s_curve = select(gc < 0.5f, 0.5f * pow(2 * gc, 1 + k), 1 - 0.5f * pow(2 - 2 * gc, 1 + k));
    curve(t) = cast<uint8_t>(clamp(s_curve * 255.0f + 0.5f, 0.0f, 255.0f));
    curved(x, y, c) = cast<int16_t>(curve(clamp(corrected(x, y, c), 0, 1023)));

    // Unsharp mask with a [1 2 1]² blur, strength in 1/32 steps.
    blur_x(x, y, c) = curved(x - 1, y, c) + 2 * curved(x, y, c) + curved(x + 1, y, c);
    blur(x, y, c) = (blur_x(x, y - 1, c) + 2 * blur_x(x, y, c) + blur_x(x, y + 1, c) + 8) / 16;
    Expr strength = cast<int32_t>(sharpen_strength * 32);
    Expr detail = cast<int32_t>(curved(x, y, c)) - blur(x, y, c);
    output(x, y, c) = cast<uint8_t>(clamp(curved(x, y, c) + (strength * detail) / 32, 0, 255));

    raw.set_estimates({{0, width + 32}, {0, height + 24}});
    matrix_3200.set_estimates({{0, 4}, {0, 3}});
    matrix_7000.set_estimates({{0, 4}, {0, 3}});
    color_temp.set_estimate(3700.0f);
    gamma.set_estimate(2.0f);
    contrast.set_estimate(50.0f);
    sharpen_strength.set_estimate(1.0f);
    black_level.set_estimate(25);
    white_level.set_estimate(1023);
    output.set_estimates({{0, width}, {0, height}, {0, 3}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"}, c{"c"}, t{"t"};
  Func shifted{"shifted"}, denoised{"denoised"};
  Func g_gr{"g_gr"}, r_r{"r_r"}, b_b{"b_b"}, g_gb{"g_gb"};
  Func g_r{"g_r"}, g_b{"g_b"}, r_gr{"r_gr"}, b_gr{"b_gr"}, r_gb{"r_gb"}, b_gb{"b_gb"};
  Func r_b{"r_b"}, b_r{"b_r"};
  Func red{"red"}, green{"green"}, blue{"blue"};
  Func matrix{"matrix"}, corrected{"corrected"}, curve{"curve"}, curved{"curved"};
  Func blur_x{"blur_x"}, blur{"blur"};

  static Expr avg(Expr a, Expr b) { return (a + b) / 2; }

  // Interpolates along whichever of two directions has the smaller gradient.
  static Expr edge_directed(Expr a1, Expr a2, Expr b1, Expr b2) {
    return select(absd(a1, a2) < absd(b1, b2), avg(a1, a2), avg(b1, b2));
  }

  // Fills in the two missing colours at every site. Green is interpolated edge-directed; red and
  // blue interpolate their difference to green, which is smoother than the colours themselves.
  void demosaic() {
    // Coordinates are in half-resolution planes: site (x, y) of r_r is full-resolution
    // (2x+1, 2y), of b_b (2x, 2y+1), of g_gr (2x, 2y), of g_gb (2x+1, 2y+1).
    g_r(x, y) = edge_directed(g_gr(x, y), g_gr(x + 1, y), g_gb(x, y - 1), g_gb(x, y));
    g_b(x, y) = edge_directed(g_gb(x - 1, y), g_gb(x, y), g_gr(x, y), g_gr(x, y + 1));

    r_gr(x, y) = g_gr(x, y) + avg(r_r(x - 1, y) - g_r(x - 1, y), r_r(x, y) - g_r(x, y));
    b_gr(x, y) = g_gr(x, y) + avg(b_b(x, y - 1) - g_b(x, y - 1), b_b(x, y) - g_b(x, y));
    r_gb(x, y) = g_gb(x, y) + avg(r_r(x, y) - g_r(x, y), r_r(x, y + 1) - g_r(x, y + 1));
    b_gb(x, y) = g_gb(x, y) + avg(b_b(x, y) - g_b(x, y), b_b(x + 1, y) - g_b(x + 1, y));

    // Red at blue sites and blue at red sites come from the two diagonals.
    r_b(x, y) =
        g_b(x, y) + edge_directed(r_r(x - 1, y) - g_r(x - 1, y), r_r(x, y + 1) - g_r(x, y + 1),
                                  r_r(x, y) - g_r(x, y), r_r(x - 1, y + 1) - g_r(x - 1, y + 1));
    b_r(x, y) =
        g_r(x, y) + edge_directed(b_b(x, y - 1) - g_b(x, y - 1), b_b(x + 1, y) - g_b(x + 1, y),
                                  b_b(x + 1, y - 1) - g_b(x + 1, y - 1), b_b(x, y) - g_b(x, y));

    red(x, y) = interleave(r_gr, r_r, r_b, r_gb);
    green(x, y) = interleave(g_gr, g_r, g_b, g_gb);
    blue(x, y) = interleave(b_gr, b_r, b_b, b_gb);
  }

  // Full-resolution value from the four half-resolution planes of the GRBG layout.
  Expr interleave(Func top_left, Func top_right, Func bottom_left, Func bottom_right) {
    Expr hx = x / 2, hy = y / 2;
    return select(y % 2 == 0, select(x % 2 == 0, top_left(hx, hy), top_right(hx, hy)),
                  select(x % 2 == 0, bottom_left(hx, hy), bottom_right(hx, hy)));
  }
};

} // namespace

HALIDE_REGISTER_GENERATOR(CameraPipe, camera_pipe)
