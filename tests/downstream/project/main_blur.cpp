// Runs the Hkfac-scheduled blur and checks it against a plain loop.
#include <cmath>
#include <cstdio>

#include "HalideBuffer.h"
#include "downstream_blur.h"

int main() {
  const int w = 200, h = 90;
  Halide::Runtime::Buffer<float> in(w, h), out(w, h);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      in(x, y) = std::sin(0.3f * x) + 0.1f * y;
  if (downstream_blur(in, out) != 0)
    return 1;
  auto at = [&](int x, int y) {
    x = x < 0 ? 0 : (x >= w ? w - 1 : x);
    y = y < 0 ? 0 : (y >= h ? h - 1 : y);
    return in(x, y);
  };
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      float sum = 0;
      for (int dy = -1; dy <= 1; ++dy)
        sum += (at(x - 1, y + dy) + at(x, y + dy) + at(x + 1, y + dy)) / 3;
      if (std::fabs(sum / 3 - out(x, y)) > 1e-5f) {
        std::printf("mismatch at %d,%d: %f vs %f\n", x, y, out(x, y), sum / 3);
        return 1;
      }
    }
  std::printf("Hkfac-scheduled blur matches the plain loop on %dx%d\n", w, h);
  return 0;
}
