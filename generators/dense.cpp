// Dense layer kernels: Y = act(X W + b) with the activation fused, and the matching backward pass.
#include "Halide.h"

#include <stdexcept>

#include "matmul_schedule.h"

namespace {

using namespace Halide;

enum class Act { identity, tanh, relu, sigmoid };

const std::map<std::string, Act> kActNames = {{"identity", Act::identity},
                                              {"tanh", Act::tanh},
                                              {"relu", Act::relu},
                                              {"sigmoid", Act::sigmoid}};

// exp and tanh lower to scalar libm calls on x86; fast_exp is a vectorised polynomial (error in
// the last few bits) that is only valid without overflow, hence the clamps. Past |z| = 40
// (tanh) or 80 (sigmoid) the float result is already saturated.
Expr exp_clamped(const Expr &z, float limit) { return fast_exp(clamp(z, -limit, limit)); }
Expr tanh_via_exp(const Expr &z) { return 1.0f - 2.0f / (exp_clamped(2.0f * z, 80.0f) + 1.0f); }

Expr activate_finite(Act act, const Expr &z) {
  switch (act) {
  case Act::tanh:
    return tanh_via_exp(z);
  case Act::relu:
    return max(z, 0.0f);
  case Act::sigmoid:
    return 1.0f / (1.0f + exp_clamped(-z, 80.0f));
  case Act::identity:
    break;
  }
  return z;
}

// A NaN pre-activation stays NaN, as in libm's tanh and the library's unfused activations: the
// clamps and max above turned it into ±1 or 0, so a batch with a NaN input could evaluate to a
// finite loss. The test is on the bits: z comes from fast-math arithmetic, which lets LLVM assume
// it is not NaN and fold is_nan(z) (or z != z) to false; a select on z < 0 would be simplified
// back into the max.
Expr activate(Act act, const Expr &z) {
  if (act == Act::identity)
    return z;
  Expr magnitude = reinterpret(UInt(32), z) & Expr(uint32_t(0x7fffffff));
  return select(magnitude > Expr(uint32_t(0x7f800000)), z, activate_finite(act, z));
}

// act'(z) expressed through y = act(z), so the backward pass needs only the forward's output.
Expr derivative_from_output(Act act, const Expr &y) {
  switch (act) {
  case Act::tanh:
    return 1.0f - y * y;
  case Act::relu:
    return select(y > 0.0f, 1.0f, 0.0f);
  case Act::sigmoid:
    return y * (1.0f - y);
  case Act::identity:
    break;
  }
  return 1.0f;
}

// Elementwise outputs of `cols` columns: rows in parallel, vectors along a row. Rows narrower
// than a vector stay scalar (a vector would be one masked load or store per row) in blocks of
// rows large enough to repay a task.
void schedule_elementwise(Func f, const Var &j, const Var &i, const Expr &cols, const Target &t) {
  if (t.has_gpu_feature()) {
    Var jo("jo"), io("io"), ji("ji"), ii("ii");
    f.gpu_tile(j, i, jo, io, ji, ii, 32, 8, TailStrategy::GuardWithIf);
  } else {
    const int vec = t.natural_vector_size<float>();
    f.specialize(cols < vec).parallel(i, 512, TailStrategy::GuardWithIf);
    f.vectorize(j, vec, TailStrategy::GuardWithIf).parallel(i, 8, TailStrategy::GuardWithIf);
  }
}

// Y = act(X W + b). X is (batch x d_in), W (d_in x d_out), b (d_out), Y (batch x d_out).
class DenseForward : public Generator<DenseForward> {
public:
  GeneratorParam<Act> activation{"activation", Act::identity, kActNames};
  // The CPU's tile shape: narrow for layers with a few outputs (the dispatch's
  // kNarrowColumnsTo), one_column for a single output.
  GeneratorParam<hkfac::sched::Tiles> tiles{"tiles", hkfac::sched::Tiles::standard,
                                            hkfac::sched::kTilesNames};

  Input<Buffer<float>> X{"X", 2};
  Input<Buffer<float>> W{"W", 2};
  Input<Buffer<float>> b{"b", 1};
  Output<Buffer<float>> Y{"Y", 2};

