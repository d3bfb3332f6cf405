// The one matrix-product building block every GEMM-like generator uses: algorithm + schedules.
//
// Matmul models p(j, i) = Σ_k a(k, i) · b(j, k) — in the hkfac convention M(col, row), i.e. the
// product of an (m x K) matrix `a` and a (K x n) matrix `b` — and owns how it is computed:
//
//  * the product is a 4-D Func tile(jj, ii, jt, it) holding one C x R output tile per (jt, it);
//    the consumer reads it through operator()(j, i), so an epilogue (alpha/beta, bias,
//    activation) fuses into the tile's consumer.
//  * b is read through b_pack(jj, k, jt): a C-column panel, zero-padded past n, so the inner loop
//    never needs a tail case; a is read through a_rows(ii, k, it), rows clamped to m - 1 (rows
//    past m compute values nobody stores). Transposed operands differ only in these two reads;
//    pack_a() adds a copy of a into rows first (a_copy), for a transposed a in deep products.
//  * CPU: a tile is 3 vectors x 8 rows = 24 accumulators (4 rows = 12 with AVX2's 16 vector
//    registers) held in registers while k runs innermost (per k: 3 vector loads of the packed
//    panel, one broadcast of a per row, 3 FMAs per row). Narrow products (`narrow`: n of at
//    most kNarrowColumnsTo, a layer with a few outputs) take tiles of 1 vector x 8 rows, and a
//    single column with an untransposed a (`one_column`) each row's dot product along k. A
//    parallel task is a block of rows x a block of column panels; for each column panel and
//    k-slice of kKSlice, the b panel slice is packed once into a fixed-size stack buffer (L1
//    sized, never malloc'd: large per-call heap buffers cost more in page faults than packing
//    itself) and reused by every tile of the task's row block. An untransposed a needs no
//    packing: its rows are sequential streams. A transposed one is columns in memory, a new
//    cache line per k step; pack_a() copies it into rows once per call.
//  * GPU: a thread block computes 64 x 32 outputs on 16 x 8 threads, each thread a contiguous
//    4 x 4 box in registers, reading both operands from global memory (through L1) as k runs.
//    Never run on a GPU yet; scripts/opencl-check runs it as OpenCL on the CPU (semantics
//    only), and schedule_gpu says what ptxas makes of it.
#pragma once

#include "Halide.h"

#include <algorithm>
#include <map>
#include <string>

#include "llvm_options.h" // the tile loop needs LLVM's SLP vectorizer off
#include "vector_registers.h"

