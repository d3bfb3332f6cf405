// 3×3 median filter of an 8-bit RGB image: each column of three is sorted once, and the median of
// nine is the median of the largest column minimum, the median of the column medians and the
// smallest column maximum.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class Median3x3 : public Generator<Median3x3> {
public:
  GeneratorParam<int> width{"width", 1920}; // for the estimates
  GeneratorParam<int> height{"height", 1080};

  Input<Buffer<uint8_t>> input{"input", 3}; // RGB, planar
  Output<Buffer<uint8_t>> output{"output", 3};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("median3x3", width, 1, kMaxExtent);
    require_in_range("median3x3", height, 1, kMaxExtent);

    Func clamped = BoundaryConditions::repeat_edge(input);
    Expr above = clamped(x, y - 1, c), centre = clamped(x, y, c), below = clamped(x, y + 1, c);
    column_min(x, y, c) = min(above, centre, below);
    column_mid(x, y, c) = median3(above, centre, below);
    column_max(x, y, c) = max(above, centre, below);

    Expr lo = max(column_min(x - 1, y, c), column_min(x, y, c), column_min(x + 1, y, c));
    Expr mid = median3(column_mid(x - 1, y, c), column_mid(x, y, c), column_mid(x + 1, y, c));
    Expr hi = min(column_max(x - 1, y, c), column_max(x, y, c), column_max(x + 1, y, c));
    output(x, y, c) = median3(lo, mid, hi);

    input.set_estimates({{0, width}, {0, height}, {0, 3}});
    output.set_estimates({{0, width}, {0, height}, {0, 3}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"}, c{"c"};
  Func column_min{"column_min"}, column_mid{"column_mid"}, column_max{"column_max"};

  static Expr median3(Expr a, Expr b, Expr c) { return max(min(a, b), min(max(a, b), c)); }
};

} // namespace

HALIDE_REGISTER_GENERATOR(Median3x3, median3x3)