  void generate() {
    Expr batch = X.dim(1).extent(), d_in = X.dim(0).extent(), d_out = W.dim(0).extent();
    x(k, i) = X(k, i);
    w(j, k) = W(j, k);
    hkfac::sched::Matmul xw("xw", x, w, batch, d_out, d_in, get_target(), tiles);
    bias(j) = b(j);
    Y(j, i) = activate(activation, xw(j, i) + bias(j));

    X.set_estimates({{0, 784}, {0, 128}});
    W.set_estimates({{0, 1000}, {0, 784}});
    b.set_estimates({{0, 1000}});
    Y.set_estimates({{0, 1000}, {0, 128}});
    xw.schedule(Y, j, i);
    // Halide 14 emits the masked loads of a vector tail with the alignment implied by the
    // index alone; a 1-D user buffer (e.g. an Eigen vector) need not be 64-byte aligned, so the
    // bias is read from an aligned internal copy.
    bias.compute_root();
  }

private:
  Var j{"j"}, i{"i"}, k{"k"};
  Func x{"x"}, w{"w"}, bias{"bias"};
};

// dZ = dY ⊙ act'(Z) (from Y), dX = dZ Wᵀ, dW = Xᵀ dZ, db = Σ_rows dZ — one pipeline so dZ is
// computed once and read by the three reductions.
class DenseBackward : public Generator<DenseBackward> {
public:
  GeneratorParam<Act> activation{"activation", Act::identity, kActNames};
  // Copies X into Xᵀ's rows before dW = Xᵀ dZ (CPU): worth its pass over X only for large
  // batches, so the dispatch picks this variant by shape (kGemmPackedDepthFrom).
  GeneratorParam<bool> pack_x{"pack_x", false};
  // The CPU's tile shape for dW = Xᵀ dZ, whose columns are the layer's outputs: narrow for layers
  // with a few (the dispatch's kNarrowColumnsTo). dX's columns are the inputs. one_column is a
  // layer with a single output (generate_one_output).
  GeneratorParam<hkfac::sched::Tiles> tiles{"tiles", hkfac::sched::Tiles::standard,
                                            hkfac::sched::kTilesNames};

  Input<Buffer<float>> dY{"dY", 2};
  Input<Buffer<float>> Y{"Y", 2};
  Input<Buffer<float>> X{"X", 2};
  Input<Buffer<float>> W{"W", 2};
  Output<Buffer<float>> dZ{"dZ", 2};
  Output<Buffer<float>> dX{"dX", 2};
  Output<Buffer<float>> dW{"dW", 2};
  Output<Buffer<float>> db{"db", 1};

  void generate() {
    Expr batch = X.dim(1).extent(), d_in = X.dim(0).extent(), d_out = W.dim(0).extent();
    dZ(j, i) = dY(j, i) * derivative_from_output(activation, Y(j, i));
    if (tiles == hkfac::sched::Tiles::one_column) {
      generate_one_output(batch, d_in);
      return;
    }

    // dX(j, i) = Σ_k dZ(k, i) W(j, k)ᵀ; dW(j, i) = Σ_k X(i, k)ᵀ dZ(j, k).
    dz_rows(k, i) = dZ(k, i);
    w_t(j, k) = W(k, j);
    hkfac::sched::Matmul dz_wt("dz_wt", dz_rows, w_t, batch, d_in, d_out, get_target());
    dX(j, i) = dz_wt(j, i);

    x_t(k, i) = X(i, k);
    dz_cols(j, k) = dZ(j, k);
    hkfac::sched::Matmul xt_dz("xt_dz", x_t, dz_cols, d_in, d_out, batch, get_target(), tiles);
    dW(j, i) = xt_dz(j, i);

    RDom r(0, batch, "r");
    col_sum(j) = 0.0f;
    col_sum(j) += dZ(j, r);
    db(j) = col_sum(j);

    dY.set_estimates({{0, 1000}, {0, 128}});
    Y.set_estimates({{0, 1000}, {0, 128}});
    X.set_estimates({{0, 784}, {0, 128}});
    W.set_estimates({{0, 1000}, {0, 784}});
    dZ.set_estimates({{0, 1000}, {0, 128}});
    dX.set_estimates({{0, 784}, {0, 128}});
    dW.set_estimates({{0, 1000}, {0, 784}});
    db.set_estimates({{0, 1000}});

    dY.dim(0).set_bounds(0, d_out).dim(1).set_bounds(0, batch);
    Y.dim(0).set_bounds(0, d_out).dim(1).set_bounds(0, batch);
    schedule_elementwise(dZ, j, i, d_out, get_target());
    dz_wt.schedule(dX, j, i);
    if (pack_x)
      xt_dz.pack_a();
    xt_dz.schedule(dW, j, i);
    schedule_column_sum(r, d_out);
  }

private:
  Var j{"j"}, i{"i"}, k{"k"};
  Func dz_rows{"dz_rows"}, w_t{"w_t"}, x_t{"x_t"}, dz_cols{"dz_cols"}, col_sum{"col_sum"};
  Func dw_sum{"dw_sum"};

