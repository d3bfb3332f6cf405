// Dispatch for the dense layer kernels: shape checks, then the library built for the activation.
#include "hkfac/kernels/dense.h"

#include <initializer_list>

#include "dispatch.h"
#include "hkfac_k_dense_backward_identity_cpu.h"
#include "hkfac_k_dense_backward_identity_narrow_cpu.h"
#include "hkfac_k_dense_backward_identity_one_column_cpu.h"
#include "hkfac_k_dense_backward_identity_packed_cpu.h"
#include "hkfac_k_dense_backward_relu_cpu.h"
#include "hkfac_k_dense_backward_relu_narrow_cpu.h"
#include "hkfac_k_dense_backward_relu_one_column_cpu.h"
#include "hkfac_k_dense_backward_relu_packed_cpu.h"
#include "hkfac_k_dense_backward_sigmoid_cpu.h"
#include "hkfac_k_dense_backward_sigmoid_narrow_cpu.h"
#include "hkfac_k_dense_backward_sigmoid_one_column_cpu.h"
#include "hkfac_k_dense_backward_sigmoid_packed_cpu.h"
#include "hkfac_k_dense_backward_tanh_cpu.h"
#include "hkfac_k_dense_backward_tanh_narrow_cpu.h"
#include "hkfac_k_dense_backward_tanh_one_column_cpu.h"
#include "hkfac_k_dense_backward_tanh_packed_cpu.h"
#include "hkfac_k_dense_forward_identity_cpu.h"
#include "hkfac_k_dense_forward_identity_narrow_cpu.h"
#include "hkfac_k_dense_forward_identity_one_column_cpu.h"
#include "hkfac_k_dense_forward_relu_cpu.h"
#include "hkfac_k_dense_forward_relu_narrow_cpu.h"
#include "hkfac_k_dense_forward_relu_one_column_cpu.h"
#include "hkfac_k_dense_forward_sigmoid_cpu.h"
#include "hkfac_k_dense_forward_sigmoid_narrow_cpu.h"
#include "hkfac_k_dense_forward_sigmoid_one_column_cpu.h"
#include "hkfac_k_dense_forward_tanh_cpu.h"
#include "hkfac_k_dense_forward_tanh_narrow_cpu.h"
#include "hkfac_k_dense_forward_tanh_one_column_cpu.h"
#if HKFAC_HAVE_CUDA
#include "hkfac_k_dense_backward_identity_cuda.h"
#include "hkfac_k_dense_backward_relu_cuda.h"
#include "hkfac_k_dense_backward_sigmoid_cuda.h"
#include "hkfac_k_dense_backward_tanh_cuda.h"
#include "hkfac_k_dense_forward_identity_cuda.h"
#include "hkfac_k_dense_forward_relu_cuda.h"
#include "hkfac_k_dense_forward_sigmoid_cuda.h"
#include "hkfac_k_dense_forward_tanh_cuda.h"
#endif

