// The covariance update's algorithm and schedules, C <- a*C + b*X̄ᵀX̄ with one triangle computed
// and mirrored exactly. Shared by the generator over a matrix X (covariance.cpp) and the one over
// the im2col patches of a batch of images (patch_covariance.cpp): they differ only in where X's
// values come from.
#pragma once

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>

#include "Halide.h"
#include "covariance_tile.h"
#include "vector_registers.h"

namespace hkfac::gen {

// The CPU's wide tiles, for wide X (the runtime's kCovarianceWideFrom): a 3-vector x 8-row
// register block loads less per FMA than the 32-wide tile's 2 x 8, and there are fewer than half
// as many pairs to set up and write back (docs/RESULTS.md#covariance-wide-tiles).
constexpr int kCovarianceWideTile = 48;
// The wide variant's tile with 16 vector registers (AVX2): the same 3 x 4 block a 48-wide tile
// would get, with a strip under 24 columns instead of 41 at d = 1001
// (docs/RESULTS.md#covariance-wide-tiles).
constexpr int kCovarianceWideTileAvx2 = 24;
// The untiled CPU variant's products from this many n·dx² (about twice the multiply-adds its
// blocks do) run their rows of blocks on both cores; below it one core's few microseconds cost
// less than waking the other (docs/RESULTS.md#covariance-small-factors). The patch generator
// keeps its product serial: its gathers sit between the products, and parallel ones measured
// slower there.
constexpr int kCovarianceUntiledParallelFrom = 200000;
// ... and only from this many rows of X: the cores split the rows of blocks, each running all n
// rows of X, so fewer rows make tasks too short for the pool's fixed cost
// (docs/RESULTS.md#covariance-small-factors).
constexpr int kCovarianceUntiledParallelRows = 256;

// The tile width a generator's `tile` parameter asks for, checked against the target. The GPU
// schedule runs one thread per element of a 32-wide tile. The wide variant's tile depends on the
// CPU's vector registers (kCovarianceWideTileAvx2).
inline int tile_width(int requested, const Halide::Target &target) {
  if (requested != kCovarianceTile && requested != kCovarianceWideTile)
    throw std::invalid_argument("tile must be " + std::to_string(kCovarianceTile) + " or " +
                                std::to_string(kCovarianceWideTile) + ", got " +
                                std::to_string(requested));
  if (target.has_gpu_feature() && requested != kCovarianceTile)
    throw std::invalid_argument("the GPU schedule's tiles are " + std::to_string(kCovarianceTile) +
                                " wide, got tile=" + std::to_string(requested));
  if (requested == kCovarianceWideTile && target.natural_vector_size<float>() < 16)
    return kCovarianceWideTileAvx2;
  return requested;
}

// A register block of the tile product: `vecs` vectors of a tile's columns x `rows` of its rows,
// vecs * rows accumulators, fed per k by `vecs` loads and `rows` broadcasts. It needs
// vecs * rows + min(vecs, rows) + 1 vector registers (the accumulators, plus one operand's loads
// or broadcasts held while the other's pass one at a time), and it must divide the tile.
struct RegisterBlock {
  int vecs, rows;
};

// The block with the most accumulators that fits `registers` (32 with AVX-512, 16 with AVX2) for
// a tile `tile_vecs` vectors wide, the fewest loads and broadcasts per k among equals; with
// `whole_rows` (the strip's blocks) it spans all of a tile row's vectors. AVX-512: 2 x 8 (32-wide
// tiles) and 3 x 8 (48-wide). AVX2: 4 x 2 (32-wide) and 3 x 4 (24-wide).
inline RegisterBlock register_block(int tile_vecs, int tile, int registers, bool whole_rows) {
  auto need = [](int v, int r) { return v * r + std::min(v, r) + 1; };
  RegisterBlock best{tile_vecs, 1};
  for (int v = tile_vecs; v >= (whole_rows ? tile_vecs : 1); --v) {
    for (int r = 1; r <= 8; ++r) {
      if (tile_vecs % v != 0 || tile % r != 0 || need(v, r) > registers)
        continue;
      const int acc = v * r, best_acc = best.vecs * best.rows;
      if (acc > best_acc || (acc == best_acc && v + r < best.vecs + best.rows))
        best = {v, r};
    }
  }
  return best;
}

// result = a * c_in + b * X̄ᵀX̄ for X (n rows x dx cols, x(col, row)) and X̄ = [X, 1]: X̄ has
// c_in's width d, a column past X's being the ones (homogeneous) column, never materialised.
// Homogeneity is read from the shapes rather than passed: one library serves both cases, and the
// ones column is just the last column of the edge strip below. c_in must be symmetric: a tile
// pair's lower tile is its upper tile's result transposed, so c_in's lower tiles are not read.
// Every element of c_in that is read is read only by the pair (or strip element) that writes it,
// before it writes it, so the output may alias c_in (the dispatch always passes C as both).
//
// The caller gives X twice: `x`, read only inside [0, dx) x [0, n), and `xbar`, X̄ over columns
// [0, d + T) (ones past dx) and rows [0, n).
//
// Layout of the work over C (d x d), with T the tile width, nt = dx / T full tiles and c0 = nt * T:
//  * [0, c0)²: tile pairs (ti <= tj) enumerated by one packed index q. Each pair's product
//    gram(jj, ii, q) = Σ_k X(ti*T + ii, k) X(tj*T + jj, k) is written to the upper tile as is and,
//    unless ti == tj, to the lower tile transposed, so the output is symmetric by construction.
//    A diagonal tile is computed whole; its two triangles are the same sums of the same products
//    in the same order, hence bitwise equal.
//  * the edge strip, columns [c0, d) (the rest of X plus the ones column): edge(i, c) =
//    Σ_k X̄(c0 + c, k) X̄(i, k) for every row i of C, written down the strip and mirrored along
//    the rows. Where both i and c0 + c lie in the strip, the pair's two entries are the same
//    products (x * 1 = 1 * x for the ones column) summed by the same code in the same order.
//
// Each tile pair is written to C right after it is computed, from a stack buffer: no temporary
// of size O(d²) exists (fresh pages cost more than the arithmetic). The temporaries are the strip,
// d x (< T), and on the CPU X̄ packed by column tiles, n x (c0 + T): glibc serves a block of a size
// it has just unmapped from its heap from then on (its mmap threshold adapts), so repeated updates
// of one shape fault its pages in only once.
//
// Halide infers bounds for the tile stage even when it has no tiles, and a tile would overhang a
// C narrower than T: X with fewer columns than that uses the untiled form (tiled = false),
// which forms the small product whole, on the CPU in blocks one vector wide (`block_width`, the
// CPU's vector width; 0 on the GPU). A block may reach past X's last column only when X is
// narrower than a block: X read from a buffer is then first copied into a zero-padded block,
// while a Func that is computed over whatever its readers need (`x_padded`: the patch matrix,
// realized in whole vectors) is read as it is. (The dispatch sends a narrow X with dense rows and
// at least a vector of values to covariance_narrow.cpp instead, which needs no copy; the padded
// block serves the rest.)
class CovarianceTiles {
public:
  // Defines `out` (the generator's output, passed as its Func) from c_in, X and the scalars,
  // with tiles `tile` wide (kCovarianceTile, or kCovarianceWideTile on the CPU); the untiled
  // form's blocks are `block_width` wide (the CPU's vector width; 0 on the GPU, which has none).
  //
  // `upper_only` (tiled form only) writes the upper triangle (column >= row) and the whole of
  // the diagonal tiles, as ssyrk does, and no tile below them: the rest of the lower triangle
  // keeps its old values. Upper entries read only upper entries of c_in, so whatever the lower
  // triangle holds (even NaN) cannot reach them. A consumer that reads one triangle (a
  // Cholesky, a symmetric eigensolver) needs no more, and at n = 128 the mirrored half's writes
  // to C are what the update waits on (docs/RESULTS.md#covariance-write-back).
  CovarianceTiles(bool tiled, int tile, int block_width, bool x_padded, Halide::Func out,
                  Halide::Func c_in, Halide::Func x, Halide::Func xbar, Halide::Expr d,
                  Halide::Expr dx, Halide::Expr n, Halide::Expr a, Halide::Expr b,
                  bool upper_only = false)
      : result(std::move(out)), tiled_(tiled), upper_only_(upper_only), tile_(tile),
        block_width_(block_width), x_padded_(x_padded), c_in_(std::move(c_in)), d(std::move(d)),
        dx(std::move(dx)), n(std::move(n)), a(std::move(a)), b(std::move(b)) {
    using namespace Halide;
    if (upper_only && !tiled)
      throw std::invalid_argument("upper_only needs the tiled form (the untiled one is small "
                                  "enough to write both triangles)");
    k = RDom(0, this->n, "k");
    result(j, i) = undef<float>();
    if (tiled_) {
      define_tiled(xbar);
    } else {
      define_small(x);
    }
  }

