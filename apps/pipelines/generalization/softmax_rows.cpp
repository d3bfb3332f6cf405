// Softmax of every row of a float matrix, shifted by the row maximum for range.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class SoftmaxRows : public Generator<SoftmaxRows> {
public:
  GeneratorParam<int> cols{"cols", 1000}; // for the estimates: classes per row
  GeneratorParam<int> rows{"rows", 1024};

  Input<Buffer<float>> input{"input", 2}; // (j, i): logits of row i
  Output<Buffer<float>> output{"output", 2};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("softmax_rows", cols, 1, 1 << 20);
    require_in_range("softmax_rows", rows, 1, kMaxExtent);

    RDom r(0, input.dim(0).extent());
    row_max(i) = Float(32).min();
    row_max(i) = max(row_max(i), input(r, i));
    exponentials(j, i) = exp(input(j, i) - row_max(i));
    row_sum(i) = 0.0f;
    row_sum(i) += exponentials(r, i);
    output(j, i) = exponentials(j, i) / row_sum(i);

    input.set_estimates({{0, cols}, {0, rows}});
    output.set_estimates({{0, cols}, {0, rows}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var i{"i"}, j{"j"};
  Func row_max{"row_max"}, exponentials{"exponentials"}, row_sum{"row_sum"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(SoftmaxRows, softmax_rows)
