// A dense layer's forward pass: C = relu(A·B + bias) for float matrices.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class GemmBiasRelu : public Generator<GemmBiasRelu> {
public:
  GeneratorParam<int> m{"m", 512}; // rows of A and C, for the estimates
  GeneratorParam<int> n{"n", 512}; // columns of B and C
  GeneratorParam<int> k{"k", 512}; // columns of A, rows of B

  Input<Buffer<float>> a{"a", 2};            // (k, m): row-major A
  Input<Buffer<float>> b{"b", 2};            // (n, k): row-major B
  Input<Buffer<float>> bias{"bias", 1};      // (n)
  Output<Buffer<float>> output{"output", 2}; // (n, m): row-major C

  void generate() {
    using hkfac::pipelines::require_in_range;
    require_in_range("gemm_bias_relu", m, 1, 1 << 14);
    require_in_range("gemm_bias_relu", n, 1, 1 << 14);
    require_in_range("gemm_bias_relu", k, 1, 1 << 14);

    RDom inner(0, a.dim(0).extent());
    product(j, i) = bias(j);
    product(j, i) += a(inner, i) * b(j, inner);
    output(j, i) = max(product(j, i), 0.0f);

    a.set_estimates({{0, k}, {0, m}});
    b.set_estimates({{0, n}, {0, k}});
    bias.set_estimates({{0, n}});
    output.set_estimates({{0, n}, {0, m}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var i{"i"}, j{"j"};
  Func product{"product"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(GemmBiasRelu, gemm_bias_relu)