namespace hkfac::sched {

// The CPU's tile shapes (the GPU has one). The dispatch picks the variant by n.
enum class Tiles {
  standard,
  // One-vector tiles, for n <= kNarrowColumnsTo: a 3-vector tile there computes 24 (AVX2) or 48
  // columns, mostly of zero padding, per row of n; the narrow tiles win up to 16 columns (see
  // docs/RESULTS.md#narrow-shapes).
  narrow,
  // n == 1 with a(k, i) contiguous along k (an untransposed a): 8 rows' dot products at a time,
  // whole vectors along k (8 accumulators), the lanes summed at the end. A one-vector tile uses
  // one lane in eight there.
  one_column,
};

// The generators' `tiles` parameter values.
inline const std::map<std::string, Tiles> kTilesNames = {
    {"standard", Tiles::standard}, {"narrow", Tiles::narrow}, {"one_column", Tiles::one_column}};

class Matmul {
public:
  // a(k, i): i < m rows, k < depth; b(j, k): j < n columns. a and b are usually inlined Funcs
  // (transposes, elementwise scaling) over the real inputs. `tiles` is the CPU's tile shape
  // (the GPU ignores it).
  Matmul(const std::string &name, Halide::Func a, Halide::Func b, Halide::Expr m, Halide::Expr n,
         Halide::Expr depth, const Halide::Target &target, Tiles tiles = Tiles::standard)
      : m_(m), n_(n), depth_(depth), gpu_(target.has_gpu_feature()),
        narrow_(tiles == Tiles::narrow && !gpu_), one_column_(tiles == Tiles::one_column && !gpu_),
        vec_(gpu_ ? 1 : target.natural_vector_size<float>()),
        cols_(gpu_ ? 64 : (narrow_ ? 1 : 3) * vec_),
        rows_(gpu_ ? 32 : (narrow_ ? kNarrowRows : cpu_tile_rows(vec_))),
        tiles_per_task_(narrow_ || one_column_ ? kTilesPerTask / 2 : kTilesPerTask),
        a_copy_(name + "_a_copy"), a_rows_(name + "_a_rows"), b_pack_(name + "_b_pack"),
        tile_(name + "_tile"), b_column_(name + "_b_column"), dot_lanes_(name + "_dot_lanes"),
        dot_(name + "_dot") {
    using namespace Halide;
    RDom k(0, depth, name + "_k");
    k_ = k.x;
    if (one_column_) {
      // Row it * kNarrowRows + ii's dot product with b's column: lane u sums the products at
      // k = u, u + vec, ...; the last depth % vec products come from one more vector ending at
      // depth, its lanes already counted masked off; then the lanes are summed. Needs depth of
      // at least a vector (the dispatch's kOneColumnDepthFrom).
      const Expr chunks = depth / vec_, rem = depth - chunks * vec_;
      const Expr row = min(it_ * kNarrowRows + ii_, m - 1);
      RDom kc(0, chunks, name + "_kc"), lane(0, vec_, name + "_lane");
      RDom last(0, select(rem > 0, 1, 0), name + "_last");
      kc_ = kc.x;
      lane_ = lane.x;
      last_ = last.x;
      b_column_(kv_) = b(0, kv_);
      dot_lanes_(kv_, ii_, it_) = 0.0f;
      dot_lanes_(kv_, ii_, it_) += a(kc * vec_ + kv_, row) * b_column_(kc * vec_ + kv_);
      const Expr k_last = depth - vec_ + last + kv_;
      dot_lanes_(kv_, ii_, it_) +=
          select(kv_ >= vec_ - rem, a(k_last, row) * b_column_(k_last), 0.0f);
      dot_(ii_, it_) = 0.0f;
      dot_(ii_, it_) += dot_lanes_(lane, ii_, it_);
      return;
    }
    if (gpu_) {
      // The GPU's product is plain (column, row): each thread computes a 4 x 4 box of it in
      // registers, and rows and columns past the edge are clamped reads nobody stores.
      tile_(jj_, ii_) = 0.0f;
      tile_(jj_, ii_) += a(k, min(ii_, m - 1)) * b(min(jj_, n - 1), k);
    } else {
      Expr row = it_ * rows_ + ii_, col = jt_ * cols_ + jj_;
      a_copy_(kv_, ii_) = a(kv_, ii_);
      a_rows_(ii_, kv_, it_) = a_copy_(kv_, min(row, m - 1));
      b_pack_(jj_, kv_, jt_) = select(col < n, b(min(col, n - 1), kv_), 0.0f);
      tile_(jj_, ii_, jt_, it_) = 0.0f;
      tile_(jj_, ii_, jt_, it_) += a_rows_(ii_, k, it_) * b_pack_(jj_, k, jt_);
    }
  }

  // The product at output coordinate (j, i); the consumer must cover [0, n) x [0, m) from 0.
  Halide::Expr operator()(const Halide::Expr &j, const Halide::Expr &i) const {
    if (one_column_)
      return dot_(i % kNarrowRows, i / kNarrowRows);
    if (gpu_)
      return tile_(j, i);
    return tile_(j % cols_, i % rows_, j / cols_, i / rows_);
  }

