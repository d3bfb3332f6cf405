// Bilateral guided upsampling (Chen et al. 2016): fit local affine colour models on a
// low-resolution input/output pair in a bilateral grid, then apply them to the full-resolution
// input.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

#include <algorithm>
#include <vector>

namespace {

using namespace Halide;

class Bgu : public Generator<Bgu> {
public:
  GeneratorParam<int> cell{"cell", 8};      // grid cell size in low-resolution pixels
  GeneratorParam<int> bins{"bins", 8};      // intensity bins of the grid
  GeneratorParam<int> factor{"factor", 8};  // high / low resolution, for the estimates
  GeneratorParam<int> width{"width", 1536}; // high-resolution size, for the estimates
  GeneratorParam<int> height{"height", 2560};

  Input<Buffer<float>> low_in{"low_in", 3};   // low-resolution input, RGB in [0, 1]
  Input<Buffer<float>> low_out{"low_out", 3}; // the operator's output on low_in
  Input<Buffer<float>> high_in{"high_in", 3}; // full-resolution input
  Input<float> lambda{"lambda", 1e-2f};       // pulls poorly constrained cells towards identity
  Output<Buffer<float>> output{"output", 3};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("bgu", cell, 1, 64);
    require_in_range("bgu", bins, 1, 64);
    require_in_range("bgu", width, 1, kMaxExtent);
    require_in_range("bgu", height, 1, kMaxExtent);
    // The low-resolution estimates are width / factor by height / factor: at least one pixel.
    require_in_range("bgu", factor, 1, std::min(int(width), int(height)));

    const int s = cell;
    const int nz = bins;
    Func in_c = BoundaryConditions::repeat_edge(low_in);
    Func out_c = BoundaryConditions::repeat_edge(low_out);

    // Moments of the least-squares fit low_out ≈ M · [low_in; 1] per cell: u uᵀ (4×4) and u vᵀ
    // (4×3) side by side as j = 0..6, each pixel weighted by a tent in intensity around bin z.
    RDom r(0, s, 0, s);
    Expr px = x * s + r.x - s / 2, py = y * s + r.y - s / 2;
    Expr ir = in_c(px, py, 0), ig = in_c(px, py, 1), ib = in_c(px, py, 2);
    Expr w = max(0.0f, 1.0f - abs(luma(ir, ig, ib) * nz - z));
    Expr u_i = mux(i, {ir, ig, ib, 1.0f});
    Expr u_or_v_j =
        mux(j, {ir, ig, ib, 1.0f, out_c(px, py, 0), out_c(px, py, 1), out_c(px, py, 2)});
    moments(x, y, z, i, j) = 0.0f;
    moments(x, y, z, i, j) += w * u_i * u_or_v_j;

    // Smooth the fits across neighbouring cells with [1 2 1] along z, x and y.
    blur_z(x, y, z, i, j) =
        moments(x, y, z - 1, i, j) + 2 * moments(x, y, z, i, j) + moments(x, y, z + 1, i, j);
    blur_x(x, y, z, i, j) =
        blur_z(x - 1, y, z, i, j) + 2 * blur_z(x, y, z, i, j) + blur_z(x + 1, y, z, i, j);
    blur_y(x, y, z, i, j) =
        blur_x(x, y - 1, z, i, j) + 2 * blur_x(x, y, z, i, j) + blur_x(x, y + 1, z, i, j);

    // Solve (A + λI) M = B + λ[I; 0] by Cholesky: A = Σ u uᵀ, B = Σ u vᵀ.
    std::vector<std::vector<Expr>> a(4, std::vector<Expr>(4)), b(4, std::vector<Expr>(3));
    for (int p = 0; p < 4; p++) {
      for (int q = 0; q < 4; q++) {
        a[p][q] = blur_y(x, y, z, p, q) + (p == q ? lambda : Expr(0.0f));
      }
      for (int k = 0; k < 3; k++) {
        b[p][k] = blur_y(x, y, z, p, 4 + k) + (p == k ? lambda : Expr(0.0f));
      }
    }
    std::vector<Expr> coefficients = solve_cholesky(a, b);
    model(x, y, z, k, i) = mux(k * 4 + i, coefficients);

