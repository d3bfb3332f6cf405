// Kernel routing for the K-FAC library: generated kernels when built, Eigen otherwise.
#include "kernel_dispatch.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "activation_math.h"

#include "hkfac/cusolver.h"
#include "hkfac/error.h"
#include "hkfac/kernels/covariance.h"
#include "hkfac/kernels/diagonal.h"
#include "hkfac/kernels/gemm.h"
#include "hkfac/kernels/patch_covariance.h"
#include "hkfac/kernels/precondition.h"
#include "hkfac/kfac/model.h"

namespace hkfac::kfac::ops {
namespace {

// Kernel views of library matrices: zero-copy wraps of the Eigen storage. (The runtime stages
// storage that is not vector-aligned itself.) Inputs are marked host-dirty so a device kernel
// uploads them.
[[maybe_unused]] Buffer<float> make_buffer(const Matrix &m, bool as_vector) {
  const int r = static_cast<int>(m.rows()), c = static_cast<int>(m.cols());
  float *data = const_cast<float *>(m.data());
  return as_vector ? Buffer<float>(data, static_cast<int>(m.size())) : Buffer<float>(data, c, r);
}

[[maybe_unused]] Buffer<float> matrix_view(const Matrix &m) {
  Buffer<float> b = make_buffer(m, false);
  b.set_host_dirty();
  return b;
}
[[maybe_unused]] Buffer<float> vector_view(const Matrix &m) {
  Buffer<float> b = make_buffer(m, true);
  b.set_host_dirty();
  return b;
}

// An output argument: the kernel writes into `buffer` (which aliases `target`), and commit()
// brings a device result back to the host. Pass `initialised` for in-place updates.
struct OutputArg {
  Buffer<float> buffer;
  OutputArg(Matrix &m, bool as_vector, bool initialised) : buffer(make_buffer(m, as_vector)) {
    if (initialised)
      buffer.set_host_dirty();
  }
  void commit(const char *what) { to_host(buffer, what); }
};

void expect_shape(const Matrix &m, Eigen::Index rows, Eigen::Index cols, const char *op,
                  const char *arg) {
  if (m.rows() != rows || m.cols() != cols) {
    throw Error(std::string("kfac::ops::") + op + ": '" + arg + "' must be " +
                std::to_string(rows) + " x " + std::to_string(cols) + ", got " +
                std::to_string(m.rows()) + " x " + std::to_string(m.cols()));
  }
}

void expect_nonempty(const Matrix &m, const char *op, const char *arg) {
  if (m.size() == 0) {
    throw Error(std::string("kfac::ops::") + op + ": '" + arg + "' must not be empty");
  }
}

} // namespace

void dense_forward(Matrix &Y, const Matrix &X, const Matrix &W, const Matrix *b, Activation act) {
  expect_nonempty(X, "dense_forward", "X");
  expect_shape(W, X.cols(), W.cols(), "dense_forward", "W");
  if (b)
    expect_shape(*b, 1, W.cols(), "dense_forward", "b");
  Y.resize(X.rows(), W.cols());
#if HKFAC_KFAC_HAVE_DENSE
  Matrix zero_bias;
  if (!b)
    zero_bias = Matrix::Zero(1, W.cols());
  OutputArg y(Y, false, false);
  kernels::dense_forward(y.buffer, matrix_view(X), matrix_view(W), vector_view(b ? *b : zero_bias),
                         act);
  y.commit("dense_forward Y");
#else
  Matrix z = X * W;
  if (b)
    z.rowwise() += b->row(0);
  Y = detail::apply_activation(z, act);
#endif
}

void dense_backward(Matrix &dZ, Matrix &dX, Matrix &dW, Matrix &db, const Matrix &dY,
                    const Matrix &Y, const Matrix &X, const Matrix &W, Activation act) {
  expect_nonempty(X, "dense_backward", "X");
  expect_shape(W, X.cols(), W.cols(), "dense_backward", "W");
  expect_shape(Y, X.rows(), W.cols(), "dense_backward", "Y");
  expect_shape(dY, X.rows(), W.cols(), "dense_backward", "dY");
  dZ.resize(X.rows(), W.cols());
  dX.resize(X.rows(), X.cols());
  dW.resize(W.rows(), W.cols());
  db.resize(1, W.cols());
#if HKFAC_KFAC_HAVE_DENSE
  OutputArg dz(dZ, false, false), dx(dX, false, false), dw(dW, false, false), dbv(db, true, false);
  kernels::dense_backward(dz.buffer, dx.buffer, dw.buffer, dbv.buffer, matrix_view(dY),
                          matrix_view(Y), matrix_view(X), matrix_view(W), act);
  dz.commit("dense_backward dZ");
  dx.commit("dense_backward dX");
  dw.commit("dense_backward dW");
  dbv.commit("dense_backward db");
#else
  dZ = detail::times_derivative(dY, Y, act);
  dX.noalias() = dZ * W.transpose();
  dW.noalias() = X.transpose() * dZ;
  db = dZ.colwise().sum();
#endif
}

void dense_backward_input(Matrix &dZ, Matrix &dX, const Matrix &dY, const Matrix &Y,
                          const Matrix &W, Activation act) {
  expect_nonempty(W, "dense_backward_input", "W");
  expect_shape(Y, Y.rows(), W.cols(), "dense_backward_input", "Y");
  expect_shape(dY, Y.rows(), W.cols(), "dense_backward_input", "dY");
  dZ = detail::times_derivative(dY, Y, act);
  gemm(dX, dZ, false, W, true);
}

void covariance_update(Matrix &C, const Matrix &X, float a, float b, bool homogeneous) {
  expect_nonempty(X, "covariance_update", "X");
  const Eigen::Index d = X.cols() + (homogeneous ? 1 : 0);
  expect_shape(C, d, d, "covariance_update", "C");
#if HKFAC_KFAC_HAVE_COVARIANCE
  OutputArg c(C, false, true);
  kernels::covariance_update(c.buffer, matrix_view(X), a, b, homogeneous);
  c.commit("covariance_update C");
#else
  const Eigen::Index n = X.cols();
  Matrix xtx = X.transpose() * X;
  C *= a;
  C.topLeftCorner(n, n) += b * xtx;
  if (homogeneous) {
    const Eigen::RowVectorXf col_sums = X.colwise().sum();
    C.block(n, 0, 1, n) += b * col_sums;
    C.block(0, n, n, 1) += b * col_sums.transpose();
    C(n, n) += b * static_cast<float>(X.rows());
  }
#endif
}

void covariance_update_upper(Matrix &C, const Matrix &X, float a, float b, bool homogeneous) {
#if HKFAC_KFAC_HAVE_COVARIANCE
  expect_nonempty(X, "covariance_update_upper", "X");
  const Eigen::Index d = X.cols() + (homogeneous ? 1 : 0);
  expect_shape(C, d, d, "covariance_update_upper", "C");
  OutputArg c(C, false, true);
  kernels::covariance_update_upper(c.buffer, matrix_view(X), a, b, homogeneous);
  c.commit("covariance_update_upper C");
#else
  covariance_update(C, X, a, b, homogeneous); // both triangles: more than asked
#endif
}

// Row block K of a lower-triangular X is zero right of column (K+1)·b, so XᵀX is the sum over
// row blocks of each block's Gram matrix in the top-left (K+1)·b square: in all about a third
// of the covariance kernel's work over the whole of X. Blocks of 128 rows were the fastest of
// those timed (see docs/RESULTS.md#factor-inverses).
// The calls take views, not copies; 128 rows keep each view's start 64-byte aligned. The kernel
// accumulates in place, so the largest square goes first and sets all of C.
void lower_triangular_gram(Matrix &C, const Matrix &X) {
  expect_nonempty(X, "lower_triangular_gram", "X");
  expect_shape(X, X.rows(), X.rows(), "lower_triangular_gram", "X");
  const Eigen::Index m = X.rows();
#if HKFAC_KFAC_HAVE_COVARIANCE
  C.setZero(m, m); // the kernel reads C even when scaling it by 0
  constexpr int kBlockRows = 128;
  if (default_device() != Device::cpu || m <= kBlockRows) {
    covariance_update(C, X, 0.0f, 1.0f, false);
    return;
  }
  const int n = static_cast<int>(m);
  auto view = [n](const float *p, int rows, int cols) {
    halide_dimension_t dims[2] = {{0, cols, 1}, {0, rows, n}};
    Buffer<float> b(const_cast<float *>(p), 2, dims);
    b.set_host_dirty();
    return b;
  };
  for (int start = (n - 1) / kBlockRows * kBlockRows; start >= 0; start -= kBlockRows) {
    const int end = std::min(n, start + kBlockRows);
    Buffer<float> c = view(C.data(), end, end);
    kernels::covariance_update(
        c, view(X.data() + static_cast<std::ptrdiff_t>(start) * n, end - start, end),
        end == n ? 0.0f : 1.0f, 1.0f, false, Device::cpu);
  }
#else
  C.noalias() = X.transpose() * X;
#endif
}

void patch_covariance_update(Matrix &C, const Matrix &images, const kernels::PatchGeometry &g,
                             float a, float b, bool homogeneous) {
  expect_nonempty(images, "patch_covariance_update", "images");
#if HKFAC_KFAC_HAVE_PATCH_COVARIANCE
  const Eigen::Index d = g.patch_size() + (homogeneous ? 1 : 0);
  expect_shape(C, d, d, "patch_covariance_update", "C");
  OutputArg c(C, false, true);
  kernels::patch_covariance_update(c.buffer, matrix_view(images), g, a, b, homogeneous);
  c.commit("patch_covariance_update C");
#else
  covariance_update(C, im2col(images, g), a, b, homogeneous);
#endif
}

void kron_precondition(Matrix &U, const Matrix &A_inv, const Matrix &V, const Matrix &G_inv) {
  expect_nonempty(V, "kron_precondition", "V");
  expect_shape(A_inv, V.rows(), V.rows(), "kron_precondition", "A_inv");
  expect_shape(G_inv, V.cols(), V.cols(), "kron_precondition", "G_inv");
  if (U.data() == V.data())
    throw Error("kfac::ops::kron_precondition: 'U' must not alias 'V'");
  U.resize(V.rows(), V.cols());
#if HKFAC_KFAC_HAVE_PRECONDITION
  OutputArg u(U, false, false);
  kernels::kron_precondition(u.buffer, matrix_view(A_inv), matrix_view(V), matrix_view(G_inv));
  u.commit("kron_precondition U");
#else
  U.noalias() = A_inv * V * G_inv;
#endif
}

void kron_precondition_eigen(Matrix &U, const Matrix &Q_A, const Matrix &lambda_A, const Matrix &V,
                             const Matrix &Q_G, const Matrix &lambda_G, float gamma, int power) {
  constexpr const char *op = "kron_precondition_eigen";
  if (power != 1 && power != -1) {
    throw Error(std::string("kfac::ops::") + op + ": 'power' must be +1 or -1, got " +
                std::to_string(power));
  }
  expect_nonempty(V, op, "V");
  expect_shape(Q_A, V.rows(), V.rows(), op, "Q_A");
  expect_shape(Q_G, V.cols(), V.cols(), op, "Q_G");
  expect_shape(lambda_A, 1, V.rows(), op, "lambda_A");
  expect_shape(lambda_G, 1, V.cols(), op, "lambda_G");
  if (U.data() == V.data())
    throw Error(std::string("kfac::ops::") + op + ": 'U' aliases 'V'");
  U.resize(V.rows(), V.cols());
#if HKFAC_KFAC_HAVE_PRECONDITION
  OutputArg u(U, false, false);
  kernels::kron_precondition_eigen(u.buffer, matrix_view(Q_A), vector_view(lambda_A),
                                   matrix_view(V), matrix_view(Q_G), vector_view(lambda_G), gamma,
                                   power);
  u.commit("kron_precondition_eigen U");
#else
  Matrix rotated = Q_A.transpose() * V * Q_G;
  const Eigen::RowVectorXf la = lambda_A.row(0).cwiseMax(0.0f);
  const Eigen::RowVectorXf lg = lambda_G.row(0).cwiseMax(0.0f);
  Matrix scale = (la.transpose() * lg).array() + gamma;
  if (power == 1) {
    rotated = rotated.cwiseProduct(scale);
  } else {
    rotated = rotated.cwiseQuotient(scale);
  }
  U.noalias() = Q_A * rotated * Q_G.transpose();
#endif
}

void gemm(Matrix &C, const Matrix &A, bool transpose_a, const Matrix &B, bool transpose_b,
          float alpha, float beta) {
  const Eigen::Index m = transpose_a ? A.cols() : A.rows();
  const Eigen::Index k = transpose_a ? A.rows() : A.cols();
  const Eigen::Index kb = transpose_b ? B.cols() : B.rows();
  const Eigen::Index n = transpose_b ? B.rows() : B.cols();
  expect_nonempty(A, "gemm", "A");
  expect_nonempty(B, "gemm", "B");
  if (k != kb) {
    throw Error("kfac::ops::gemm: inner dimensions of 'A' (" + std::to_string(k) + ") and 'B' (" +
                std::to_string(kb) + ") differ");
  }
  if (beta == 0.0f) {
    C.resize(m, n);
  } else {
    expect_shape(C, m, n, "gemm", "C");
  }
#if HKFAC_KFAC_HAVE_GEMM
  using kernels::Transpose;
  OutputArg c(C, false, beta != 0.0f);
  kernels::gemm(c.buffer, matrix_view(A), transpose_a ? Transpose::yes : Transpose::no,
                matrix_view(B), transpose_b ? Transpose::yes : Transpose::no, alpha, beta);
  c.commit("gemm C");
#else
  Matrix product;
  if (transpose_a && transpose_b) {
    product.noalias() = A.transpose() * B.transpose();
  } else if (transpose_a) {
    product.noalias() = A.transpose() * B;
  } else if (transpose_b) {
    product.noalias() = A * B.transpose();
  } else {
    product.noalias() = A * B;
  }
  if (beta == 0.0f) {
    C = alpha * product;
  } else {
    C = alpha * product + beta * C;
  }
#endif
}

void diagonal_ema(Matrix &d, const Matrix &g, float a, float b) {
  expect_nonempty(g, "diagonal_ema", "g");
  expect_shape(d, 1, g.cols(), "diagonal_ema", "d");
#if HKFAC_KFAC_HAVE_DIAGONAL
  OutputArg dv(d, true, true);
  kernels::diagonal_ema(dv.buffer, matrix_view(g), a, b);
  dv.commit("diagonal_ema d");
#else
  d = a * d + b * g.array().square().colwise().sum().matrix();
#endif
}

void diagonal_matpower(Matrix &u, const Matrix &g, const Matrix &d, float gamma, int power) {
  if (power != 1 && power != -1) {
    throw Error("kfac::ops::diagonal_matpower: 'power' must be +1 or -1, got " +
                std::to_string(power));
  }
  expect_nonempty(g, "diagonal_matpower", "g");
  expect_shape(d, 1, g.size(), "diagonal_matpower", "d");
  if (u.data() != g.data())
    u.resize(1, g.size());
#if HKFAC_KFAC_HAVE_DIAGONAL
  // u may alias g: stage the input separately so the kernel never reads what it writes.
  const Matrix g_copy = u.data() == g.data() ? g : Matrix();
  OutputArg uv(u, true, false);
  kernels::diagonal_matpower(uv.buffer, vector_view(u.data() == g.data() ? g_copy : g),
                             vector_view(d), gamma, power);
  uv.commit("diagonal_matpower u");
#else
  const Eigen::ArrayXf gv = Eigen::Map<const Eigen::ArrayXf>(g.data(), g.size());
  const Eigen::ArrayXf dv = Eigen::Map<const Eigen::ArrayXf>(d.data(), d.size()) + gamma;
  Eigen::Map<Eigen::ArrayXf> out(u.data(), u.size());
  out = power == 1 ? (gv * dv).eval() : (gv / dv).eval();
#endif
}

bool inverses_on_device() { return default_device() == Device::cuda && cusolver::status().usable; }

bool device_spd_inverse(Matrix &inv, const Eigen::MatrixXd &m) {
  if (m.rows() != m.cols() || m.rows() == 0)
    throw Error("kfac::ops::device_spd_inverse: 'm' must be square and non-empty");
  Eigen::MatrixXd work = m; // column-major, as cuSOLVER wants
  if (!cusolver::spd_inverse(work.data(), static_cast<int>(work.rows())))
    return false;
  inv = work.cast<float>();
  return true;
}

bool device_symmetric_eigen(Matrix &q, Matrix &lambda, const Eigen::MatrixXd &m) {
  if (m.rows() != m.cols() || m.rows() == 0)
    throw Error("kfac::ops::device_symmetric_eigen: 'm' must be square and non-empty");
  Eigen::MatrixXd work = m;
  Eigen::VectorXd w(m.rows());
  if (!cusolver::symmetric_eigen(work.data(), w.data(), static_cast<int>(work.rows())))
    return false;
  q = work.cast<float>();
  lambda = w.transpose().cast<float>();
  return true;
}

} // namespace hkfac::kfac::ops