  // Tiles `out` (whose pure vars are j, i and which reads operator()(j, i)) and computes one
  // tile of accumulators per output tile. `out` is compute_root (or an output) and bound to
  // [0, n) x [0, m).
  void schedule_cpu(Halide::Func out, const Halide::Var &j, const Halide::Var &i) {
    using namespace Halide;
    bind(out, j, i);
    if (one_column_) {
      schedule_one_column(out, j, i);
      return;
    }
    Var jt("jt"), it("it"), jj("jj"), ii("ii"), jv("jv"), itt("itt"), jtt("jtt"), rb("rb"),
        cb("cb"), task("task");
    // A task is a block of rows x a block of column panels: row blocks bound how often b is
    // re-packed, column blocks keep both cores busy when m is small.
    out.split(i, it, ii, rows_, TailStrategy::GuardWithIf)
        .split(j, jt, jj, cols_, TailStrategy::GuardWithIf)
        .split(it, rb, itt, tiles_per_task_, TailStrategy::GuardWithIf)
        .split(jt, cb, jtt, kPanelsPerTask, TailStrategy::GuardWithIf)
        .reorder(jj, ii, itt, jtt, cb, rb)
        .fuse(cb, rb, task)
        .parallel(task)
        .unroll(ii);
    if (narrow_) {
      // Fewer columns than a vector: scalar stores, where a vector would be a masked store.
      out.specialize(n_ < vec_).unroll(jj);
    }
    out.split(jj, jj, jv, vec_, TailStrategy::Predicate).vectorize(jv).unroll(jj);

    // One column panel of the task's row block: tiles_per_task_ tiles of accumulators.
    Var tv("tv");
    tile_.compute_at(out, jtt)
        .bound(jj_, 0, cols_)
        .bound(ii_, 0, rows_)
        .bound_storage(jt_, 1)
        .bound_storage(it_, tiles_per_task_)
        .store_in(MemoryType::Stack)
        .split(jj_, jj_, tv, vec_)
        .vectorize(tv)
        .unroll(jj_)
        .unroll(ii_);
    RVar kb("kb"), ki("ki");
    tile_.update()
        .split(k_, kb, ki, kKSlice, TailStrategy::GuardWithIf)
        .split(jj_, jj_, tv, vec_)
        .reorder(tv, jj_, ii_, ki, jt_, it_, kb)
        .vectorize(tv)
        .unroll(jj_)
        .unroll(ii_);

    if (pack_a_) {
      // A transposed a, copied once per call into row-major rows: the tiles then read it as they
      // read an untransposed a, as sequential row streams. The copy runs in vector x 8 blocks
      // (strided vector loads, contiguous stores), 32 rows per task: the fastest of the block and
      // task shapes timed. The row stride is padded off powers of two, where the rows shared L1
      // sets (see docs/RESULTS.md#transposed-operand-packing).
      Var ko("ko"), ro("ro"), ki("ki"), ri("ri"), rt("rt");
      a_copy_.compute_root()
          .tile(kv_, ii_, ko, ro, ki, ri, vec_, 8, TailStrategy::GuardWithIf)
          .vectorize(ki)
          .unroll(ri)
          .split(ro, rt, ro, 4, TailStrategy::GuardWithIf)
          .parallel(rt)
          .bound_storage(kv_, (depth_ + 15) / 16 * 16 + 16);
    }
    b_pack_.compute_at(tile_, kb)
        .bound_storage(jj_, cols_)
        .bound_storage(kv_, kKSlice)
        .bound_storage(jt_, 1)
        .store_in(MemoryType::Stack)
        .split(jj_, jj_, tv, vec_)
        .reorder(tv, jj_, kv_, jt_)
        .vectorize(tv)
        .unroll(jj_);
  }

  void schedule_gpu(Halide::Func out, const Halide::Var &j, const Halide::Var &i) {
    using namespace Halide;
    bind(out, j, i);
    // A 64 x 32 block on 16 x 8 threads; each thread owns a contiguous 4 x 4 box of outputs,
    // accumulated in registers while k runs (`ptxas -v`, sm_90: no stack, 48-64 registers for
    // the four gemms). A warp's 16 columns of threads read 64 adjacent floats of b per k.
    // The previous schedule staged 16-deep k-slices of both operands in shared memory, but its
    // tile was a block-level allocation that Halide 14 copied into every thread, 8 KiB of local
    // memory per thread; Halide 14 does not allow that staging inside the thread loops, where
    // the register box has to be computed (docs/RESULTS.md#gpu-schedules).
    Var jt("jt"), it("it"), jj("jj"), ii("ii"), jr("jr"), ir("ir"), tx("tx"), ty("ty");
    const int box = 4;
    out.tile(j, i, jt, it, jj, ii, cols_, rows_, TailStrategy::GuardWithIf)
        .tile(jj, ii, tx, ty, jr, ir, box, box, TailStrategy::GuardWithIf)
        .reorder(jr, ir, tx, ty, jt, it)
        .gpu_blocks(jt, it)
        .gpu_threads(tx, ty)
        .unroll(jr)
        .unroll(ir);
    tile_.compute_at(out, tx)
        .store_in(MemoryType::Register)
        .bound_extent(jj_, box)
        .bound_extent(ii_, box)
        .unroll(jj_)
        .unroll(ii_);
    tile_.update().reorder(jj_, ii_, k_).unroll(jj_).unroll(ii_);
  }