  // A layer with one output (CPU). dX = dZ Wᵀ is then an outer product, dZ's column times W's
  // row, with nothing to sum; and dW = Xᵀ dZ is one column, X's rows scaled by dZ and summed:
  // down the batch, so each vector of inputs accumulates along X's contiguous rows. As products
  // of the general kernels' tiles, the outer product packed and tiled a depth of one and the
  // column ran as a narrow tile over Xᵀ's strided columns, well behind OpenBLAS's two sgemm
  // calls (see docs/RESULTS.md#narrow-shapes).
  void generate_one_output(const Expr &batch, const Expr &d_in) {
    if (get_target().has_gpu_feature())
      throw std::invalid_argument("dense_backward: tiles=one_column has a CPU schedule only");
    dX(j, i) = dZ(0, i) * W(0, j);
    RDom r(0, batch, "r");
    dw_sum(j) = 0.0f;
    dw_sum(j) += X(j, r) * dZ(0, r);
    dW(k, i) = dw_sum(i);
    col_sum(j) = 0.0f;
    col_sum(j) += dZ(0, r);
    db(j) = col_sum(j);

    // One output: the per-output matrices are columns, contiguous down their rows.
    dY.dim(0).set_bounds(0, 1).dim(1).set_stride(1);
    Y.dim(0).set_bounds(0, 1).dim(1).set_stride(1);
    W.dim(0).set_bounds(0, 1).dim(1).set_stride(1);
    dZ.dim(0).set_bounds(0, 1).dim(1).set_stride(1);
    dW.dim(0).set_bounds(0, 1).dim(1).set_stride(1);
    db.dim(0).set_bounds(0, 1);

    X.set_estimates({{0, 250}, {0, 128}});
    dY.set_estimates({{0, 1}, {0, 128}});
    Y.set_estimates({{0, 1}, {0, 128}});
    dZ.set_estimates({{0, 1}, {0, 128}});
    W.set_estimates({{0, 1}, {0, 250}});
    dX.set_estimates({{0, 250}, {0, 128}});
    dW.set_estimates({{0, 1}, {0, 250}});
    db.set_estimates({{0, 1}});
    schedule_one_output_cpu(batch, d_in, r);
  }

  void schedule_one_output_cpu(const Expr &batch, const Expr &d_in, const RDom &r) {
    const int vec = natural_vector_size<float>();
    const Expr big = batch * d_in >= kOneOutputParallelFrom;
    Var jo{"jo"}, ji{"ji"}, jb{"jb"}, jv{"jv"};
    // dZ first (batch floats, scalar: a column).
    dZ.compute_root();
    // dX: rows of vectors, rows of blocks on both cores once there are enough of them.
    dX.specialize(d_in >= vec && big).vectorize(j, vec, TailStrategy::ShiftInwards).parallel(i, 16);
    dX.specialize(d_in >= vec).vectorize(j, vec, TailStrategy::ShiftInwards);
    dX.specialize(big).parallel(i, 16);
    // dW: blocks of kBlockVectors vectors of inputs (that many accumulator chains to cover the
    // multiply-add latency) walk down the batch; blocks to both cores for wide layers.
    dw_sum.compute_root().vectorize(j, vec, TailStrategy::GuardWithIf);
    Stage acc = dw_sum.update();
    acc.split(j, jo, ji, vec * kBlockVectors, TailStrategy::GuardWithIf)
        .split(ji, jb, jv, vec)
        .reorder(jv, jb, r, jo)
        .vectorize(jv)
        .unroll(jb);
    acc.specialize(big).parallel(jo);
    dW.specialize(d_in >= vec).vectorize(i, vec, TailStrategy::ShiftInwards);
    col_sum.compute_root();
  }
  // Accumulator vectors per block of dW's inputs, and the products from which dX's rows and dW's
  // blocks run on both cores.
  static constexpr int kBlockVectors = 8;
  static constexpr int kOneOutputParallelFrom = 64 * 1024;

  // db: each lane owns a column and walks down the rows (contiguous vector loads). The sums
  // live in an internal (aligned) buffer: Halide 14 emits a vector tail's masked loads and
  // stores with the alignment implied by the index alone, which a 1-D user buffer need not
  // have; db itself is then a plain scalar copy of d_out floats.
  void schedule_column_sum(const RDom &r, const Expr &cols) {
    col_sum.compute_root();
    if (get_target().has_gpu_feature()) {
      Var jo("jo"), ji("ji");
      col_sum.gpu_tile(j, jo, ji, 64, TailStrategy::GuardWithIf);
      col_sum.update().gpu_tile(j, jo, ji, 64, TailStrategy::GuardWithIf);
      db.gpu_tile(j, jo, ji, 64, TailStrategy::GuardWithIf);
    } else {
      const int vec = natural_vector_size<float>();
      col_sum.specialize(cols >= vec).vectorize(j, vec, TailStrategy::GuardWithIf);
      col_sum.update().reorder(j, r.x);
      // Fewer columns than a vector: scalar sums (a vector would be masked loads of every row).
      col_sum.update().specialize(cols >= vec).vectorize(j, vec, TailStrategy::GuardWithIf);
    }
  }
};

} // namespace

HALIDE_REGISTER_GENERATOR(DenseForward, hkfac_dense_forward)
HALIDE_REGISTER_GENERATOR(DenseBackward, hkfac_dense_backward)
