// Minimal repros of Halide 14 miscompiles found by hkfac's random pipelines (docs/data.md).
#include <gtest/gtest.h>

#include <algorithm>

#include "Halide.h"

namespace {

using namespace Halide;

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

} // namespace
