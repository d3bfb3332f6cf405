// Forward 8×8 block DCT-II (orthonormal, as in JPEG) of a float gray image: each block's
// coefficients replace its pixels, row transforms then column transforms, each a reduction over
// the block with a basis table computed in the pipeline.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

#include <cmath>

namespace {

using namespace Halide;

class Dct8x8 : public Generator<Dct8x8> {
public:
  GeneratorParam<int> width{"width", 1920}; // for the estimates (multiples of 8)
  GeneratorParam<int> height{"height", 1080};

  Input<Buffer<float>> input{"input", 2};
  // Coefficient (u, v) of the block at (8 bx, 8 by) lands at (8 bx + u, 8 by + v).
  Output<Buffer<float>> output{"output", 2};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("dct8x8", width, 8, kMaxExtent);
    require_in_range("dct8x8", height, 8, kMaxExtent);

    const int n = 8;
    // basis(k, i) = c(k) cos((2i + 1) k π / 16), c(0) = √(1/8), c(k > 0) = √(2/8).
    const float pi = static_cast<float>(M_PI);
    Expr normalization = select(k == 0, std::sqrt(1.0f / n), std::sqrt(2.0f / n));
    basis(k, i) = normalization * cos((2 * i + 1) * k * (pi / (2 * n)));

    // Images whose sides are not multiples of 8 get their last block completed by the edge.
    Func clamped = BoundaryConditions::repeat_edge(input);
    RDom tap(0, n);
    row_dct(x, y) = 0.0f;
    row_dct(x, y) += basis(x % n, tap) * clamped(x / n * n + tap, y);
    output(x, y) = 0.0f;
    output(x, y) += basis(y % n, tap) * row_dct(x, y / n * n + tap);

    input.set_estimates({{0, width}, {0, height}});
    output.set_estimates({{0, width}, {0, height}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"}, k{"k"}, i{"i"};
  Func basis{"basis"}, row_dct{"row_dct"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(Dct8x8, dct8x8)
