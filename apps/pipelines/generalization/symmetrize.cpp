// The symmetric part of a square float matrix, (A + Aᵀ) / 2: every element read once along a row
// and once along a column.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class Symmetrize : public Generator<Symmetrize> {
public:
  GeneratorParam<int> size{"size", 2048}; // rows = columns, for the estimates

  Input<Buffer<float>> input{"input", 2}; // (j, i): row-major A, square
  Output<Buffer<float>> output{"output", 2};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("symmetrize", size, 1, kMaxExtent);

    transposed(j, i) = input(i, j);
    output(j, i) = 0.5f * (input(j, i) + transposed(j, i));

    input.set_estimates({{0, size}, {0, size}});
    output.set_estimates({{0, size}, {0, size}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var i{"i"}, j{"j"};
  Func transposed{"transposed"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(Symmetrize, symmetrize)