  // The output, as given.
  Halide::Func result;

  // `parallel_untiled`: the untiled form's large products run on both cores
  // (kCovarianceUntiledParallelFrom).
  void schedule_cpu(int vec, bool parallel_untiled) {
    using namespace Halide;
    Var jo{"jo"}, ji{"ji"};
    if (!tiled_) {
      if (block_width_ != vec)
        throw std::invalid_argument("the untiled CPU schedule needs block_width = " +
                                    std::to_string(vec) + ", got " + std::to_string(block_width_));
      // The block pairs (define_small): each block's vec accumulators (one vector of columns x
      // vec rows) stay in registers while k runs, then the block and its transpose are stored.
      // Rows of blocks go to both cores for large products; X narrower than a vector is one
      // block over its zero-padded copy.
      gram.compute_root();
      Stage pairs = gram.update();
      pairs.allow_race_conditions().vectorize(blocks[0]).unroll(blocks[1]).unroll(blocks[2]);
      if (parallel_untiled) {
        pairs
            .specialize(dx >= vec && n >= kCovarianceUntiledParallelRows &&
                        n * dx * dx >= kCovarianceUntiledParallelFrom)
            .parallel(blocks[4]);
      }
      // Whole vectors of X: a plain vector load per block column (the narrow branch's selects
      // would otherwise make every load a gather).
      pairs.specialize(dx >= vec);
      block_gram.compute_at(gram, blocks[3]).vectorize(u_).unroll(v_);
      block_gram.update().reorder(u_, v_, k).vectorize(u_).unroll(v_);
      if (!x_padded_) {
        // The padded copy's rows, a few scalar stores each (computed over one row of zeros when
        // X is not narrow).
        narrow.compute_root().bound(j, 0, vec).vectorize(j);
        narrow.update().unscheduled();
      }
      // Column sums by the same pattern: one register accumulator per vector of columns.
      Func sums = col_sum.in(result);
      sums.compute_root();
      sums.specialize(dx >= vec).split(j, jo, ji, vec, TailStrategy::ShiftInwards).vectorize(ji);
      sums.split(j, jo, ji, vec, TailStrategy::RoundUp).vectorize(ji);
      col_sum.compute_at(sums, jo).vectorize(j, vec, TailStrategy::GuardWithIf);
      col_sum.update().reorder(j, k).vectorize(j, vec, TailStrategy::GuardWithIf);
      // Narrow X's few entries stay scalar: a vector tail there is masked loads and stores.
      result.update(0).allow_race_conditions().specialize(dx >= vec).vectorize(
          all.x, vec, TailStrategy::GuardWithIf);
      result.update(1).unscheduled(); // a single column
      result.update(2).allow_race_conditions().specialize(dx >= vec).vectorize(
          ones_row.x, vec, TailStrategy::GuardWithIf);
      return;
    }
    // The register blocks of the tile product and of the strip (register_block).
    const int registers = sched::vector_registers(vec);
    const RegisterBlock block = register_block(tile_ / vec, tile_, registers, false);
    const int block_i = block.rows;
    const int strip_block = register_block(tile_ / vec, tile_, registers, true).rows;
    RVar u = tiles[0], v = tiles[1], side = tiles[2], p = tiles[3];
    // Tile pairs write disjoint parts of C, which Halide cannot prove; both cores take runs of
    // consecutive pairs (up to 8, at least 16 runs per call), so they do not write alternate
    // tiles of the same rows of C and pass the cache lines at the tiles' edges back and forth.
    // The mirrored side gathers the pair's stack tile down its columns from L1: the stores to C
    // limit this loop, not the transpose (docs/RESULTS.md#covariance-c-row-stride).
    const Halide::Expr run = clamp(p.extent() / 16, 1, 8); // p runs over the pairs
    RVar po{"po"}, pin{"pin"};
    result.update(0)
        .allow_race_conditions()
        .unroll(side)
        .vectorize(u, vec)
        .unroll(v, 4)
        .split(p, po, pin, run, TailStrategy::GuardWithIf)
        .parallel(po);
    // The pair's product is a T² stack tile. Its rows' register blocks take turns on each
    // chunk of kChunk rows of X, so a chunk of the column panel is read from L2 once and then
    // from L1 by the tile's other blocks (docs/RESULTS.md#covariance-wide-tiles). Each block's
    // accumulators are loaded from and stored to the stack tile once per chunk.
    constexpr int kChunk = 128;
    Var iio{"iio"}, iii{"iii"}, jjo{"jjo"}, jji{"jji"};
    RVar ko{"ko"}, ki{"ki"};
    gram.compute_at(result, pin).bound(jj, 0, tile_).bound(ii, 0, tile_).vectorize(jj, vec);
    pair_out.compute_at(result, pin)
        .bound(jj, 0, tile_)
        .bound(ii, 0, tile_)
        .vectorize(jj, vec)
        .unroll(jj);
    Stage product = gram.update();
    product.split(ii, iio, iii, block_i).split(k, ko, ki, kChunk, TailStrategy::GuardWithIf);
    if (block.vecs * vec == tile_) {
      product.reorder(jj, iii, ki, iio, ko).vectorize(jj, vec).unroll(jj).unroll(iii);
    } else {
      // Blocks narrower than the tile: its column groups take turns on the chunk as well.
      product.split(jj, jjo, jji, block.vecs * vec)
          .reorder(jji, iii, ki, iio, jjo, ko)
          .vectorize(jji, vec)
          .unroll(jji)
          .unroll(iii);
    }
    // The panels, packed once per call (c0 x n floats): read in place, a pair's two panels are a
    // tile's width of floats from each of n rows a page apart, which the L2 prefetcher does not
    // follow (docs/RESULTS.md#covariance-wide-tiles). Packing per pair would repeat the copy.
    xpack.compute_root().bound(ii, 0, tile_).vectorize(ii, vec).parallel(t);
    // The strip (under a tile's width, often just the ones column) in register blocks: a tile's
    // rows x strip_block strip columns, blocks of rows to both cores. A block's rows are one
    // packed tile, and its columns past the strip are the strip tile's padding (ones), so blocks
    // are never cut: the strip is computed over whole tiles of rows and whole groups of
    // strip_block columns. One accumulator chain per strip column left the FMA latency exposed.
    Var io_edge{"io_edge"}, ie{"ie"}, co{"co"}, ci{"ci"};
    Func strip = edge.in(result);
    strip.compute_root()
        .align_bounds(i, tile_)
        .align_bounds(c, strip_block)
        .split(i, io_edge, ie, tile_, TailStrategy::RoundUp)
        .split(c, co, ci, strip_block, TailStrategy::RoundUp)
        .reorder(ie, ci, co, io_edge)
        .vectorize(ie, vec)
        .unroll(ie)
        .unroll(ci)
        .parallel(io_edge);
    edge.compute_at(strip, co).vectorize(i, vec).unroll(i).unroll(c);
    edge.update().reorder(i, c, k).vectorize(i, vec).unroll(i).unroll(c);
    result.update(1).allow_race_conditions().parallel(strip_cols.y, 32);
    if (!upper_only_)
      result.update(2).allow_race_conditions().vectorize(strip_rows.x, vec);
  }

