// General matrix multiply C <- alpha * op(A) * op(B) + beta * C, one library per transpose pair.
#include "Halide.h"

#include <stdexcept>

#include "matmul_schedule.h"

namespace {

using namespace Halide;

class Gemm : public Generator<Gemm> {
public:
  GeneratorParam<bool> transpose_a{"transpose_a", false};
  GeneratorParam<bool> transpose_b{"transpose_b", false};
  // Copies a transposed A into rows before the product (CPU): worth its pass over A only for
  // deep products, so the dispatch picks this variant by shape.
  GeneratorParam<bool> pack_a{"pack_a", false};
  // The CPU's tile shape: narrow for C with a few columns (the dispatch's kNarrowColumnsTo),
  // one_column for one column and an untransposed A.
  GeneratorParam<hkfac::sched::Tiles> tiles{"tiles", hkfac::sched::Tiles::standard,
                                            hkfac::sched::kTilesNames};

  Input<Buffer<float>> A{"A", 2};
  Input<Buffer<float>> B{"B", 2};
  // C's old contents; the caller passes the same buffer as the output (each element reads only
  // its own old value, so the in-place update is safe).
  Input<Buffer<float>> C_in{"C_in", 2};
  Input<float> alpha{"alpha"};
  Input<float> beta{"beta"};
  Output<Buffer<float>> C{"C", 2};

  void generate() {
    // op(A)(k, i) and op(B)(j, k) in the M(col, row) convention.
    Expr m = transpose_a ? A.dim(0).extent() : A.dim(1).extent();
    Expr depth = transpose_a ? A.dim(1).extent() : A.dim(0).extent();
    Expr n = transpose_b ? B.dim(1).extent() : B.dim(0).extent();
    op_a(k, i) = transpose_a ? A(i, k) : A(k, i);
    op_b(j, k) = transpose_b ? B(k, j) : B(j, k);

    if (tiles == hkfac::sched::Tiles::one_column && transpose_a)
      throw std::invalid_argument("gemm: tiles=one_column needs an untransposed A");
    hkfac::sched::Matmul ab("ab", op_a, op_b, m, n, depth, get_target(), tiles);
    C(j, i) = select(beta == 0.0f, alpha * ab(j, i), alpha * ab(j, i) + beta * C_in(j, i));

    A.set_estimates({{0, 1000}, {0, 1000}});
    B.set_estimates({{0, 1000}, {0, 1000}});
    C_in.set_estimates({{0, 1000}, {0, 1000}});
    C.set_estimates({{0, 1000}, {0, 1000}});
    if (pack_a)
      ab.pack_a();
    ab.schedule(C, j, i);
    // beta == 0 must not even read C_in: it may hold NaN or garbage. (After scheduling: a
    // specialization copies the schedule made so far.)
    C.specialize(beta == 0.0f);
  }

private:
  Var j{"j"}, i{"i"}, k{"k"};
  Func op_a{"op_a"}, op_b{"op_b"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(Gemm, hkfac_gemm)
