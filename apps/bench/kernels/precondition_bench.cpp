// Kronecker precondition A⁻¹ V G⁻¹ (and the eigen route) vs two/four OpenBLAS sgemm calls vs Eigen.
#include <cblas.h>

#include <Eigen/Core>
#include <memory>

#include "cublas_anchor.h"
#include "harness.h"
#include "hkfac/kernels/precondition.h"

namespace {

using hkfac::Buffer;
using Mat = hkfac::RowMajorMatrix<float>;

// C = op(A) op(B), row-major, through OpenBLAS.
void sgemm(Mat &C, const Mat &A, bool ta, const Mat &B, bool tb) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(C.rows()), static_cast<int>(C.cols()),
              static_cast<int>(ta ? A.rows() : A.cols()), 1.0f, A.data(),
              static_cast<int>(A.cols()), B.data(), static_cast<int>(B.cols()), 0.0f, C.data(),
              static_cast<int>(C.cols()));
}

// A row-major matrix on the device, for the cuBLAS anchor.
struct DevMat {
  std::shared_ptr<hkfac::bench::cublas::DeviceArray> data;
  int rows, cols;
};

DevMat upload(const Mat &m) {
  return {std::make_shared<hkfac::bench::cublas::DeviceArray>(m.data(), size_t(m.size())),
          static_cast<int>(m.rows()), static_cast<int>(m.cols())};
}

// C = op(A) op(B) on the device through cuBLAS (C's shape is fixed by the caller).
void dgemm(const DevMat &C, const DevMat &A, bool ta, const DevMat &B, bool tb) {
  hkfac::bench::cublas::sgemm(ta, tb, C.rows, C.cols, ta ? A.rows : A.cols, 1.0f, A.data->get(),
                              A.cols, B.data->get(), B.cols, 0.0f, C.data->get(), C.cols);
}

std::string shape_name(int d_a, int d_g) {
  return "dA=" + std::to_string(d_a) + " dG=" + std::to_string(d_g);
}

hkfac::bench::Case direct_case(int d_a, int d_g) {
  hkfac::bench::Case c;
  c.group = "precondition";
  c.shape = shape_name(d_a, d_g);
  c.flops = 2.0 * d_a * d_g * (d_a + d_g);
  c.make = [d_a, d_g] {
    auto A = std::make_shared<Mat>(Mat::Random(d_a, d_a));
    auto G = std::make_shared<Mat>(Mat::Random(d_g, d_g));
    auto V = std::make_shared<Mat>(Mat::Random(d_a, d_g));
    auto T = std::make_shared<Mat>(Mat::Zero(d_a, d_g));
    auto U = std::make_shared<Mat>(Mat::Zero(d_a, d_g));
    auto Ab = std::make_shared<Buffer<float>>(hkfac::wrap<float>(*A));
    auto Gb = std::make_shared<Buffer<float>>(hkfac::wrap<float>(*G));
    auto Vb = std::make_shared<Buffer<float>>(hkfac::wrap<float>(*V));
    auto Ub = std::make_shared<Buffer<float>>(hkfac::wrap<float>(*U));
    std::vector<hkfac::bench::Contender> cs{
        // Holds the matrices too: --quick keeps only this contender, and the buffers merely
        // view the matrices' storage.
        {"halide",
         [A, G, V, U, Ab, Gb, Vb, Ub] {
           hkfac::kernels::kron_precondition(*Ub, *Ab, *Vb, *Gb, hkfac::bench::device());
         }},
        {"openblas",
         [=] {
           sgemm(*T, *A, false, *V, false);
           sgemm(*U, *T, false, *G, false);
         }},
        {"eigen", [=] {
           T->noalias() = *A * *V;
           U->noalias() = *T * *G;
         }}};
    if (hkfac::bench::cublas::enabled()) {
      const DevMat dA = upload(*A), dG = upload(*G), dV = upload(*V), dT = upload(*T),
                   dU = upload(*U);
      cs.push_back({"cublas",
                    [=] {
                      dgemm(dT, dA, false, dV, false);
                      dgemm(dU, dT, false, dG, false);
                    },
                    hkfac::bench::cublas::synchronize});
    }
    return cs;
  };
  return c;
}