  void schedule_gpu() {
    using namespace Halide;
    Var io{"io"}, jo{"jo"}, iin{"iin"}, ji{"ji"};
    RVar xo{"xo"}, yo{"yo"}, xi{"xi"}, yi{"yi"};
    if (!tiled_) {
      // One thread per entry of the small product, accumulating in a register.
      Func block = gram.in(result);
      block.compute_root().gpu_tile(j, i, jo, io, ji, iin, 16, 16, TailStrategy::GuardWithIf);
      gram.compute_at(block, ji);
      col_sum.compute_root().gpu_tile(j, jo, ji, 32, TailStrategy::GuardWithIf);
      col_sum.update().gpu_tile(j, jo, ji, 32, TailStrategy::GuardWithIf);
      result.update(0).allow_race_conditions().gpu_tile(all.x, all.y, xo, yo, xi, yi, 16, 16,
                                                        TailStrategy::GuardWithIf);
      result.update(1).allow_race_conditions().gpu_tile(ones_col.y, yo, yi, 64,
                                                        TailStrategy::GuardWithIf);
      result.update(2).allow_race_conditions().gpu_tile(ones_row.x, xo, xi, 64,
                                                        TailStrategy::GuardWithIf);
      return;
    }
    RVar u = tiles[0], v = tiles[1], p = tiles[3];
    RVar ko{"ko"}, ki{"ki"};
    // One block per tile pair, one thread per element; both sides are written by the same
    // threads in turn (the side loop stays serial inside the block).
    result.update(0).allow_race_conditions().gpu_blocks(p).gpu_threads(u, v);
    // The pair's product accumulates in shared memory, k in chunks of T rows whose two X
    // panels are staged in shared memory by the block's threads before use.
    gram.compute_at(result, p).store_in(MemoryType::GPUShared).gpu_threads(jj, ii);
    // The pair's result in shared memory too, so both sides read C's upper tile coalesced.
    pair_out.compute_at(result, p).store_in(MemoryType::GPUShared).gpu_threads(jj, ii);
    gram.update()
        .split(k, ko, ki, kCovarianceTile, TailStrategy::GuardWithIf)
        .reorder(ki, jj, ii, ko)
        .gpu_threads(jj, ii);
    for (Func panel : {row_panel, col_panel}) {
      panel.compute_at(gram, ko)
          .store_in(MemoryType::GPUShared)
          .gpu_threads(panel.args()[0], panel.args()[1]);
    }
    // At least one strip column: with X a whole number of tiles wide and no ones column the
    // strip is empty, and an empty device buffer is an allocation error (OpenCL's
    // CL_INVALID_BUFFER_SIZE under pocl at d = 32, 64, 256; docs/RESULTS.md#gpu-schedules). The
    // spare column reads X̄'s padding and is never stored.
    const Expr strip_width = d - dx / tile_ * tile_;
    edge.compute_root()
        .bound(c, 0, max(strip_width, 1))
        .gpu_tile(i, c, io, jo, iin, ji, 64, 4, TailStrategy::GuardWithIf);
    edge.update().gpu_tile(i, c, io, jo, iin, ji, 64, 4, TailStrategy::GuardWithIf);
    result.update(1).allow_race_conditions().gpu_tile(strip_cols.x, strip_cols.y, xo, yo, xi, yi, 4,
                                                      64, TailStrategy::GuardWithIf);
    if (!upper_only_) {
      result.update(2).allow_race_conditions().gpu_tile(strip_rows.x, strip_rows.y, xo, yo, xi, yi,
                                                        64, 4, TailStrategy::GuardWithIf);
    }
  }

private:
  // X̄ packed by column tiles (tiled form only); on the CPU it is computed once per call, so an
  // expensive X̄ (im2col) is evaluated once per element there.
  Halide::Func xpack{"xpack"};
  bool tiled_;
  bool upper_only_;
  int tile_;
  int block_width_;
  bool x_padded_;
  Halide::Func c_in_;
  Halide::Var i{"i"}, j{"j"}, c{"c"}, ii{"ii"}, jj{"jj"}, k_{"k_"}, q{"q"}, t{"t"};
  Halide::Func row_panel{"row_panel"}, col_panel{"col_panel"}, gram{"gram"}, edge{"edge"};
  Halide::Func pair_out{"pair_out"};
  Halide::Func col_sum{"col_sum"};
  // X narrower than block_width_, zero-padded to that width (untiled form, CPU, X a buffer).
  Halide::Func narrow{"narrow"};
  // The untiled CPU form's block products and their pairs (define_small).
  Halide::Func block_gram{"block_gram"};
  Halide::Var u_{"u"}, v_{"v"}, jb_{"jb"}, ib_{"ib"};
  Halide::RDom blocks;
  Halide::Expr d, dx, n, a, b;
  Halide::RDom k, tiles, strip_cols, strip_rows, all, ones_col, ones_row;