  // CPU: copy a into rows before the product (call before schedule()). For a transposed a in
  // deep products; the copy is a pass over a that small products do not repay.
  void pack_a() { pack_a_ = true; }

  // Chooses by target; the usual entry point.
  void schedule(Halide::Func out, const Halide::Var &j, const Halide::Var &i) {
    if (gpu_) {
      schedule_gpu(out, j, i);
    } else {
      schedule_cpu(out, j, i);
    }
  }

private:
  // Tiles::one_column: blocks of kNarrowRows rows, 16 blocks (128 rows) per parallel task.
  void schedule_one_column(Halide::Func out, const Halide::Var &j, const Halide::Var &i) {
    using namespace Halide;
    Var it("it"), ii("ii"), rb("rb"), itt("itt");
    out.split(i, it, ii, kNarrowRows, TailStrategy::GuardWithIf)
        .split(it, rb, itt, tiles_per_task_, TailStrategy::GuardWithIf)
        .reorder(j, ii, itt, rb)
        .parallel(rb)
        .vectorize(ii);
    // b's column, copied once per call: read in place, each block's vector of it was a gather
    // (b's stride along k is a layer's output count, not known to be 1), 16 per block of rows.
    b_column_.compute_root().vectorize(kv_, vec_, TailStrategy::ShiftInwards);
    dot_.compute_at(out, itt).bound(ii_, 0, kNarrowRows).vectorize(ii_);
    dot_.update().reorder(ii_, lane_).vectorize(ii_);
    dot_lanes_.compute_at(out, itt)
        .bound(kv_, 0, vec_)
        .bound(ii_, 0, kNarrowRows)
        .vectorize(kv_)
        .unroll(ii_);
    dot_lanes_.update(0).reorder(kv_, ii_, kc_).vectorize(kv_).unroll(ii_);
    dot_lanes_.update(1).reorder(kv_, ii_, last_).vectorize(kv_).unroll(ii_);
  }

  // Rows of a CPU tile: as many as fit the vector registers beside the tile's 3 panel vectors
  // and one broadcast, at most 8. AVX-512 has 32: 8 rows (24 accumulators). AVX2 has 16: 4 rows
  // (12); with 8 rows there the accumulators spilled, and 3 x 4 ran fastest of the shapes timed
  // (see docs/RESULTS.md#matmul-register-tile).
  static int cpu_tile_rows(int vec) {
    const int panel_vectors = 3;
    return std::min(8, (vector_registers(vec) - panel_vectors - 1) / panel_vectors);
  }

  // The tile index arithmetic in operator() simplifies only when the consumer starts at 0.
  void bind(Halide::Func out, const Halide::Var &j, const Halide::Var &i) {
    out.bound(j, 0, n_).bound(i, 0, m_);
  }

  Halide::Expr m_, n_, depth_;
  bool gpu_, narrow_, one_column_;
  bool pack_a_ = false;
  int vec_, cols_, rows_;
  // Tiles per task: kTilesPerTask, halved for the narrow tiles (8 rows, twice AVX2's 4), so that
  // a task keeps AVX2's 128 rows: with 256, dW of a 250 x 10 layer at batch 128 was one task, on
  // one core, and ran slower than with the 3-vector tiles.
  int tiles_per_task_;
  Halide::Var jj_{"jj"}, ii_{"ii"}, jt_{"jt"}, it_{"it"}, kv_{"kv"};
  Halide::RVar k_, kc_, lane_, last_;
  // Tiles (rows) and column panels per parallel task, and the k-slice length: a packed b slice
  // (cols x kKSlice floats, 24 KiB) stays in L1 while the task's tiles stream a past it.
  // Measured side by side: 3x8 tiles beat 4x6 and 2x12; kKSlice 256 ties 128.
  static constexpr int kTilesPerTask = 32, kPanelsPerTask = 4, kKSlice = 128;
  // Rows of a narrow tile: 8 accumulators, as many as the FMA units keep in flight.
  static constexpr int kNarrowRows = 8;
  Halide::Func a_copy_, a_rows_, b_pack_, tile_;
  // Tiles::one_column's copy of b's column, per-lane sums and dot products.
  Halide::Func b_column_, dot_lanes_, dot_;
};

} // namespace hkfac::sched