hkfac::bench::Case eigen_route_case(int d_a, int d_g) {
  hkfac::bench::Case c;
  c.group = "precondition_eigen";
  c.shape = shape_name(d_a, d_g);
  c.flops = 4.0 * d_a * d_g * (d_a + d_g);
  c.make = [d_a, d_g] {
    auto QA = std::make_shared<Mat>(Mat::Random(d_a, d_a));
    auto QG = std::make_shared<Mat>(Mat::Random(d_g, d_g));
    auto V = std::make_shared<Mat>(Mat::Random(d_a, d_g));
    auto la = std::make_shared<Eigen::VectorXf>(Eigen::VectorXf::Random(d_a).cwiseAbs());
    auto lg = std::make_shared<Eigen::VectorXf>(Eigen::VectorXf::Random(d_g).cwiseAbs());
    auto T1 = std::make_shared<Mat>(Mat::Zero(d_a, d_g));
    auto T2 = std::make_shared<Mat>(Mat::Zero(d_a, d_g));
    auto U = std::make_shared<Mat>(Mat::Zero(d_a, d_g));
    auto QAb = std::make_shared<Buffer<float>>(hkfac::wrap<float>(*QA));
    auto QGb = std::make_shared<Buffer<float>>(hkfac::wrap<float>(*QG));
    auto Vb = std::make_shared<Buffer<float>>(hkfac::wrap<float>(*V));
    auto Ub = std::make_shared<Buffer<float>>(hkfac::wrap<float>(*U));
    auto lab = std::make_shared<Buffer<float>>(hkfac::wrap<float>(*la));
    auto lgb = std::make_shared<Buffer<float>>(hkfac::wrap<float>(*lg));
    const float gamma = 0.01f;
    auto scale = [=](Mat &S) {
      for (int i = 0; i < d_a; i++) {
        for (int j = 0; j < d_g; j++)
          S(i, j) /= (*la)(i) * (*lg)(j) + gamma;
      }
    };
    std::vector<hkfac::bench::Contender> cs{
        {"halide",
         [QA, QG, V, U, la, lg, QAb, QGb, Vb, Ub, lab, lgb, gamma] {
           hkfac::kernels::kron_precondition_eigen(*Ub, *QAb, *lab, *Vb, *QGb, *lgb, gamma, -1,
                                                   hkfac::bench::device());
         }},
        {"openblas",
         [=] {
           sgemm(*T1, *QA, true, *V, false);
           sgemm(*T2, *T1, false, *QG, false);
           scale(*T2);
           sgemm(*T1, *QA, false, *T2, false);
           sgemm(*U, *T1, false, *QG, true);
         }},
        {"eigen", [=] {
           T1->noalias() = QA->transpose() * *V;
           T2->noalias() = *T1 * *QG;
           T2->array() /= ((*la) * lg->transpose()).array() + gamma;
           T1->noalias() = *QA * *T2;
           U->noalias() = *T1 * QG->transpose();
         }}};
    // cuBLAS has no elementwise division: its anchor is the four GEMMs alone, a lower bound on
    // the route's time.
    if (hkfac::bench::cublas::enabled()) {
      const DevMat dQA = upload(*QA), dQG = upload(*QG), dV = upload(*V), dT1 = upload(*T1),
                   dT2 = upload(*T2), dU = upload(*U);
      cs.push_back({"cublas",
                    [=] {
                      dgemm(dT1, dQA, true, dV, false);
                      dgemm(dT2, dT1, false, dQG, false);
                      dgemm(dT1, dQA, false, dT2, false);
                      dgemm(dU, dT1, false, dQG, true);
                    },
                    hkfac::bench::cublas::synchronize});
    }
    return cs;
  };
  return c;
}

hkfac::bench::Register reg([](bool quick) {
  std::vector<hkfac::bench::Case> out;
  if (quick) {
    out.push_back(direct_case(31, 250));
    out.push_back(eigen_route_case(31, 250));
    return out;
  }
  for (auto [d_a, d_g] : {std::pair{1001, 500}, std::pair{785, 1000}, std::pair{31, 250}}) {
    out.push_back(direct_case(d_a, d_g));
  }
  for (auto [d_a, d_g] : {std::pair{1001, 500}, std::pair{31, 250}}) {
    out.push_back(eigen_route_case(d_a, d_g));
  }
  return out;
});

} // namespace
