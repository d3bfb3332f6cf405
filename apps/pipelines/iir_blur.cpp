// Recursive (IIR) blur: first-order causal and anti-causal exponential smoothing down the columns,
// transpose, and the same again, which smooths the rows.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class IirBlur : public Generator<IirBlur> {
public:
  GeneratorParam<int> width{"width", 1536}; // for the estimates
  GeneratorParam<int> height{"height", 2560};

  Input<Buffer<float>> input{"input", 3}; // RGB
  Input<float> alpha{"alpha", 0.1f};      // weight of the new sample
  Output<Buffer<float>> output{"output", 3};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("iir_blur", width, 1, kMaxExtent);
    require_in_range("iir_blur", height, 1, kMaxExtent);

    Func columns = blur_columns_and_transpose(input, input.dim(1).extent(), "columns");
    Func rows = blur_columns_and_transpose(columns, input.dim(0).extent(), "rows");
    output(x, y, c) = rows(x, y, c);

    input.set_estimates({{0, width}, {0, height}, {0, 3}});
    alpha.set_estimate(0.1f);
    output.set_estimates({{0, width}, {0, height}, {0, 3}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"}, c{"c"};

  // Smooths every column of f (of the given height) forwards then backwards; returns the result
  // transposed so that the next call smooths what were the rows.
  Func blur_columns_and_transpose(Func f, Expr height, const std::string &name) {
    Func blur(name + "_blur");
    blur(x, y, c) = f(x, y, c);
    RDom down(1, height - 1);
    blur(x, down, c) = (1 - alpha) * blur(x, down - 1, c) + alpha * blur(x, down, c);
    RDom up(1, height - 1);
    Expr row = height - 1 - up;
    blur(x, row, c) = (1 - alpha) * blur(x, row + 1, c) + alpha * blur(x, row, c);

    Func transposed(name + "_transposed");
    transposed(x, y, c) = blur(y, x, c);
    return transposed;
  }
};

} // namespace

HALIDE_REGISTER_GENERATOR(IirBlur, iir_blur)
