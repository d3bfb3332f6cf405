// Layer normalization of every row of a float matrix (mean, then the variance about it), with
// learned per-feature gamma and beta.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class LayerNorm : public Generator<LayerNorm> {
public:
  GeneratorParam<int> features{"features", 768}; // for the estimates
  GeneratorParam<int> rows{"rows", 2048};        // tokens

  Input<Buffer<float>> input{"input", 2}; // (j, i): feature j of row i
  Input<Buffer<float>> gamma{"gamma", 1}; // (j)
  Input<Buffer<float>> beta{"beta", 1};   // (j)
  Output<Buffer<float>> output{"output", 2};

  void generate() {
    using hkfac::pipelines::require_in_range;
    require_in_range("layer_norm", features, 1, 1 << 20);
    require_in_range("layer_norm", rows, 1, 1 << 20);

    const float eps = 1e-5f;
    RDom r(0, input.dim(0).extent());
    Expr count = cast<float>(input.dim(0).extent());
    row_sum(i) = 0.0f;
    row_sum(i) += input(r, i);
    mean(i) = row_sum(i) / count;
    centered(j, i) = input(j, i) - mean(i);
    // Two passes: E[(x - mean)²] does not cancel as E[x²] - mean² does.
    row_square_sum(i) = 0.0f;
    row_square_sum(i) += centered(r, i) * centered(r, i);
    inv_std(i) = 1.0f / sqrt(row_square_sum(i) / count + eps);
    output(j, i) = centered(j, i) * inv_std(i) * gamma(j) + beta(j);

    input.set_estimates({{0, features}, {0, rows}});
    gamma.set_estimates({{0, features}});
    beta.set_estimates({{0, features}});
    output.set_estimates({{0, features}, {0, rows}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var i{"i"}, j{"j"};
  Func row_sum{"row_sum"}, mean{"mean"}, centered{"centered"}, row_square_sum{"row_square_sum"},
      inv_std{"inv_std"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(LayerNorm, layer_norm)
