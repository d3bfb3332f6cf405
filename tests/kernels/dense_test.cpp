// Dense forward/backward against double-precision Eigen: every activation, awkward shapes.
#include "hkfac/kernels/dense.h"

#include <cmath>
#include <limits>
#include <tuple>

#include "test_util.h"

namespace hkfac {
namespace {

using kernels::Activation;
using testing::random_matrix;
using testing::random_vector;
using testing::rel_error;
using testing::to_eigen_d;

const Activation kActivations[] = {Activation::identity, Activation::tanh, Activation::relu,
                                   Activation::sigmoid};

// (batch, d_in, d_out): each awkward extent in each role, plus an autoencoder layer, a batch
// large enough for the CPU's packed backward variant (kDenseBackwardPackedBatchFrom), and the
// outputs on both sides of the CPU's narrow variants (kNarrowColumnsTo = 16), and single outputs
// on both sides of the one-column variant's depth (kOneColumnDepthFrom = 16; 129 leaves a partial
// vector of depth, 24 none with AVX2); the backward pass's one-output variant parallel (300 x
// 250) and serial, with and without a partial block of inputs.
const std::vector<std::tuple<int, int, int>> kShapes = {
    {1, 1, 1},     {7, 129, 1},    {129, 1, 7},     {1, 7, 129},  {33, 1001, 7},
    {7, 33, 1001}, {128, 250, 30}, {513, 257, 259}, {37, 20, 16}, {37, 20, 17},
    {5, 15, 1},    {5, 16, 1},     {33, 24, 1},     {300, 250, 1}};

Eigen::MatrixXd activate(Activation act, const Eigen::MatrixXd &z) {
  switch (act) {
  case Activation::tanh:
    return z.array().tanh();
  case Activation::relu:
    return z.array().max(0.0);
  case Activation::sigmoid:
    return 1.0 / (1.0 + (-z.array()).exp());
  case Activation::identity:
    break;
  }
  return z;
}

// act'(z), from z itself: an independent check of the kernel's derivative-from-output.
Eigen::MatrixXd derivative(Activation act, const Eigen::MatrixXd &z) {
  switch (act) {
  case Activation::tanh:
    return 1.0 - z.array().tanh().square();
  case Activation::relu:
    return (z.array() > 0.0).cast<double>();
  case Activation::sigmoid: {
    Eigen::ArrayXXd s = 1.0 / (1.0 + (-z.array()).exp());
    return s * (1.0 - s);
  }
  case Activation::identity:
    break;
  }
  return Eigen::MatrixXd::Ones(z.rows(), z.cols());
}

// Z = X W + b in double.
Eigen::MatrixXd pre_activation(Buffer<float> &X, Buffer<float> &W, Buffer<float> &b) {
  Eigen::MatrixXd z = to_eigen_d(X) * to_eigen_d(W);
  z.rowwise() += to_eigen_d(b).reshaped().transpose();
  return z;
}

class DenseKernels : public ::testing::TestWithParam<Device> {};

TEST_P(DenseKernels, ForwardMatchesEigenForEveryActivation) {
  const Device dev = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  for (Activation act : kActivations) {
    for (auto [batch, d_in, d_out] : kShapes) {
      const unsigned seed = 3 * batch + 5 * d_in + 7 * d_out;
      Buffer<float> X = random_matrix(batch, d_in, seed), W = random_matrix(d_in, d_out, seed + 1);
      Buffer<float> b = random_vector(d_out, seed + 2);
      Buffer<float> Y = make_matrix<float>(batch, d_out);
      kernels::dense_forward(Y, X, W, b, act, dev);
      to_host(Y);
      EXPECT_LT(rel_error(to_eigen_d(Y), activate(act, pre_activation(X, W, b))), 3e-5)
          << "act=" << int(act) << " batch=" << batch << " d_in=" << d_in << " d_out=" << d_out;
    }
  }
}

// A NaN input reaches every output of its row, as through libm's tanh or an unfused max: the
// fused activations' clamps once turned it into ±1 or 0, so a NaN batch could evaluate to a finite
// loss. Infinite pre-activations still saturate. Every CPU variant: standard, narrow, one column.
TEST_P(DenseKernels, ForwardPropagatesNanAndSaturatesInfinities) {
  const Device dev = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (Activation act : kActivations) {
    for (auto [batch, d_in, d_out] : {std::tuple{9, 33, 40}, {9, 33, 7}, {9, 33, 1}}) {
      Buffer<float> X = random_matrix(batch, d_in, 41), W = random_matrix(d_in, d_out, 42);
      Buffer<float> b = random_vector(d_out, 43), Y = make_matrix<float>(batch, d_out);
      X(5, 2) = nan;
      // Row 4: a pre-activation of +inf in column 0 (W's column 0 is positive, so is X's row 4).
      for (int k = 0; k < d_in; ++k) {
        X(k, 4) = 1.0f;
        W(0, k) = 1.0f;
      }
      X(0, 4) = std::numeric_limits<float>::infinity();
      kernels::dense_forward(Y, X, W, b, act, dev);
      to_host(Y);
      for (int i = 0; i < batch; ++i) {
        for (int j = 0; j < d_out; ++j) {
          const bool nan_row = i == 2;
          EXPECT_EQ(std::isnan(Y(j, i)), nan_row)
              << "act=" << int(act) << " d_out=" << d_out << " (" << i << ", " << j << ")";
        }
      }
      const float expected_inf = act == Activation::tanh || act == Activation::sigmoid
                                     ? 1.0f
                                     : std::numeric_limits<float>::infinity();
      EXPECT_EQ(Y(0, 4), expected_inf) << "act=" << int(act) << " d_out=" << d_out;
    }
  }
}

TEST_P(DenseKernels, BackwardMatchesAnalyticGradients) {
  const Device dev = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  for (Activation act : kActivations) {
    for (auto [batch, d_in, d_out] : kShapes) {
      const unsigned seed = 11 * batch + 13 * d_in + 17 * d_out;
      Buffer<float> X = random_matrix(batch, d_in, seed), W = random_matrix(d_in, d_out, seed + 1);
      Buffer<float> b = random_vector(d_out, seed + 2), dY = random_matrix(batch, d_out, seed + 3);
      Buffer<float> Y = make_matrix<float>(batch, d_out);
      kernels::dense_forward(Y, X, W, b, act, dev);
      Buffer<float> dZ = make_matrix<float>(batch, d_out), dX = make_matrix<float>(batch, d_in);
      Buffer<float> dW = make_matrix<float>(d_in, d_out), db = make_vector<float>(d_out);
      kernels::dense_backward(dZ, dX, dW, db, dY, Y, X, W, act, dev);
      to_host(dZ);
      to_host(dX);
      to_host(dW);
      to_host(db);

      Eigen::MatrixXd dz = to_eigen_d(dY).cwiseProduct(derivative(act, pre_activation(X, W, b)));
      const std::string where = "act=" + std::to_string(int(act)) +
                                " batch=" + std::to_string(batch) +
                                " d_in=" + std::to_string(d_in) + " d_out=" + std::to_string(d_out);
      EXPECT_LT(rel_error(to_eigen_d(dZ), dz), 3e-5) << "dZ " << where;
      EXPECT_LT(rel_error(to_eigen_d(dX), dz * to_eigen_d(W).transpose()), 3e-5) << "dX " << where;
      EXPECT_LT(rel_error(to_eigen_d(dW), to_eigen_d(X).transpose() * dz), 3e-5) << "dW " << where;
      EXPECT_LT(rel_error(to_eigen_d(db), dz.colwise().sum()), 3e-5) << "db " << where;
    }
  }
}

TEST_P(DenseKernels, BackwardMatchesFiniteDifferencesOfForward) {
  const Device dev = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  // L(W, b) = Σ dY ⊙ act(X W + b), differenced in double through the reference forward.
  const int batch = 5, d_in = 4, d_out = 3;
  Buffer<float> X = random_matrix(batch, d_in, 1), W = random_matrix(d_in, d_out, 2);
  Buffer<float> b = random_vector(d_out, 3), dY = random_matrix(batch, d_out, 4);
  for (Activation act : {Activation::tanh, Activation::sigmoid}) {
    Buffer<float> Y = make_matrix<float>(batch, d_out), dZ = make_matrix<float>(batch, d_out);
    Buffer<float> dX = make_matrix<float>(batch, d_in), dW = make_matrix<float>(d_in, d_out);
    Buffer<float> db = make_vector<float>(d_out);
    kernels::dense_forward(Y, X, W, b, act, dev);
    kernels::dense_backward(dZ, dX, dW, db, dY, Y, X, W, act, dev);
    to_host(dW);
    to_host(db);
    const Eigen::MatrixXd x = to_eigen_d(X), w = to_eigen_d(W), dy = to_eigen_d(dY);
    const Eigen::RowVectorXd bias = to_eigen_d(b).reshaped().transpose();
    auto loss = [&](const Eigen::MatrixXd &w_, const Eigen::RowVectorXd &b_) {
      Eigen::MatrixXd z = x * w_;
      z.rowwise() += b_;
      return (dy.array() * activate(act, z).array()).sum();
    };
    const double h = 1e-6;
    for (int r = 0; r < d_in; r++) {
      for (int c = 0; c < d_out; c++) {
        Eigen::MatrixXd wp = w, wm = w;
        wp(r, c) += h;
        wm(r, c) -= h;
        EXPECT_NEAR(dW(c, r), (loss(wp, bias) - loss(wm, bias)) / (2 * h), 1e-4);
      }
    }
    for (int c = 0; c < d_out; c++) {
      Eigen::RowVectorXd bp = bias, bm = bias;
      bp(c) += h;
      bm(c) -= h;
      EXPECT_NEAR(db(c), (loss(w, bp) - loss(w, bm)) / (2 * h), 1e-4);
    }
  }
}

// Users wrap Eigen storage (16-byte aligned) or sub-views; the kernels' vector tails must not
// assume more alignment than a float's. Every buffer here starts 4 bytes past an aligned address;
// the second shape takes the packed backward variant.
// A single output whose one-column matrices are columns of wider ones (rows not back to back):
// the CPU's one-output variant reads such columns as contiguous vectors, so the dispatch must
// pass them to the general one; the results must be the columns' own.
TEST(DenseKernelsCpu, OneOutputOfStridedColumnsMatchesAnalyticGradients) {
  const int batch = 40, d_in = 70;
  auto column = [](Buffer<float> &wide) { return wide.cropped(0, 0, 1); };
  Buffer<float> X = random_matrix(batch, d_in, 1), w3 = random_matrix(d_in, 3, 2);
  Buffer<float> b = random_vector(1, 3), dy3 = random_matrix(batch, 3, 4);
  Buffer<float> y3 = make_matrix<float>(batch, 3), dz3 = make_matrix<float>(batch, 3);
  Buffer<float> dw3 = make_matrix<float>(d_in, 3);
  Buffer<float> W = column(w3), dY = column(dy3), Y = column(y3), dZ = column(dz3),
                dW = column(dw3);
  Buffer<float> dX = make_matrix<float>(batch, d_in), db = make_vector<float>(1);
  kernels::dense_forward(Y, X, W, b, Activation::tanh, Device::cpu);
  kernels::dense_backward(dZ, dX, dW, db, dY, Y, X, W, Activation::tanh, Device::cpu);
  Eigen::MatrixXd dz =
      to_eigen_d(dY).cwiseProduct(derivative(Activation::tanh, pre_activation(X, W, b)));
  EXPECT_LT(rel_error(to_eigen_d(dZ), dz), 3e-5);
  EXPECT_LT(rel_error(to_eigen_d(dX), dz * to_eigen_d(W).transpose()), 3e-5);
  EXPECT_LT(rel_error(to_eigen_d(dW), to_eigen_d(X).transpose() * dz), 3e-5);
  EXPECT_LT(rel_error(to_eigen_d(db), dz.colwise().sum()), 3e-5);
}

class DenseKernelsUnaligned : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(DenseKernelsUnaligned, AcceptsBuffersAlignedOnlyToAFloat) {
  const auto [batch, d_in, d_out] = GetParam();
  std::vector<std::vector<float>> storage;
  auto unaligned = [&](int rows, int cols, unsigned seed) {
    storage.emplace_back(size_t(rows) * cols + 16);
    Buffer<float> b(storage.back().data() + 1, cols, rows);
    if (rows == 1)
      b = Buffer<float>(storage.back().data() + 1, cols);
    Buffer<float> src = rows == 1 ? random_vector(cols, seed) : random_matrix(rows, cols, seed);
    hkfac::copy_values(b, src);
    return b;
  };
  Buffer<float> X = unaligned(batch, d_in, 1), W = unaligned(d_in, d_out, 2);
  Buffer<float> b = unaligned(1, d_out, 3), dY = unaligned(batch, d_out, 4);
  Buffer<float> Y = unaligned(batch, d_out, 5), dZ = unaligned(batch, d_out, 6);
  Buffer<float> dX = unaligned(batch, d_in, 7), dW = unaligned(d_in, d_out, 8);
  Buffer<float> db = unaligned(1, d_out, 9);
  kernels::dense_forward(Y, X, W, b, Activation::sigmoid, Device::cpu);
  kernels::dense_backward(dZ, dX, dW, db, dY, Y, X, W, Activation::sigmoid, Device::cpu);
  Eigen::MatrixXd dz =
      to_eigen_d(dY).cwiseProduct(derivative(Activation::sigmoid, pre_activation(X, W, b)));
  EXPECT_LT(rel_error(to_eigen_d(dX), dz * to_eigen_d(W).transpose()), 3e-5);
  EXPECT_LT(rel_error(to_eigen_d(dW), to_eigen_d(X).transpose() * dz), 3e-5);
  EXPECT_LT(rel_error(to_eigen_d(db), dz.colwise().sum()), 3e-5);
}

INSTANTIATE_TEST_SUITE_P(Cpu, DenseKernelsUnaligned,
                         ::testing::Values(std::make_tuple(7, 33, 129),
                                           std::make_tuple(513, 257, 259),
                                           std::make_tuple(33, 250, 1)));

TEST(DenseKernelsErrors, ShapeMismatchNamesTheArgument) {
  const int batch = 4, d_in = 3, d_out = 5;
  Buffer<float> X = make_matrix<float>(batch, d_in), W = make_matrix<float>(d_in, d_out);
  Buffer<float> b = make_vector<float>(d_out), Y = make_matrix<float>(batch, d_out);
  Buffer<float> dZ = make_matrix<float>(batch, d_out), dX = make_matrix<float>(batch, d_in);
  Buffer<float> dW = make_matrix<float>(d_in, d_out), db = make_vector<float>(d_out);
  Buffer<float> odd = make_matrix<float>(2, 2), short_b = make_vector<float>(d_out - 1);
  const auto act = Activation::relu;
  testing::expect_error_naming("W",
                               [&] { kernels::dense_forward(Y, X, odd, b, act, Device::cpu); });
  testing::expect_error_naming("b",
                               [&] { kernels::dense_forward(Y, X, W, short_b, act, Device::cpu); });
  testing::expect_error_naming("Y",
                               [&] { kernels::dense_forward(odd, X, W, b, act, Device::cpu); });
  testing::expect_error_naming(
      "dY", [&] { kernels::dense_backward(dZ, dX, dW, db, odd, Y, X, W, act, Device::cpu); });
  testing::expect_error_naming(
      "dX", [&] { kernels::dense_backward(dZ, odd, dW, db, Y, Y, X, W, act, Device::cpu); });
  testing::expect_error_naming(
      "db", [&] { kernels::dense_backward(dZ, dX, dW, short_b, Y, Y, X, W, act, Device::cpu); });
}

INSTANTIATE_TEST_SUITE_P(AllDevices, DenseKernels, ::testing::ValuesIn(testing::all_devices()),
                         testing::device_param_name);

} // namespace
} // namespace hkfac
