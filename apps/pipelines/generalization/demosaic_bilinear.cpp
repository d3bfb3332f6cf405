// Bilinear demosaic of a 16-bit RGGB Bayer mosaic to float RGB in [0, 1]: each missing colour is
// the mean of its nearest samples of that colour (cross, diagonal, or the two along a row or
// column).
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class DemosaicBilinear : public Generator<DemosaicBilinear> {
public:
  GeneratorParam<int> width{"width", 1920}; // for the estimates
  GeneratorParam<int> height{"height", 1080};

  Input<Buffer<uint16_t>> input{"input", 2}; // R at (even, even), B at (odd, odd), G elsewhere
  Output<Buffer<float>> output{"output", 3};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("demosaic_bilinear", width, 2, kMaxExtent);
    require_in_range("demosaic_bilinear", height, 2, kMaxExtent);

    // Mirroring about the edge pixel keeps the colour of every position in the pattern.
    Func mirrored = BoundaryConditions::mirror_interior(input);
    raw(x, y) = cast<float>(mirrored(x, y)) * (1.0f / 65535);

    Expr horizontal = (raw(x - 1, y) + raw(x + 1, y)) * 0.5f;
    Expr vertical = (raw(x, y - 1) + raw(x, y + 1)) * 0.5f;
    Expr cross = (raw(x - 1, y) + raw(x + 1, y) + raw(x, y - 1) + raw(x, y + 1)) * 0.25f;
    Expr diagonal =
        (raw(x - 1, y - 1) + raw(x + 1, y - 1) + raw(x - 1, y + 1) + raw(x + 1, y + 1)) * 0.25f;

    Expr even_x = x % 2 == 0, even_y = y % 2 == 0;
    Expr at_red = even_x && even_y, at_blue = !even_x && !even_y;
    Expr at_green_in_red_row = !even_x && even_y;
    red(x, y) =
        select(at_red, raw(x, y), at_blue, diagonal, at_green_in_red_row, horizontal, vertical);
    green(x, y) = select(at_red || at_blue, cross, raw(x, y));
    blue(x, y) =
        select(at_blue, raw(x, y), at_red, diagonal, at_green_in_red_row, vertical, horizontal);
    output(x, y, c) = mux(c, {red(x, y), green(x, y), blue(x, y)});

    input.set_estimates({{0, width}, {0, height}});
    output.set_estimates({{0, width}, {0, height}, {0, 3}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"}, c{"c"};
  Func raw{"raw"}, red{"red"}, green{"green"}, blue{"blue"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(DemosaicBilinear, demosaic_bilinear)
