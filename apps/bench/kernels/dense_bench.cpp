// Dense layer forward/backward (tanh, the autoencoder's activation) vs OpenBLAS + loops vs Eigen.
#include <cblas.h>

#include <Eigen/Core>
#include <cmath>
#include <memory>

#include "cublas_anchor.h"
#include "harness.h"
#include "hkfac/kernels/dense.h"

namespace {

using hkfac::Buffer;
using hkfac::kernels::Activation;
using Mat = hkfac::RowMajorMatrix<float>;

struct Layer {
  Mat X, W, Y, dY, dZ, dX, dW;
  Eigen::VectorXf b, db;
  Buffer<float> Xb, Wb, Yb, dYb, dZb, dXb, dWb, bb, dbb;
  Layer(int batch, int d_in, int d_out)
      : X(Mat::Random(batch, d_in)), W(Mat::Random(d_in, d_out) * 0.05f),
        Y(Mat::Zero(batch, d_out)), dY(Mat::Random(batch, d_out)), dZ(Mat::Zero(batch, d_out)),
        dX(Mat::Zero(batch, d_in)), dW(Mat::Zero(d_in, d_out)), b(Eigen::VectorXf::Random(d_out)),
        db(Eigen::VectorXf::Zero(d_out)), Xb(hkfac::wrap<float>(X)), Wb(hkfac::wrap<float>(W)),
        Yb(hkfac::wrap<float>(Y)), dYb(hkfac::wrap<float>(dY)), dZb(hkfac::wrap<float>(dZ)),
        dXb(hkfac::wrap<float>(dX)), dWb(hkfac::wrap<float>(dW)), bb(hkfac::wrap<float>(b)),
        dbb(hkfac::wrap<float>(db)) {}
};

// The layer's GEMM operands on the device, for the cuBLAS anchor. cuBLAS has no fused bias or
// activation: its anchor is the layer's GEMMs alone, a lower bound on the layer's time.
struct DeviceLayer {
  hkfac::bench::cublas::DeviceArray X, W, Y, dZ, dX, dW;
  explicit DeviceLayer(const Layer &L)
      : X(L.X.data(), L.X.size()), W(L.W.data(), L.W.size()), Y(L.Y.data(), L.Y.size()),
        dZ(L.dY.data(), L.dY.size()), dX(L.dX.data(), L.dX.size()), dW(L.dW.data(), L.dW.size()) {}
};

std::string shape_name(int batch, int d_in, int d_out) {
  return "batch " + std::to_string(batch) + " " + std::to_string(d_in) + "->" +
         std::to_string(d_out) + " tanh";
}

hkfac::bench::Case forward_case(int batch, int d_in, int d_out) {
  hkfac::bench::Case c;
  c.group = "dense_forward";
  c.shape = shape_name(batch, d_in, d_out);
  c.flops = 2.0 * batch * d_in * d_out;
  c.make = [=] {
    auto L = std::make_shared<Layer>(batch, d_in, d_out);
    std::vector<hkfac::bench::Contender> cs{
        {"halide",
         [=] {
           hkfac::kernels::dense_forward(L->Yb, L->Xb, L->Wb, L->bb, Activation::tanh,
                                         hkfac::bench::device());
         }},
        {"openblas",
         [=] {
           cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, d_out, d_in, 1.0f,
                       L->X.data(), d_in, L->W.data(), d_out, 0.0f, L->Y.data(), d_out);
           for (int i = 0; i < batch; i++) {
             float *y = L->Y.data() + size_t(i) * d_out;
             for (int j = 0; j < d_out; j++)
               y[j] = std::tanh(y[j] + L->b(j));
           }
         }},
        {"eigen", [=] {
           L->Y.noalias() = L->X * L->W;
           L->Y = (L->Y.rowwise() + L->b.transpose()).array().tanh();
         }}};
    if (hkfac::bench::cublas::enabled()) {
      auto D = std::make_shared<DeviceLayer>(*L);
      cs.push_back({"cublas",
                    [=] {
                      hkfac::bench::cublas::sgemm(false, false, batch, d_out, d_in, 1.0f,
                                                  D->X.get(), d_in, D->W.get(), d_out, 0.0f,
                                                  D->Y.get(), d_out);
                    },
                    hkfac::bench::cublas::synchronize});
    }
    return cs;
  };
  return c;
}

hkfac::bench::Case backward_case(int batch, int d_in, int d_out) {
  hkfac::bench::Case c;
  c.group = "dense_backward";
  c.shape = shape_name(batch, d_in, d_out);
  c.flops = 4.0 * batch * d_in * d_out;
  c.make = [=] {
    auto L = std::make_shared<Layer>(batch, d_in, d_out);
    L->Y = L->Y.array().tanh();
    std::vector<hkfac::bench::Contender> cs{
        {"halide",
         [=] {
           hkfac::kernels::dense_backward(L->dZb, L->dXb, L->dWb, L->dbb, L->dYb, L->Yb, L->Xb,
                                          L->Wb, Activation::tanh, hkfac::bench::device());
         }},
        {"openblas",
         [=] {
           L->db.setZero();
           for (int i = 0; i < batch; i++) {
             for (int j = 0; j < d_out; j++) {
               const float y = L->Y(i, j);
               L->dZ(i, j) = L->dY(i, j) * (1.0f - y * y);
               L->db(j) += L->dZ(i, j);
             }
           }
           cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, d_in, d_out, 1.0f,
                       L->dZ.data(), d_out, L->W.data(), d_out, 0.0f, L->dX.data(), d_in);
           cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d_in, d_out, batch, 1.0f,
                       L->X.data(), d_in, L->dZ.data(), d_out, 0.0f, L->dW.data(), d_out);
         }},
        {"eigen", [=] {
           L->dZ = L->dY.array() * (1.0f - L->Y.array().square());
           L->db = L->dZ.colwise().sum().transpose();
           L->dX.noalias() = L->dZ * L->W.transpose();
           L->dW.noalias() = L->X.transpose() * L->dZ;
         }}};
    if (hkfac::bench::cublas::enabled()) {
      auto D = std::make_shared<DeviceLayer>(*L);
      cs.push_back({"cublas",
                    [=] {
                      namespace cublas = hkfac::bench::cublas;
                      cublas::sgemm(false, true, batch, d_in, d_out, 1.0f, D->dZ.get(), d_out,
                                    D->W.get(), d_out, 0.0f, D->dX.get(), d_in);
                      cublas::sgemm(true, false, d_in, d_out, batch, 1.0f, D->X.get(), d_in,
                                    D->dZ.get(), d_out, 0.0f, D->dW.get(), d_out);
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
    out.push_back(forward_case(128, 250, 30));
    out.push_back(backward_case(128, 250, 30));
    return out;
  }
  const int layers[][2] = {{784, 1000}, {1000, 500}, {500, 250}, {250, 30}};
  for (int batch : {128, 1000}) {
    for (auto &l : layers)
      out.push_back(forward_case(batch, l[0], l[1]));
    for (auto &l : layers)
      out.push_back(backward_case(batch, l[0], l[1]));
  }
  // A regression head (one output) and a few-class one: the CPU's narrow variants.
  for (int d_out : {1, 10}) {
    out.push_back(forward_case(128, 250, d_out));
    out.push_back(backward_case(128, 250, d_out));
  }
  return out;
});

} // namespace
