// Covariance (K-FAC factor) update for X narrower than one CPU vector: C <- a*C + b*X̄ᵀX̄ with
// X's rows read as whole vectors in place, no padded copy and no temporary on the heap.
//
// X comes as its rows back to back (a 1-D buffer of n * dx floats: the dispatch passes a dense X
// this way), so row k read as one vector from k * dx holds the row in its first dx lanes and the
// start of the rows after it in the others. Those lanes' sums are never stored. Each k adds the
// row times each of its own entries (one broadcast and one multiply-add per column, dx + 1
// accumulator vectors with the ones row), so the product costs dx + 1 multiply-adds per row of
// X. The untiled variant (covariance_tiles.h) instead first copied X into a block padded with
// zeros to a vector's width and formed a whole vector-square block from it: 16 multiply-adds per
// row with AVX-512 and a copy as dear as the product, well behind OpenBLAS's ssyrk (see
// docs/RESULTS.md#narrow-shapes).
//
// The last rows' vectors would reach past X's end (the rows of `tail` below): they are read
// through a clamped index, a gather, in a loop of their own, so the rows before them need no
// bounds check. Every entry of XᵀX is one chain of multiply-adds over k in the same order (the
// rows before the tail, then the tail's), and x(j,k) * x(i,k) is the same product as
// x(i,k) * x(j,k), so C's two triangles come out bitwise equal.
#include <functional>
#include <stdexcept>
#include <string>

#include "Halide.h"

namespace {

using namespace Halide;

class CovarianceUpdateNarrow : public Generator<CovarianceUpdateNarrow> {
public:
  Input<Buffer<float>> c_in{"c_in", 2};
  // X's n rows of dx floats, back to back: at least a vector's worth of values in all (the
  // dispatch checks), which the bounds of the rows before the tail assume.
  Input<Buffer<float>> x{"x", 1};
  // X's columns: at least 1 and fewer than the target's vector width of floats (the dispatch
  // reads it from this kernel's target).
  Input<int> dx{"dx"};
  Input<float> a{"a"};
  Input<float> b{"b"};
  Output<Buffer<float>> c_out{"c_out", 2};

  void generate() {
    const int V = natural_vector_size<float>();
    const Expr d = c_in.dim(0).extent(), total = x.dim(0).extent(), n = total / dx;
    // Rows whose vector overhangs X's end: the last `tail` rows (ceil(V / dx) - 1 of them).
    const Expr tail = min((V + dx - 1) / dx - 1, n);
    const Expr body = n - tail;

    // acc(u, v) = Σ_k X(u, k) X̄(v, k) for the V lanes u and the rows v <= dx (v = dx: the ones
    // column, the column sums of X). Lanes u >= dx are the rows after k, not X's columns.
    acc(u, v) = 0.0f;
    auto add_rows = [&](RDom &r, Expr first, Expr count, const std::function<Expr(Expr)> &at) {
      r = RDom(0, dx + 1, first, count);
      const Expr col = r.x, k = r.y;
      acc(u, col) += at(k * dx + u) * select(col < dx, at(k * dx + min(col, dx - 1)), 1.0f);
    };
    add_rows(body_rows, 0, body, [this](Expr i) { return x(i); });
    add_rows(tail_rows, body, tail, [this, total](Expr i) { return x(min(i, total - 1)); });

    // C: a*C + b*X̄ᵀX̄, X̄ᵀX̄'s ones column and row from the column sums, n in the corner (absent
    // unless C is one wider than X).
    Var j{"j"}, i{"i"};
    const Expr inner = j < dx && i < dx;
    const Expr gram =
        select(inner, acc(min(j, dx - 1), min(i, dx)), j < dx, acc(min(j, dx - 1), dx), i < dx,
               acc(min(i, dx - 1), dx), cast<float>(n));
    c_out(j, i) = a * c_in(j, i) + b * gram;

    x.dim(0).set_min(0);
    c_in.dim(0).set_min(0).dim(1).set_bounds(0, d);
    c_out.dim(0).set_bounds(0, d).dim(1).set_bounds(0, d);
    c_in.set_estimates({{0, 8}, {0, 8}});
    x.set_estimates({{0, 7000}});
    c_out.set_estimates({{0, 8}, {0, 8}});
    dx.set_estimate(7);
    a.set_estimate(0.95f);
    b.set_estimate(0.05f);

    if (get_target().has_gpu_feature())
      throw std::invalid_argument("hkfac_covariance_update_narrow has a CPU schedule only");
    schedule(V);
  }

private:
  Var u{"u"}, v{"v"};
  Func acc{"acc"};
  RDom body_rows, tail_rows;

  // The accumulators, a V x V stack block, stay in registers while k runs: one specialization
  // per width of X, so each has dx + 1 unrolled rows of one vector.
  void schedule(int V) {
    acc.bound(u, 0, V).bound(v, 0, V).compute_root().vectorize(u);
    for (int w = 1; w < V; ++w) {
      for (int s = 0; s < 2; ++s) {
        const RDom &r = s == 0 ? body_rows : tail_rows;
        acc.update(s).specialize(dx == w).reorder(u, r.x, r.y).vectorize(u).unroll(r.x);
      }
    }
    for (int s = 0; s < 2; ++s)
      acc.update(s).specialize_fail("hkfac_covariance_update_narrow needs X narrower than " +
                                    std::to_string(V) + " columns");
  }
};

} // namespace

HALIDE_REGISTER_GENERATOR(CovarianceUpdateNarrow, hkfac_covariance_update_narrow)
