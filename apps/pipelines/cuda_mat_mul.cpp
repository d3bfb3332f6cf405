// Dense single-precision matrix multiply C = A B at the square sizes GPU GEMM benchmarks use.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class CudaMatMul : public Generator<CudaMatMul> {
public:
  GeneratorParam<int> size{"size", 1024}; // for the estimates

  Input<Buffer<float>> a{"a", 2};  // (k, i): row i of A is contiguous
  Input<Buffer<float>> b{"b", 2};  // (j, k)
  Output<Buffer<float>> c{"c", 2}; // (j, i)

  void generate() {
    hkfac::pipelines::require_in_range("cuda_mat_mul", size, 1, hkfac::pipelines::kMaxExtent);

    RDom k(0, a.dim(0).extent());
    prod(j, i) = 0.0f;
    prod(j, i) += a(k, i) * b(j, k);
    c(j, i) = prod(j, i);

    b.dim(1).set_bounds(a.dim(0).min(), a.dim(0).extent());
    a.set_estimates({{0, size}, {0, size}});
    b.set_estimates({{0, size}, {0, size}});
    c.set_estimates({{0, size}, {0, size}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(c);
    }
  }

private:
  Var i{"i"}, j{"j"};
  Func prod{"prod"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(CudaMatMul, cuda_mat_mul)
