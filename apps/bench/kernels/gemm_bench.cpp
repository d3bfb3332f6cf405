// gemm vs OpenBLAS cblas_sgemm vs Eigen on K-FAC shapes (dense layer products, square 1000).
#include <cblas.h>

#include <Eigen/Core>
#include <memory>

#include "cublas_anchor.h"
#include "harness.h"
#include "hkfac/kernels/gemm.h"

namespace {

using hkfac::Buffer;
using hkfac::kernels::Transpose;
using Mat = hkfac::RowMajorMatrix<float>;

struct Shape {
  int m, n, depth;
  Transpose ta, tb;
  const char *what;
};

hkfac::bench::Case make_case(const Shape &s) {
  hkfac::bench::Case c;
  c.group = "gemm";
  c.shape = std::string(s.ta == Transpose::yes ? "T" : "N") + (s.tb == Transpose::yes ? "T" : "N") +
            " " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.depth) +
            " (" + s.what + ")";
  c.flops = 2.0 * s.m * s.n * s.depth;
  c.make = [s] {
    const bool at = s.ta == Transpose::yes, bt = s.tb == Transpose::yes;
    // Stored shapes: op(A) is m x depth, op(B) depth x n.
    auto A = std::make_shared<Mat>(Mat::Random(at ? s.depth : s.m, at ? s.m : s.depth));
    auto B = std::make_shared<Mat>(Mat::Random(bt ? s.n : s.depth, bt ? s.depth : s.n));
    auto C = std::make_shared<Mat>(Mat::Zero(s.m, s.n));
    auto Ab = std::make_shared<Buffer<float>>(hkfac::wrap<float>(*A));
    auto Bb = std::make_shared<Buffer<float>>(hkfac::wrap<float>(*B));
    auto Cb = std::make_shared<Buffer<float>>(hkfac::wrap<float>(*C));
    std::vector<hkfac::bench::Contender> cs{
        // Holds the matrices too: --quick keeps only this contender, and the buffers merely
        // view the matrices' storage.
        {"halide",
         [A, B, C, Ab, Bb, Cb, s] {
           hkfac::kernels::gemm(*Cb, *Ab, s.ta, *Bb, s.tb, 1.0f, 0.0f, hkfac::bench::device());
         }},
        {"openblas",
         [=] {
           cblas_sgemm(CblasRowMajor, at ? CblasTrans : CblasNoTrans,
                       bt ? CblasTrans : CblasNoTrans, s.m, s.n, s.depth, 1.0f, A->data(),
                       static_cast<int>(A->cols()), B->data(), static_cast<int>(B->cols()), 0.0f,
                       C->data(), s.n);
         }},
        {"eigen", [=] {
           if (at && bt) {
             C->noalias() = A->transpose() * B->transpose();
           } else if (at) {
             C->noalias() = A->transpose() * *B;
           } else if (bt) {
             C->noalias() = *A * B->transpose();
           } else {
             C->noalias() = *A * *B;
           }
         }}};
    if (hkfac::bench::cublas::enabled()) {
      namespace cublas = hkfac::bench::cublas;
      auto dA = std::make_shared<cublas::DeviceArray>(A->data(), size_t(A->size()));
      auto dB = std::make_shared<cublas::DeviceArray>(B->data(), size_t(B->size()));
      auto dC = std::make_shared<cublas::DeviceArray>(size_t(C->size()));
      const int lda = static_cast<int>(A->cols()), ldb = static_cast<int>(B->cols());
      cs.push_back({"cublas",
                    [=] {
                      cublas::sgemm(at, bt, s.m, s.n, s.depth, 1.0f, dA->get(), lda, dB->get(), ldb,
                                    0.0f, dC->get(), s.n);
                    },
                    cublas::synchronize});
    }
    return cs;
  };
  return c;
}

hkfac::bench::Register reg([](bool quick) {
  std::vector<hkfac::bench::Case> out;
  if (quick) {
    out.push_back(make_case({256, 256, 256, Transpose::no, Transpose::no, "square"}));
    return out;
  }
  const Shape shapes[] = {
      {1000, 1000, 1000, Transpose::no, Transpose::no, "square"},
      {128, 1000, 785, Transpose::no, Transpose::no, "dense fwd, batch 128"},
      {1000, 785, 1000, Transpose::no, Transpose::yes, "dX = dZ W^T"},
      {785, 1000, 1000, Transpose::yes, Transpose::no, "dW = X^T dZ"},
      {1001, 1001, 128, Transpose::yes, Transpose::no, "A factor X^T X, batch 128"},
  };
  for (const Shape &s : shapes)
    out.push_back(make_case(s));
  return out;
});

} // namespace