  // Inverts q = tj (tj + 1) / 2 + ti through a float square root, then corrects it by one either
  // way (exact for any realistic tile count). Clamped so bounds inference sees [0, nt).
  static std::pair<Halide::Expr, Halide::Expr> tile_pair(Halide::Expr q, Halide::Expr nt) {
    using namespace Halide;
    Expr t = cast<int>(floor((sqrt(8.0f * cast<float>(q) + 1.0f) - 1.0f) * 0.5f));
    t = select(t * (t + 1) / 2 > q, t - 1, (t + 1) * (t + 2) / 2 <= q, t + 1, t);
    Expr tj = clamp(t, 0, nt - 1);
    Expr ti = clamp(q - tj * (tj + 1) / 2, 0, tj);
    return {ti, tj};
  }

  void define_tiled(Halide::Func xbar) {
    using namespace Halide;
    const int T = tile_;
    const Expr nt = dx / T, c0 = nt * T;

    // Tile pairs: q -> (ti, tj), ti <= tj, with q = tj (tj + 1) / 2 + ti.
    auto [ti, tj] = tile_pair(q, nt);
    // X̄ by column tiles: xpack(ii, k, t) = X̄(t*T + ii, k), tile nt being the strip's columns
    // padded with ones. On the CPU it is packed once per call so that every tile pair and the
    // strip stream contiguous panels; on the GPU it stays inline.
    xpack(ii, k_, t) = xbar(t * T + ii, k_);
    row_panel(ii, k_, q) = xpack(ii, k_, ti);
    col_panel(jj, k_, q) = xpack(jj, k_, tj);
    gram(jj, ii, q) = 0.0f;
    gram(jj, ii, q) += row_panel(ii, k, q) * col_panel(jj, k, q);

    // The strip against every row of X̄, the ones row (its column sums) included. Summed by a
    // separate Func from packed X, the ones row differed in the last bits from its mirror, the
    // ones column's entries (the sums' code had changed, not their terms); one Func for both
    // keeps them equal.
    edge(i, c) = 0.0f;
    edge(i, c) += xpack(c, k, nt) * xpack(i % T, k, i / T);

    // side 0 writes a pair's upper tile, side 1 its lower tile (none with upper_only).
    tiles = RDom(0, T, 0, T, 0, upper_only_ ? 1 : 2, 0, nt * (nt + 1) / 2, "tiles");
    RVar u = tiles[0], v = tiles[1], side = tiles[2], p = tiles[3];
    auto [pi, pj] = tile_pair(p, nt);
    const Expr upper = side == 0;
    const Expr col = select(upper, pj, pi) * T + u;
    const Expr row = select(upper, pi, pj) * T + v;
    tiles.where(upper || pi < pj);
    // The pair's result, a * C + b * gram over its upper tile: the lower tile is that tile
    // transposed, so C's lower triangle is read only inside diagonal tiles and the strip (C is
    // symmetric on entry); those reads, a row of C apart, missed the caches
    // (docs/RESULTS.md#covariance-write-back).
    pair_out(jj, ii, q) = a * c_in_(tj * T + jj, ti * T + ii) + b * gram(jj, ii, q);
    result(col, row) = pair_out(select(upper, u, v), select(upper, v, u), p);

    strip_cols = RDom(0, d - c0, 0, d, "strip_cols");
    const Expr sx = strip_cols.x, sy = strip_cols.y;
    if (upper_only_)
      strip_cols.where(sy <= c0 + sx);
    result(c0 + sx, sy) = a * c_in_(c0 + sx, sy) + b * edge(sy, sx);
    if (upper_only_)
      return; // the strip's rows left of it are below the diagonal
    strip_rows = RDom(0, c0, 0, d - c0, "strip_rows");
    result(strip_rows.x, c0 + strip_rows.y) =
        a * c_in_(strip_rows.x, c0 + strip_rows.y) + b * edge(strip_rows.x, strip_rows.y);
  }

