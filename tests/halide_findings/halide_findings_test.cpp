// Minimal repros of Halide 14 miscompiles found by hkfac's random pipelines and schedules (docs/data.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csignal>

#include "Halide.h"

namespace {

using namespace Halide;

// The AVX2 target the plugin's schedules are made for (JIT: the host must have AVX2).
const Target kAvx2("x86-64-linux-avx-avx2-f16c-fma-sse41");

// A 3 x 7 erosion of a squared image, per channel. `sliding` schedules the erosion's update with
// y split (GuardWithIf) outside the channel loop and the square computed at the window's row
// loop but stored at the channel loop: the shape of Adams2019's schedule for random seed 6.
Buffer<uint16_t> erode(const Buffer<uint8_t> &in, bool sliding) {
  Var x("x"), y("y"), c("c"), yo("yo"), yi("yi");
  Func edge = BoundaryConditions::repeat_edge(in);
  Func sq("sq");
  sq(x, y, c) = cast<uint16_t>(edge(x, y, c)) * cast<uint16_t>(edge(x, y, c));
  RDom r(-1, 3, -3, 7, "r");
  Func eroded("eroded");
  eroded(x, y, c) = cast<uint16_t>(65535);
  eroded(x, y, c) = min(eroded(x, y, c), sq(x + r.x, y + r.y, c));
  if (sliding) {
    eroded.update().split(y, yo, yi, 48, TailStrategy::GuardWithIf).reorder(r.x, x, r.y, yi, c, yo);
    sq.compute_at(eroded, r.y).store_at(eroded, c);
  } else {
    sq.compute_root();
  }
  return eroded.realize({in.width(), in.height(), in.channels()});
}

// Halide 14's sliding-window pass slides `sq` along its channel dimension, which does not move
// with the window's row loop, instead of along y: it produces the one row needed at r.y = -3 and
// nothing for the other six, which then read rows never computed (uninitialised storage).
// Adams2019 emits this schedule for random seed 6 (tests/random_pipeline: its known bug).
TEST(HalideFindings, SlidingWindowAtAnInnerRVarSlidesAlongTheWrongDimension) {
  Buffer<uint8_t> in(128, 96, 3);
  uint32_t state = 12345;
  // A plain loop over the dense buffer (for_each_value forms an out-of-range pointer there:
  // hkfac/buffer_values.h).
  for (int i = 0; i < static_cast<int>(in.number_of_elements()); ++i) {
    state = state * 1664525u + 1013904223u;
    in.data()[i] = static_cast<uint8_t>(state >> 24);
  }
  const Buffer<uint16_t> root = erode(in, false);
  const Buffer<uint16_t> slid = erode(in, true);
  // The reference: the erosion by brute force, which the root schedule must match exactly.
  int root_wrong = 0, slid_wrong = 0;
  root.for_each_element([&](int x, int y, int c) {
    int m = 65535;
    for (int dy = -3; dy <= 3; dy++) {
      for (int dx = -1; dx <= 1; dx++) {
        const int v = in(std::clamp(x + dx, 0, 127), std::clamp(y + dy, 0, 95), c);
        m = std::min(m, v * v);
      }
    }
    root_wrong += root(x, y, c) != m;
    slid_wrong += slid(x, y, c) != m;
  });
  EXPECT_EQ(root_wrong, 0);
  EXPECT_GT(slid_wrong, static_cast<int>(root.number_of_elements() / 2))
      << "Halide no longer miscompiles this schedule: remove this finding, its entry in "
         "docs/data.md and the seed-6 Adams2019 known bug in tests/random_pipeline";
}

// A 1 x 1 convolution (16 inputs to `channels` outputs per pixel) computed per output tile of
// 24 channels x `columns` columns (ShiftInwards, so a constant region) and register-blocked in
// its update: 4 rows x 2 vectors of 8 channels side by side, both unrolled, GuardWithIf.
Buffer<float> mix_in_tiles(const Buffer<float> &in, int channels, int columns, bool blocked) {
  Var c("c"), x("x"), y("y"), co("co"), ci("ci"), xo("xo"), xi("xi"), cw("cw"), cu("cu"),
      cv("cv");
  RDom r(0, 16, "r");
  Func weight("weight"), mix("mix"), out("out");
  weight(c, x) = sin(0.3f * cast<float>(c) + 0.7f * cast<float>(x));
  mix(c, x, y) = 0.0f;
  mix(c, x, y) += weight(c, r) * in(r, x, y);
  out(c, x, y) = mix(c, x, y);
  weight.compute_root();
  out.split(c, co, ci, 24, TailStrategy::ShiftInwards)
      .split(x, xo, xi, columns, TailStrategy::ShiftInwards)
      .reorder(ci, xi, co, xo, y);
  mix.compute_at(out, co);
  if (blocked)
    mix.update()
        .split(c, c, cw, 16, TailStrategy::GuardWithIf)
        .split(cw, cu, cv, 8, TailStrategy::GuardWithIf)
        .split(x, xo, xi, 4, TailStrategy::GuardWithIf)
        .reorder(cv, cu, xi, r, c, xo, y)
        .vectorize(cv)
        .unroll(cu)
        .unroll(xi);
  return out.realize({channels, in.dim(1).extent(), in.dim(2).extent()}, kAvx2);
}

// Halide 14 miscompiles that register tile where the tile's region leaves a tail along both
// blocked dimensions (24 channels in blocks of 16, 67 columns in blocks of 4): some points are
// accumulated twice. With 68 columns (no tail along x) it is right. The Hkfac plugin therefore
// emits such a tile only where it divides the rows or the columns (update_nest.cpp).
TEST(HalideFindings, RegisterTileWithTailsAlongBothDimensionsOfAConstantRegion) {
  for (int columns : {67, 68}) {
    Buffer<float> in(16, 2 * columns, 3);
    in.for_each_element(
        [&](int k, int x, int y) { in(k, x, y) = std::cos(0.2f * x + 0.1f * y + k); });
    int wrong[2] = {0, 0};
    for (bool blocked : {false, true}) {
      const Buffer<float> out = mix_in_tiles(in, 48, columns, blocked);
      // The reference: the sums by brute force.
      out.for_each_element([&](int c, int x, int y) {
        float want = 0;
        for (int k = 0; k < 16; ++k)
          want += std::sin(0.3f * c + 0.7f * k) * in(k, x, y);
        wrong[blocked] += std::fabs(out(c, x, y) - want) > 1e-4f;
      });
    }
    EXPECT_EQ(wrong[0], 0) << columns << " columns, unblocked";
    if (columns == 68)
      EXPECT_EQ(wrong[1], 0) << "68 columns, blocked";
    else
      EXPECT_GT(wrong[1], 0) << "Halide no longer miscompiles this register tile: remove this "
                                "finding and the guard in blocks_columns (update_nest.cpp)";
  }
}

// A downsample: g(x) = f(2x) + f(2x + tap), f computed per tile of g (`tile` points, ShiftInwards,
// so a constant region), both vectorized by 16 lanes of uint8, g's tail as `vector_tail` says.
// Returns how many points differ from the sums by brute force.
int downsample_in_tiles_wrong(int tile, int tap,
                              TailStrategy vector_tail = TailStrategy::ShiftInwards) {
  Buffer<uint8_t> in(4096);
  in.for_each_element([&](int x) { in(x) = static_cast<uint8_t>(x * 7); });
  Var x("x"), xo("xo"), xi("xi");
  Func f("f"), g("g");
  f(x) = in(x) + 1;
  g(x) = f(2 * x) + f(2 * x + tap);
  g.split(x, xo, xi, tile, TailStrategy::ShiftInwards)
      .vectorize(xi, 16, vector_tail);
  f.compute_at(g, xo).vectorize(x, 16);
  const Buffer<uint8_t> out = g.realize({1024}, kAvx2);
  int wrong = 0;
  out.for_each_element([&](int i) {
    wrong += out(i) != static_cast<uint8_t>(in(2 * i) + 1 + in(2 * i + tap) + 1);
  });
  return wrong;
}

// With a tile of 520 (not a multiple of 16), the last vector of each tile is shifted in to a
// constant index, and g reads f[ramp(1011, 2, 16)]. Halide 14 loads that as the dense vector from
// 1010 and claims it 32-byte aligned (CodeGen_LLVM's strided load: the remainder of an exactly
// known index, modulo 0, becomes 0), so the aligned load faults at an address 2 bytes off the
// allocation's alignment. An odd tap of 1 (shifted base 1008) or a tile of 512 (no shifted
// vector) is right, and so is a guarded tail (GuardWithIf: the predicated strided loads are
// scalarized). The Hkfac plugin keeps constant splits (fixed_dims.cpp) off outputs whose tiles
// hold such a read and guards the vectors of every Func that reads at a stride
// (FuncModel::strided_lanes); random seeds 1437 and 1811 crashed this way.
TEST(HalideFindings, StridedLoadAtAConstantOddIndexIsLoadedAligned) {
  EXPECT_EQ(downsample_in_tiles_wrong(520, 1), 0);
  EXPECT_EQ(downsample_in_tiles_wrong(512, 3), 0);
  EXPECT_EQ(downsample_in_tiles_wrong(520, 3, TailStrategy::GuardWithIf), 0);
  EXPECT_EXIT(downsample_in_tiles_wrong(520, 3), testing::KilledBySignal(SIGSEGV), "")
      << "Halide no longer loads this aligned: remove this finding, strided_reads_inside "
         "(fixed_dims.cpp) and FuncModel::strided_lanes (loop_nest_model.h)";
}

// A three-point sum per tile of `tile` outputs (ShiftInwards, so acc's region is the constant
// tile + 1 columns), its update in blocks of 2 vectors of 16 lanes side by side, GuardWithIf,
// the two vectors unrolled or not. Returns how many points differ from the plain schedule's.
int vectors_side_by_side_wrong(int tile, bool unrolled) {
  const int w = 1024, h = 4;
  Buffer<uint8_t> in(w + 4, h);
  in.for_each_element([&](int x, int y) { in(x, y) = static_cast<uint8_t>(x * 7 + y * 3); });
  Var x("x"), y("y"), xo("xo"), xi("xi"), xv("xv"), xw("xw"), xu("xu");
  RDom r(0, 3, "r");
  Func acc("acc"), out("out");
  acc(x, y) = cast<uint16_t>(0);
  acc(x, y) += cast<uint16_t>(in(x + r, y) / 2);
  out(x, y) = cast<uint8_t>((acc(x, y) + acc(x + 1, y)) / 6);
  const Buffer<uint8_t> want = out.realize({w, h}, kAvx2);
  out.split(x, xo, xi, tile, TailStrategy::ShiftInwards)
      .vectorize(xi, 32, TailStrategy::ShiftInwards);
  acc.compute_at(out, xo).vectorize(x, 16);
  acc.update()
      .split(x, x, xw, 32, TailStrategy::GuardWithIf)
      .split(xw, xu, xv, 16, TailStrategy::GuardWithIf)
      .reorder(xv, xu, r, x, y)
      .vectorize(xv);
  if (unrolled)
    acc.update().unroll(xu);
  const Buffer<uint8_t> got = out.realize({w, h}, kAvx2);
  int wrong = 0;
  want.for_each_element([&](int i, int j) { wrong += got(i, j) != want(i, j); });
  return wrong;
}

// Halide 14 miscompiles the unrolled pair where acc's constant region (65 columns) leaves a tail
// of the 32-column block: nearly every point is wrong, not only the tail's. Not unrolled, or over
// 64 columns (a tile of 63), it is right, and so it is at run-time extents (acc at root). The
// Hkfac plugin blocks vectors side by side only where they divide the columns (update_nest.cpp).
TEST(HalideFindings, UnrolledVectorsSideBySideOverAConstantRegionWithATail) {
  EXPECT_EQ(vectors_side_by_side_wrong(64, false), 0);
  EXPECT_EQ(vectors_side_by_side_wrong(63, true), 0);
  EXPECT_GT(vectors_side_by_side_wrong(64, true), 1024 * 4 / 2)
      << "Halide no longer miscompiles these vectors: remove this finding and let blocks_columns "
         "(update_nest.cpp) leave tails again";
}

} // namespace