namespace hkfac::kernels {

namespace {

// One of a CPU variant's four kernels, one per activation (no runtime branch in the kernels).
template <typename Kernel>
Kernel for_activation(Activation act, Kernel identity, Kernel tanh, Kernel relu, Kernel sigmoid) {
  switch (act) {
  case Activation::identity:
    return identity;
  case Activation::tanh:
    return tanh;
  case Activation::relu:
    return relu;
  case Activation::sigmoid:
    break;
  }
  return sigmoid;
}

// Every branch below trusts `act` to be one of the four: a cast integer would otherwise run the
// sigmoid variants, or no kernel at all, without a word.
void expect_activation(Activation act, const char *kernel) {
  if (act != Activation::identity && act != Activation::tanh && act != Activation::relu &&
      act != Activation::sigmoid) {
    throw Error(std::string(kernel) + ": argument 'act' is not an Activation value (" +
                std::to_string(static_cast<int>(act)) + ")");
  }
}

// The CPU variants with one-vector tiles, for layers with a few outputs (kNarrowColumnsTo).
auto narrow_forward(Activation act) {
  return for_activation(act, hkfac_k_dense_forward_identity_narrow_cpu,
                        hkfac_k_dense_forward_tanh_narrow_cpu,
                        hkfac_k_dense_forward_relu_narrow_cpu,
                        hkfac_k_dense_forward_sigmoid_narrow_cpu);
}

// A single output: its rows' dot products with W's column.
auto one_column_forward(Activation act) {
  return for_activation(
      act, hkfac_k_dense_forward_identity_one_column_cpu, hkfac_k_dense_forward_tanh_one_column_cpu,
      hkfac_k_dense_forward_relu_one_column_cpu, hkfac_k_dense_forward_sigmoid_one_column_cpu);
}

} // namespace

void dense_forward(Buffer<float> &Y, const Buffer<float> &X, const Buffer<float> &W,
                   const Buffer<float> &b, Activation act, Device dev) {
  constexpr const char *k = "dense_forward";
  detail::expect_dims(X.raw_buffer(), 2, k, "X");
  detail::expect_dims(W.raw_buffer(), 2, k, "W");
  const int batch = rows(X), d_in = cols(X), d_out = cols(W);
  detail::expect_matrix(W.raw_buffer(), d_in, d_out, k, "W");
  detail::expect_vector(b.raw_buffer(), d_out, k, "b");
  detail::expect_matrix(Y.raw_buffer(), batch, d_out, k, "Y");
  expect_activation(act, k);
  detail::expect_disjoint(k, {{Y.raw_buffer(), "Y"}},
                          {{X.raw_buffer(), "X"}, {W.raw_buffer(), "W"}, {b.raw_buffer(), "b"}});
  detail::AlignedArgs args(dev);
  halide_buffer_t *x = args.in(X), *w = args.in(W), *bias = args.in(b), *y = args.out(Y);
  if (dev == Device::cpu && d_out == 1 && d_in >= detail::kOneColumnDepthFrom) {
    detail::check_halide_result(one_column_forward(act)(x, w, bias, y), "dense_forward_one_column",
                                dev);
    args.commit();
    return;
  }
  if (dev == Device::cpu && d_out <= detail::kNarrowColumnsTo) {
    detail::check_halide_result(narrow_forward(act)(x, w, bias, y), "dense_forward_narrow", dev);
    args.commit();
    return;
  }
  switch (act) {
  case Activation::identity:
    HKFAC_RUN(dense_forward_identity, dev, x, w, bias, y);
    break;
  case Activation::tanh:
    HKFAC_RUN(dense_forward_tanh, dev, x, w, bias, y);
    break;
  case Activation::relu:
    HKFAC_RUN(dense_forward_relu, dev, x, w, bias, y);
    break;
  case Activation::sigmoid:
    HKFAC_RUN(dense_forward_sigmoid, dev, x, w, bias, y);
    break;
  }
  args.commit();
}

namespace {

auto packed_backward(Activation act) {
  return for_activation(act, hkfac_k_dense_backward_identity_packed_cpu,
                        hkfac_k_dense_backward_tanh_packed_cpu,
                        hkfac_k_dense_backward_relu_packed_cpu,
                        hkfac_k_dense_backward_sigmoid_packed_cpu);
}

auto narrow_backward(Activation act) {
  return for_activation(act, hkfac_k_dense_backward_identity_narrow_cpu,
                        hkfac_k_dense_backward_tanh_narrow_cpu,
                        hkfac_k_dense_backward_relu_narrow_cpu,
                        hkfac_k_dense_backward_sigmoid_narrow_cpu);
}

// A single output: dX as an outer product, dW as one column of sums down the batch.
auto one_column_backward(Activation act) {
  return for_activation(act, hkfac_k_dense_backward_identity_one_column_cpu,
                        hkfac_k_dense_backward_tanh_one_column_cpu,
                        hkfac_k_dense_backward_relu_one_column_cpu,
                        hkfac_k_dense_backward_sigmoid_one_column_cpu);
}

// The one-output variant reads its one-column matrices as contiguous vectors.
bool rows_back_to_back(std::initializer_list<const halide_buffer_t *> columns) {
  for (const halide_buffer_t *b : columns) {
    if (b->dimensions >= 2 && b->dim[1].stride != 1)
      return false;
  }
  return true;
}

} // namespace

void dense_backward(Buffer<float> &dZ, Buffer<float> &dX, Buffer<float> &dW, Buffer<float> &db,
                    const Buffer<float> &dY, const Buffer<float> &Y, const Buffer<float> &X,
                    const Buffer<float> &W, Activation act, Device dev) {
  constexpr const char *k = "dense_backward";
  detail::expect_dims(X.raw_buffer(), 2, k, "X");
  detail::expect_dims(W.raw_buffer(), 2, k, "W");
  const int batch = rows(X), d_in = cols(X), d_out = cols(W);
  detail::expect_matrix(W.raw_buffer(), d_in, d_out, k, "W");
  detail::expect_matrix(dY.raw_buffer(), batch, d_out, k, "dY");
  detail::expect_matrix(Y.raw_buffer(), batch, d_out, k, "Y");
  detail::expect_matrix(dZ.raw_buffer(), batch, d_out, k, "dZ");
  detail::expect_matrix(dX.raw_buffer(), batch, d_in, k, "dX");
  detail::expect_matrix(dW.raw_buffer(), d_in, d_out, k, "dW");
  detail::expect_vector(db.raw_buffer(), d_out, k, "db");
  expect_activation(act, k);
  detail::expect_disjoint(k,
                          {{dZ.raw_buffer(), "dZ"},
                           {dX.raw_buffer(), "dX"},
                           {dW.raw_buffer(), "dW"},
                           {db.raw_buffer(), "db"}},
                          {{dY.raw_buffer(), "dY"},
                           {Y.raw_buffer(), "Y"},
                           {X.raw_buffer(), "X"},
                           {W.raw_buffer(), "W"}});
  detail::AlignedArgs args(dev);
  halide_buffer_t *dy = args.in(dY), *y = args.in(Y), *x = args.in(X), *w = args.in(W),
                  *dz = args.out(dZ), *dx = args.out(dX), *dw = args.out(dW), *dbias = args.out(db);
  if (dev == Device::cpu && d_out == 1 && rows_back_to_back({dy, y, w, dz, dw})) {
    detail::check_halide_result(one_column_backward(act)(dy, y, x, w, dz, dx, dw, dbias),
                                "dense_backward_one_column", dev);
    args.commit();
    return;
  }
  // A few outputs: dW = Xᵀ dZ has that many columns (dX's are the inputs).
  if (dev == Device::cpu && d_out <= detail::kNarrowColumnsTo) {
    detail::check_halide_result(narrow_backward(act)(dy, y, x, w, dz, dx, dw, dbias),
                                "dense_backward_narrow", dev);
    args.commit();
    return;
  }
  if (dev == Device::cpu && batch >= detail::kDenseBackwardPackedBatchFrom &&
      long(d_in) * d_out >= detail::kGemmPackedOutputsFrom) {
    detail::check_halide_result(packed_backward(act)(dy, y, x, w, dz, dx, dw, dbias),
                                "dense_backward_packed", dev);
    args.commit();
    return;
  }
  switch (act) {
  case Activation::identity:
    HKFAC_RUN(dense_backward_identity, dev, dy, y, x, w, dz, dx, dw, dbias);
    break;
  case Activation::tanh:
    HKFAC_RUN(dense_backward_tanh, dev, dy, y, x, w, dz, dx, dw, dbias);
    break;
  case Activation::relu:
    HKFAC_RUN(dense_backward_relu, dev, dy, y, x, w, dz, dx, dw, dbias);
    break;
  case Activation::sigmoid:
    HKFAC_RUN(dense_backward_sigmoid, dev, dy, y, x, w, dz, dx, dw, dbias);
    break;
  }
  args.commit();
}

} // namespace hkfac::kernels