  // Fewer than T columns: XᵀX whole (its two triangles are the same sums of the same
  // products, bitwise; on the CPU one triangle of blocks, mirrored), the ones column's entries
  // from the column sums of X, and n in the corner.
  //
  // X (a buffer) narrower than block_width_ is read from a copy padded with zero columns to
  // that width, so that its product is one register block of whole vectors (the padding's
  // entries are never written): read in place, every accumulator became a predicated load and
  // store (docs/RESULTS.md#narrow-shapes). The copy's rows are none, and the indices into it one
  // point, unless X is narrow. Those selects must fold away in the blocks' code: where the
  // simplifier cannot prove X wide (the patch generator's dx, a product of three scalars), every
  // load becomes a gather, so the patch matrix, which needs no copy, says so (x_padded).
  void define_small(Halide::Func x) {
    using namespace Halide;
    std::function<Expr(const Expr &, const Expr &)> read = [x](const Expr &col, const Expr &row) {
      return x(col, row);
    };
    if (block_width_ > 0 && !x_padded_) {
      const Expr is_narrow = dx < block_width_;
      narrow(j, k_) = 0.0f;
      RDom r(0, min(dx, block_width_), 0, select(is_narrow, n, 0), "narrow_rows");
      narrow(r.x, r.y) = x(r.x, r.y);
      read = [this, x, is_narrow](const Expr &col, const Expr &row) {
        return select(is_narrow, narrow(select(is_narrow, col, 0), select(is_narrow, row, 0)),
                      x(select(is_narrow, 0, col), row));
      };
    }
    if (block_width_ > 0) {
      // CPU: XᵀX by square blocks one vector wide (V columns x V rows), only those on or above
      // the diagonal (block column >= block row); each is stored as is and, off the diagonal,
      // transposed into the block below it, so gram holds the whole symmetric product, the
      // mirrored entries bitwise equal (the same products summed in the same order). Blocks
      // shift inwards at X's edge; overlapping blocks store equal values. Half the products is
      // what keeps this variant ahead of the tiled one up to kCovarianceCpuTiledFrom columns
      // (docs/RESULTS.md#covariance-small-factors).
      const int V = block_width_;
      const Expr is_narrow = dx < V;
      auto start = [&](const Expr &blk) { return select(is_narrow, 0, min(blk * V, dx - V)); };
      block_gram(u_, v_, jb_, ib_) = 0.0f;
      block_gram(u_, v_, jb_, ib_) += read(start(jb_) + u_, k) * read(start(ib_) + v_, k);
      const Expr nb = select(is_narrow, 1, (dx + V - 1) / V);
      blocks = RDom(0, V, 0, V, 0, 2, 0, nb, 0, nb, "blocks");
      RVar u = blocks[0], v = blocks[1], side = blocks[2], jb = blocks[3], ib = blocks[4];
      // Halide restricts the block column's loop to jb >= ib rather than testing it.
      blocks.where(jb >= ib && (side == 0 || jb > ib));
      const Expr upper = side == 0;
      gram(j, i) = undef<float>();
      gram(select(upper, start(jb), start(ib)) + u, select(upper, start(ib), start(jb)) + v) =
          block_gram(select(upper, u, v), select(upper, v, u), jb, ib);
    } else {
      gram(j, i) = 0.0f;
      gram(j, i) += read(j, k) * read(i, k);
    }
    col_sum(j) = 0.0f;
    col_sum(j) += read(j, k);

    all = RDom(0, dx, 0, dx, "all");
    result(all.x, all.y) = a * c_in_(all.x, all.y) + b * gram(all.x, all.y);
    // The ones column (absent unless C is one wider than X), then the rest of the ones row.
    ones_col = RDom(0, d - dx, 0, d, "ones_col");
    const Expr last = dx + ones_col.x, r = ones_col.y;
    result(last, r) =
        a * c_in_(last, r) + b * select(r < dx, col_sum(min(r, dx - 1)), cast<float>(n));
    ones_row = RDom(0, dx, 0, d - dx, "ones_row");
    result(ones_row.x, dx + ones_row.y) =
        a * c_in_(ones_row.x, dx + ones_row.y) + b * col_sum(ones_row.x);
  }
};

} // namespace hkfac::gen