    // Slice: trilinear interpolation of the models at each full-resolution pixel, then apply.
    Expr hr = high_in(x, y, 0), hg = high_in(x, y, 1), hb = high_in(x, y, 2);
    Expr gx = ((x + 0.5f) * low_in.width() / high_in.width() - 0.5f) / s;
    Expr gy = ((y + 0.5f) * low_in.height() / high_in.height() - 0.5f) / s;
    Expr gz = clamp(luma(hr, hg, hb), 0.0f, 1.0f) * nz;
    Expr xi = clamp(cast<int>(floor(gx)), -1, low_in.width() / s + 1);
    Expr yi = clamp(cast<int>(floor(gy)), -1, low_in.height() / s + 1);
    Expr zi = clamp(cast<int>(floor(gz)), 0, nz - 1);
    Expr xf = clamp(gx - xi, 0.0f, 1.0f), yf = clamp(gy - yi, 0.0f, 1.0f), zf = gz - zi;
    auto m = [&](Expr dx, Expr dy, Expr dz) { return model(xi + dx, yi + dy, zi + dz, k, i); };
    affine(x, y, k, i) =
        lerp(lerp(lerp(m(0, 0, 0), m(1, 0, 0), xf), lerp(m(0, 1, 0), m(1, 1, 0), xf), yf),
             lerp(lerp(m(0, 0, 1), m(1, 0, 1), xf), lerp(m(0, 1, 1), m(1, 1, 1), xf), yf), zf);
    output(x, y, k) = affine(x, y, k, 0) * hr + affine(x, y, k, 1) * hg + affine(x, y, k, 2) * hb +
                      affine(x, y, k, 3);

    const int lw = int(width) / int(factor), lh = int(height) / int(factor);
    low_in.set_estimates({{0, lw}, {0, lh}, {0, 3}});
    low_out.set_estimates({{0, lw}, {0, lh}, {0, 3}});
    high_in.set_estimates({{0, width}, {0, height}, {0, 3}});
    lambda.set_estimate(1e-2f);
    output.set_estimates({{0, width}, {0, height}, {0, 3}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"}, z{"z"}, i{"i"}, j{"j"}, k{"k"};
  Func moments{"moments"}, blur_z{"blur_z"}, blur_x{"blur_x"}, blur_y{"blur_y"};
  Func model{"model"}, affine{"affine"};

  static Expr luma(Expr r, Expr g, Expr b) { return 0.25f * r + 0.5f * g + 0.25f * b; }

  // Solves A M = B for symmetric positive definite 4×4 A and 4×3 B; returns M transposed, row-major
  // (coefficient i of output channel k at k * 4 + i).
  static std::vector<Expr> solve_cholesky(const std::vector<std::vector<Expr>> &a,
                                          const std::vector<std::vector<Expr>> &b) {
    const int n = 4;
    std::vector<std::vector<Expr>> l(n, std::vector<Expr>(n, Expr(0.0f)));
    for (int q = 0; q < n; q++) {
      Expr diag = a[q][q];
      for (int t = 0; t < q; t++) {
        diag -= l[q][t] * l[q][t];
      }
      l[q][q] = sqrt(diag);
      for (int p = q + 1; p < n; p++) {
        Expr off = a[p][q];
        for (int t = 0; t < q; t++) {
          off -= l[p][t] * l[q][t];
        }
        l[p][q] = off / l[q][q];
      }
    }
    std::vector<Expr> result(3 * n);
    for (int k = 0; k < 3; k++) {
      std::vector<Expr> forward(n), back(n);
      for (int p = 0; p < n; p++) {
        Expr v = b[p][k];
        for (int t = 0; t < p; t++) {
          v -= l[p][t] * forward[t];
        }
        forward[p] = v / l[p][p];
      }
      for (int p = n - 1; p >= 0; p--) {
        Expr v = forward[p];
        for (int t = p + 1; t < n; t++) {
          v -= l[t][p] * back[t];
        }
        back[p] = v / l[p][p];
      }
      for (int p = 0; p < n; p++) {
        result[k * n + p] = back[p];
      }
    }
    return result;
  }
};

} // namespace

HALIDE_REGISTER_GENERATOR(Bgu, bgu)
