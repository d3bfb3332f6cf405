// Shared by the OpenCL schedule checks (scripts/opencl-check): random inputs and a verdict line.
#pragma once

#include <HalideBuffer.h>

#include "hkfac/buffer_values.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

// Halide's default error handler aborts; this one prints, and the kernel returns its error code, so
// a failing case is reported and the next one runs. (The runtime's handler is a weak symbol; one
// driver per program includes this header.)
extern "C" void halide_error(void *, const char *msg) { std::fprintf(stderr, "halide: %s\n", msg); }

namespace hkfac::opencl_check {

// Fills `b` with values in [-0.5, 0.5) and marks the host copy as the one to upload.
inline void fill_random(Halide::Runtime::Buffer<float> &b, std::mt19937 &rng) {
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  hkfac::for_each_value(b, [&](float &v) { v = u(rng); });
  b.set_host_dirty();
}

// A symmetric square C with values in [-0.5, 0.5), marked as the copy to upload: the covariance
// updates' precondition on C.
inline void fill_random_symmetric(Halide::Runtime::Buffer<float> &c, std::mt19937 &rng) {
  fill_random(c, rng);
  for (int i = 0; i < c.dim(0).extent(); i++)
    for (int j = 0; j < i; j++)
      c(i, j) = c(j, i);
}

// A covariance update's result C against 0.9·C0 + 0.1·X̄ᵀX̄ in double, X̄ given entrywise as
// xbar(row, column) over `rows` rows: the largest |want - got| / (1 + |want|), and in *symmetric
// whether C is exactly symmetric.
template <class XBar>
double covariance_update_error(const Halide::Runtime::Buffer<float> &c0,
                               const Halide::Runtime::Buffer<float> &c, int rows, XBar xbar,
                               bool *symmetric) {
  const int dc = c.dim(0).extent();
  double err = 0;
  *symmetric = true;
  for (int i = 0; i < dc; i++) {
    for (int j = 0; j < dc; j++) {
      double sum = 0;
      for (int r = 0; r < rows; r++)
        sum += xbar(r, i) * xbar(r, j);
      const double want = 0.9 * c0(i, j) + 0.1 * sum;
      err = std::max(err, std::fabs(want - c(i, j)) / (1 + std::fabs(want)));
      *symmetric &= c(i, j) == c(j, i);
    }
  }
  return err;
}

// (batch, d_in, d_out) of the dense kernel tests (tests/kernels/dense_test.cpp), plus a batch for
// the CPU's packed backward variant.
constexpr int kDenseShapes[][3] = {{1, 1, 1},     {7, 129, 1},   {129, 1, 7},    {1, 7, 129},
                                   {33, 1001, 7}, {7, 33, 1001}, {128, 250, 30}, {513, 257, 259}};

// Row-major dense matrices in double, just enough for the references.
using Mat = std::vector<double>;
inline Mat product(const Mat &x, const Mat &y, int rows, int inner, int cols) {
  Mat z(size_t(rows) * cols, 0.0);
  for (int r = 0; r < rows; r++)
    for (int q = 0; q < inner; q++)
      for (int c = 0; c < cols; c++)
        z[size_t(r) * cols + c] += x[size_t(r) * inner + q] * y[size_t(q) * cols + c];
  return z;
}
inline Mat transpose(const Mat &x, int rows, int cols) {
  Mat t(x.size());
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++)
      t[size_t(c) * rows + r] = x[size_t(r) * cols + c];
  return t;
}
// A Halide (cols, rows) buffer as a row-major matrix.
inline Mat rows_of(const Halide::Runtime::Buffer<float> &b) {
  const int cols = b.dim(0).extent(), rows = b.dim(1).extent();
  Mat m(size_t(rows) * cols);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++)
      m[size_t(r) * cols + c] = b(c, r);
  return m;
}
// The largest |want - got| / (1 + |want|) over a row-major `want` and a (cols, rows) `got`.
inline double max_relative_error(const Mat &want, const Halide::Runtime::Buffer<float> &got) {
  const Mat g = rows_of(got);
  double err = 0;
  for (size_t e = 0; e < want.size(); e++)
    err = std::max(err, std::fabs(want[e] - g[e]) / (1 + std::fabs(want[e])));
  return err;
}

// Prints one line per case; returns whether it passed.
inline bool verdict(bool ok, const char *what, int rc, double err) {
  std::printf("%s %s (halide rc %d, max relative error %.3g)\n", ok ? "ok  " : "FAIL", what, rc,
              err);
  return ok;
}

} // namespace hkfac::opencl_check
