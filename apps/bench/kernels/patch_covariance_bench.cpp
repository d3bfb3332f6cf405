// Conv2D's input factor: the patch covariance kernel (images in) vs im2col + OpenBLAS ssyrk (the
// anchor: what a caller without the kernel does), plus two lower bounds that are handed the
// patches ready-made: ssyrk alone and the generated covariance kernel alone.
#include <cblas.h>

#include <Eigen/Core>
#include <memory>
#include <random>

#include "cublas_anchor.h"
#include "harness.h"
#include "hkfac/kernels/covariance.h"
#include "hkfac/kernels/patch_covariance.h"

namespace {

using hkfac::Buffer;
using hkfac::kernels::PatchGeometry;
using RowMajor = hkfac::RowMajorMatrix<float>;

struct Shape {
  int hw, channels, kernel, stride, pad, batch;
};

// The anchor's im2col into P̄ (its ones column written once, outside the timed call), rows in
// parallel as a tuned caller would: one contiguous run of `channels` floats per window pixel.
void im2col_into(RowMajor &pbar, const float *images, const PatchGeometry &g, int batch) {
  const int oh_n = g.out_h(), ow_n = g.out_w();
#pragma omp parallel for schedule(static)
  for (int r = 0; r < batch * oh_n * ow_n; r++) {
    const int e = r / (oh_n * ow_n), oh = r / ow_n % oh_n, ow = r % ow_n;
    float *row = pbar.data() + static_cast<size_t>(r) * pbar.cols();
    const float *img = images + static_cast<size_t>(e) * g.image_size();
    for (int kh = 0; kh < g.kernel_h; kh++) {
      const int ih = oh * g.stride_h - g.pad_h + kh;
      for (int kw = 0; kw < g.kernel_w; kw++) {
        const int iw = ow * g.stride_w - g.pad_w + kw;
        float *dst = row + (kh * g.kernel_w + kw) * g.channels;
        if (ih < 0 || ih >= g.height || iw < 0 || iw >= g.width) {
          std::fill(dst, dst + g.channels, 0.0f);
        } else {
          const float *src = img + (ih * g.width + iw) * g.channels;
          std::copy(src, src + g.channels, dst);
        }
      }
    }
  }
}

hkfac::bench::Case make_case(Shape s) {
  PatchGeometry g;
  g.height = g.width = s.hw;
  g.channels = s.channels;
  g.kernel_h = g.kernel_w = s.kernel;
  g.stride_h = g.stride_w = s.stride;
  g.pad_h = g.pad_w = s.pad;
  const int n = s.batch * g.locations(), d = g.patch_size() + 1;
  hkfac::bench::Case c;
  c.group = "patch_covariance";
  c.shape = std::to_string(s.hw) + "x" + std::to_string(s.hw) + "x" + std::to_string(s.channels) +
            " k" + std::to_string(s.kernel) + " s" + std::to_string(s.stride) +
            " B=" + std::to_string(s.batch) + " (d=" + std::to_string(d) +
            " n=" + std::to_string(n) + ")";
  c.flops = double(n) * d * (d + 1); // the symmetric product's distinct entries, 2 flops each
  c.make = [s, g, n, d] {
    const float a = 0.95f, b = 0.05f / s.batch;
    std::mt19937 rng(d + n);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    auto images =
        std::make_shared<Buffer<float>>(hkfac::make_matrix<float>(s.batch, g.image_size()));
    hkfac::for_each_value(*images, [&](float &v) { v = u(rng); });
    auto cov = std::make_shared<Buffer<float>>(hkfac::make_matrix<float>(d, d));
    auto cov_given = std::make_shared<Buffer<float>>(hkfac::make_matrix<float>(d, d));
    // P̄ for the anchor, rewritten by every anchor call; P (no ones column) for the generated
    // covariance kernel, which appends the ones column itself. Both formed once here for the
    // lower bounds.
    auto pbar = std::make_shared<RowMajor>(RowMajor::Ones(n, d));
    im2col_into(*pbar, images->data(), g, s.batch);
    auto p = std::make_shared<Buffer<float>>(hkfac::make_matrix<float>(n, d - 1));
    hkfac::as_eigen(*p) = pbar->leftCols(d - 1);
    auto c_blas = std::make_shared<RowMajor>(RowMajor::Zero(d, d));
    auto c_given = std::make_shared<RowMajor>(RowMajor::Zero(d, d));
    std::vector<hkfac::bench::Contender> cs{
        {"halide",
         [=] {
           hkfac::kernels::patch_covariance_update(*cov, *images, g, a, b, true,
                                                   hkfac::bench::device());
         }},
        {"im2col+openblas",
         [=] {
           im2col_into(*pbar, images->data(), g, s.batch);
           cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, d, n, b, pbar->data(), d, a,
                       c_blas->data(), d);
         }},
        {"openblas, patches given",
         [=] {
           cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, d, n, b, pbar->data(), d, a,
                       c_given->data(), d);
         }},
        {"halide cov, patches given", [=] {
           hkfac::kernels::covariance_update(*cov_given, *p, a, b, true, hkfac::bench::device());
         }}};
    if (hkfac::bench::cublas::enabled()) {
      // On the GPU the anchor is ssyrk on device-resident patches: a lower bound (no im2col).
      namespace cublas = hkfac::bench::cublas;
      auto dp = std::make_shared<cublas::DeviceArray>(pbar->data(), size_t(n) * d);
      auto dc = std::make_shared<cublas::DeviceArray>(size_t(d) * d);
      cs.push_back({"cublas", [=] { cublas::ssyrk(d, n, b, dp->get(), a, dc->get()); },
                    cublas::synchronize});
    }
    return cs;
  };
  return c;
}

hkfac::bench::Register reg([](bool quick) {
  // A CIFAR-sized network's convolutions at batch 128: the first layer (27 + 1 wide, the untiled
  // form), two 3x3 layers further in, a strided one, and a 5x5 one on Fashion-MNIST.
  const std::vector<Shape> shapes = quick ? std::vector<Shape>{{16, 32, 3, 1, 1, 32}}
                                          : std::vector<Shape>{{32, 3, 3, 1, 1, 128},
                                                               {16, 32, 3, 1, 1, 128},
                                                               {8, 64, 3, 1, 1, 128},
                                                               {16, 32, 3, 2, 1, 128},
                                                               {28, 1, 5, 1, 2, 128}};
  std::vector<hkfac::bench::Case> out;
  for (const Shape &s : shapes)
    out.push_back(make_case(s));
  return out;
});

} // namespace
