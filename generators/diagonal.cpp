// Diagonal-block kernels: EMA of squared per-example gradients, and elementwise (d + γ)^±1 products.
#include "Halide.h"

namespace {

using namespace Halide;

// d_out(j) = a * d_in(j) + b * Σ_k g(j, k)²  — g holds one per-example gradient per row.
// d_out may alias d_in: each element reads only its own old value.
class DiagonalEma : public Generator<DiagonalEma> {
public:
  Input<Buffer<float>> d_in{"d_in", 1};
  Input<Buffer<float>> g{"g", 2};
  Input<float> a{"a"};
  Input<float> b{"b"};
  Output<Buffer<float>> d_out{"d_out", 1};

  void generate() {
    RDom k(0, g.dim(1).extent(), "k");
    sum_sq(j) = 0.0f;
    sum_sq(j) += g(j, k) * g(j, k);
    d_out(j) = a * d_in(j) + b * sum_sq(j);

    d_in.dim(0).set_bounds(0, d_out.dim(0).extent());
    g.dim(0).set_bounds(0, d_out.dim(0).extent());
    if (get_target().has_gpu_feature()) {
      schedule_gpu();
    } else {
      schedule_cpu();
    }
  }

private:
  Var j{"j"}, ji{"ji"};
  Func sum_sq{"sum_sq"};

  void schedule_cpu() {
    const int vec = natural_vector_size<float>();
    // Rows of g are contiguous in j: vectorise across parameters, accumulate down the batch.
    d_out.split(j, j, ji, vec * 64, TailStrategy::GuardWithIf).parallel(j).vectorize(ji, vec,
                                                                   TailStrategy::GuardWithIf);
    sum_sq.compute_at(d_out, j).vectorize(j, vec, TailStrategy::GuardWithIf);
    sum_sq.update().vectorize(j, vec, TailStrategy::GuardWithIf);
  }

  void schedule_gpu() {
    // One thread per parameter; consecutive threads read consecutive addresses of a row of g.
    d_out.gpu_tile(j, ji, 256, TailStrategy::GuardWithIf);
    sum_sq.compute_at(d_out, ji);
  }
};

// u(j) = g(j) * (d(j) + γ) when power > 0, g(j) / (d(j) + γ) otherwise.
class DiagonalMatpower : public Generator<DiagonalMatpower> {
public:
  Input<Buffer<float>> g{"g", 1};
  Input<Buffer<float>> d{"d", 1};
  Input<float> gamma{"gamma"};
  Input<int> power{"power"};
  Output<Buffer<float>> u{"u", 1};

  void generate() {
    Expr denom = d(j) + gamma;
    u(j) = select(power > 0, g(j) * denom, g(j) / denom);

    g.dim(0).set_bounds(0, u.dim(0).extent());
    d.dim(0).set_bounds(0, u.dim(0).extent());
    if (get_target().has_gpu_feature()) {
      u.gpu_tile(j, ji, 256, TailStrategy::GuardWithIf);
    } else {
      const int vec = natural_vector_size<float>();
      u.split(j, j, ji, vec * 256, TailStrategy::GuardWithIf)
          .parallel(j)
          .vectorize(ji, vec, TailStrategy::GuardWithIf);
    }
  }

private:
  Var j{"j"}, ji{"ji"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(DiagonalEma, hkfac_diagonal_ema)
HALIDE_REGISTER_GENERATOR(DiagonalMatpower, hkfac_diagonal_matpower)
