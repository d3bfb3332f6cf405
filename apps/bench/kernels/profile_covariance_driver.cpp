// Driver for profile_covariance.sh: the covariance update at d x d from n rows, repeated in place.
#include "HalideBuffer.h"
#include "cov.h"
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
int main(int argc, char **argv) {
  const int d = argc > 1 ? atoi(argv[1]) : 1001, n = argc > 2 ? atoi(argv[2]) : 128;
  const int reps = argc > 3 ? atoi(argv[3]) : 300;
  if (d < 32 || n < 1 || reps < 1) {
    std::fprintf(stderr, "usage: driver D N REPS with D >= 32 (the tiled variant), N >= 1\n");
    return 1;
  }
  Halide::Runtime::Buffer<float> c(d, d), x(d, n);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int i = 0; i < d; i++)
    for (int j = 0; j < d; j++)
      c(j, i) = (i == j);
  for (int k = 0; k < n; k++)
    for (int j = 0; j < d; j++)
      x(j, k) = u(rng);
  if (int rc = cov(c, x, 0.95f, 0.05f, c); rc != 0) {
    std::fprintf(stderr, "profile_covariance: the kernel failed with Halide error %d\n", rc);
    return 1;
  }
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; r++)
    cov(c, x, 0.95f, 0.05f, c);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
  std::printf("d=%d n=%d: %.4f ms, %.1f GFLOP/s\n", d, n, s * 1e3,
              double(n) * d * (d + 1) / s / 1e9);
}
