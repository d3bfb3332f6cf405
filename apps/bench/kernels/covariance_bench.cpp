// Covariance (factor) update vs OpenBLAS ssyrk (the anchor) vs Eigen's rank update; also the
// kernel's upper-triangle form, which writes what ssyrk writes.
#include <cblas.h>

#include <Eigen/Core>
#include <memory>
#include <random>
#include <vector>

#include "cublas_anchor.h"
#include "harness.h"
#include "hkfac/kernels/covariance.h"

namespace {

using hkfac::Buffer;
using RowMajor = hkfac::RowMajorMatrix<float>;

struct Shape {
  int d; // factor size: X's columns plus the homogeneous column when there is one
  int n; // batch
  bool homogeneous;
};

hkfac::bench::Case make_case(Shape s) {
  hkfac::bench::Case c;
  c.group = "covariance";
  c.shape = "d=" + std::to_string(s.d) + " n=" + std::to_string(s.n) +
            (s.homogeneous ? " homog" : " plain");
  // Useful work of the symmetric product: n * d(d+1)/2 distinct entries, 2 flops each.
  c.flops = double(s.n) * s.d * (s.d + 1);
  c.make = [s] {
    const int d = s.d, n = s.n, dx = s.homogeneous ? d - 1 : d;
    const float a = 0.95f, b = 0.05f / n;
    std::mt19937 rng(d + n);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    auto x = std::make_shared<Buffer<float>>(hkfac::make_matrix<float>(n, dx));
    hkfac::for_each_value(*x, [&](float &v) { v = u(rng); });
    auto cov = std::make_shared<Buffer<float>>(hkfac::make_matrix<float>(d, d));
    auto cov_upper = std::make_shared<Buffer<float>>(hkfac::make_matrix<float>(d, d));
    // OpenBLAS and Eigen get X̄ materialised (they have no implicit ones column).
    auto xbar = std::make_shared<RowMajor>(RowMajor::Ones(n, d));
    xbar->leftCols(dx) = hkfac::as_eigen(*x);
    auto c_blas = std::make_shared<RowMajor>(RowMajor::Zero(d, d));
    auto c_eigen = std::make_shared<RowMajor>(RowMajor::Zero(d, d));
    std::vector<hkfac::bench::Contender> cs{
        {"halide",
         [=] {
           hkfac::kernels::covariance_update(*cov, *x, a, b, s.homogeneous, hkfac::bench::device());
         }},
        // ssyrk updates one triangle only (C <- b X̄ᵀX̄ + a C), the least any caller can ask for.
        {"openblas",
         [=] {
           cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, d, n, b, xbar->data(), d, a,
                       c_blas->data(), d);
         }},
        {"eigen",
         [=] {
           *c_eigen *= a;
           c_eigen->selfadjointView<Eigen::Upper>().rankUpdate(xbar->transpose(), b);
         }}};
    // C's rows padded to whole cache lines (64 bytes), for both the kernel and ssyrk: with
    // d = 1001 a row is 4,004 bytes, so most of C's vector stores straddle two lines.
    const int ld = (d + 15) / 16 * 16;
    if (ld != d && d >= 257) {
      auto storage = std::make_shared<Buffer<float>>(ld, d);
      storage->fill(0.0f);
      auto cov_padded = std::make_shared<Buffer<float>>(storage->cropped(0, 0, d));
      auto c_blas_padded = std::make_shared<std::vector<float>>(size_t(ld) * d, 0.0f);
      cs.push_back({"halide, C rows padded", [=] {
                      hkfac::kernels::covariance_update(*cov_padded, *x, a, b, s.homogeneous,
                                                        hkfac::bench::device());
                    }});
      cs.push_back({"openblas, C rows padded", [=] {
                      cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, d, n, b, xbar->data(), d,
                                  a, c_blas_padded->data(), ld);
                    }});
    }
    // The kernel writing ssyrk's triangle alone, as the K-FAC library's dense blocks call it:
    // the same output as the anchor's.
    cs.push_back({"halide, upper triangle", [=] {
                    hkfac::kernels::covariance_update_upper(*cov_upper, *x, a, b, s.homogeneous,
                                                            hkfac::bench::device());
                  }});
    if (hkfac::bench::cublas::enabled()) {
      namespace cublas = hkfac::bench::cublas;
      auto dx = std::make_shared<cublas::DeviceArray>(xbar->data(), size_t(n) * d);
      auto dc = std::make_shared<cublas::DeviceArray>(size_t(d) * d);
      cs.push_back({"cublas", [=] { cublas::ssyrk(d, n, b, dx->get(), a, dc->get()); },
                    cublas::synchronize});
    }
    return cs;
  };
  return c;
}

hkfac::bench::Register reg([](bool quick) {
  std::vector<Shape> shapes;
  if (quick) {
    shapes = {{257, 128, true}};
  } else {
    for (int d : {21, 257, 1001}) {
      for (int n : {128, 1000})
        shapes.push_back({d, n, true});
    }
    shapes.push_back({1001, 128, false});
    shapes.push_back({1001, 1000, false});
    // Small layers' factors: the cost model's head2 input factor (S = 39 features and the ones
    // column) over a typical batch of schedules x stages, and 65, where the CPU still takes the
    // untiled variant.
    shapes.push_back({40, 152, true});
    shapes.push_back({40, 1000, true});
    shapes.push_back({65, 1000, true});
    // Narrower than one vector (7 columns and the ones column): the padded block.
    shapes.push_back({8, 128, true});
    shapes.push_back({8, 1000, true});
  }
  std::vector<hkfac::bench::Case> out;
  for (const Shape &s : shapes)
    out.push_back(make_case(s));
  return out;
});

} // namespace
