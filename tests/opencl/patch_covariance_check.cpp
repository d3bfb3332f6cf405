// The patch-covariance generator's GPU schedule on OpenCL (scripts/opencl-check): C <- 0.9 C +
// 0.1 P̄ᵀP̄ with P the convolution patches of a batch of images (P̄ = [P, 1]), from a symmetric C,
// on the patch kernel tests' geometries, against patches built by direct loops in double; the
// result exactly symmetric. Usage: patch_covariance_check MIN_COLUMNS, linked with the generated
// `kernel` (the tiled variant serves patches of at least 32 columns, the untiled one narrower).
#include <cmath>
#include <cstdlib>
#include <string>

#include "check_util.h"
#include "kernel.h"

using Halide::Runtime::Buffer;

namespace {

struct Geometry {
  int h, w, c, kh, kw, sh, sw, ph, pw, batch;
};

// Row-major (batch · locations) x (kh · kw · c) patches, zero where the window leaves the image.
hkfac::opencl_check::Mat patches(const Geometry &g, const Buffer<float> &images, int &rows,
                                 int &cols) {
  const int out_h = (g.h + 2 * g.ph - g.kh) / g.sh + 1, out_w = (g.w + 2 * g.pw - g.kw) / g.sw + 1;
  rows = g.batch * out_h * out_w;
  cols = g.kh * g.kw * g.c;
  hkfac::opencl_check::Mat p(size_t(rows) * cols, 0.0);
  for (int e = 0; e < g.batch; e++)
    for (int oh = 0; oh < out_h; oh++)
      for (int ow = 0; ow < out_w; ow++)
        for (int i = 0; i < g.kh; i++)
          for (int j = 0; j < g.kw; j++)
            for (int ch = 0; ch < g.c; ch++) {
              const int y = oh * g.sh - g.ph + i, x = ow * g.sw - g.pw + j;
              if (y < 0 || y >= g.h || x < 0 || x >= g.w)
                continue;
              const int row = (e * out_h + oh) * out_w + ow, col = (i * g.kw + j) * g.c + ch;
              p[size_t(row) * cols + col] = images((y * g.w + x) * g.c + ch, e);
            }
  return p;
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 2)
    return 2;
  const int min_columns = std::atoi(argv[1]);
  // tests/kernels/patch_covariance_test.cpp's geometries (h, w, channels, kernel, stride, padding,
  // batch).
  const Geometry cases[] = {{5, 4, 1, 1, 1, 1, 1, 0, 0, 3},   {7, 7, 7, 1, 1, 2, 2, 0, 0, 7},
                            {8, 6, 3, 3, 3, 1, 1, 1, 1, 5},   {7, 7, 5, 3, 3, 1, 1, 1, 1, 4},
                            {9, 8, 16, 3, 2, 2, 3, 0, 0, 7},  {6, 5, 2, 5, 5, 2, 2, 2, 1, 3},
                            {5, 6, 4, 3, 4, 1, 2, 0, 2, 2},   {4, 3, 4, 6, 5, 1, 1, 1, 1, 7},
                            {4, 4, 111, 3, 3, 1, 1, 1, 1, 1}, {8, 8, 3, 3, 3, 1, 1, 1, 1, 41},
                            {6, 6, 8, 3, 3, 1, 1, 1, 1, 37}};
  std::mt19937 rng(4);
  bool all_ok = true;
  for (const Geometry &g : cases) {
    if (g.kh * g.kw * g.c < min_columns)
      continue;
    Buffer<float> images(g.h * g.w * g.c, g.batch);
    hkfac::opencl_check::fill_random(images, rng);
    int rows = 0, cols = 0;
    const hkfac::opencl_check::Mat p = patches(g, images, rows, cols);
    const int dc = cols + 1;
    Buffer<float> C(dc, dc), C0(dc, dc);
    hkfac::opencl_check::fill_random_symmetric(C, rng);
    hkfac::copy_values(C0, C);
    const int rc =
        kernel(C, images, 0.9f, 0.1f, g.h, g.w, g.c, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, C);
    C.copy_to_host();
    bool symmetric = true;
    const double err = hkfac::opencl_check::covariance_update_error(
        C0, C, rows, [&](int r, int i) { return i < cols ? p[size_t(r) * cols + i] : 1.0; },
        &symmetric);
    const std::string what = "patch_covariance " + std::to_string(g.h) + "x" + std::to_string(g.w) +
                             "x" + std::to_string(g.c) + " kernel " + std::to_string(g.kh) + "x" +
                             std::to_string(g.kw) + " stride " + std::to_string(g.sh) + "x" +
                             std::to_string(g.sw) + " pad " + std::to_string(g.ph) + "x" +
                             std::to_string(g.pw) + " batch " + std::to_string(g.batch) +
                             (symmetric ? "" : " NOT SYMMETRIC");
    all_ok &=
        hkfac::opencl_check::verdict(rc == 0 && err < 1e-4 && symmetric, what.c_str(), rc, err);
  }
  return all_ok ? 0 : 1;
}
