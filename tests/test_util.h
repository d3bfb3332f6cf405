// Shared helpers for the test suites: random inputs, device parameters, comparisons.
#pragma once

#include <gtest/gtest.h>

#include <Eigen/Core>
#include <random>
#include <string>
#include <vector>

#include "hkfac/buffer.h"
#include "hkfac/device.h"
#include "hkfac/error.h"
#include "hkfac/kernels/cost_model.h"

namespace hkfac::testing {

// Every device a kernel test runs on; CUDA cases skip at run time when no device is usable.
inline std::vector<Device> all_devices() { return {Device::cpu, Device::cuda}; }

inline std::string device_param_name(const ::testing::TestParamInfo<Device> &info) {
  return device_name(info.param);
}

// Call first in a device-parameterised test body.
#define HKFAC_SKIP_IF_UNAVAILABLE(dev)                                                             \
  do {                                                                                             \
    if ((dev) == ::hkfac::Device::cuda && !::hkfac::cuda_status().usable) {                        \
      GTEST_SKIP() << "CUDA not usable: " << ::hkfac::cuda_status().reason;                        \
    }                                                                                              \
  } while (0)

// A rows x cols buffer of uniform values in [-1, 1], reproducible from `seed`.
inline Buffer<float> random_matrix(int rows, int cols, unsigned seed) {
  Buffer<float> b = make_matrix<float>(rows, cols);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  hkfac::for_each_value(b, [&](float &v) { v = u(rng); });
  return b;
}

inline Buffer<float> random_vector(int n, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  Buffer<float> b = make_vector<float>(n);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  hkfac::for_each_value(b, [&](float &v) { v = u(rng); });
  return b;
}

// A buffer of any shape (Halide order, dim 0 first) of uniform values in [lo, hi].
inline Buffer<float> random_buffer(const std::vector<int> &extents, unsigned seed, float lo = 0.0f,
                                   float hi = 1.0f) {
  Buffer<float> b(extents);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  hkfac::for_each_value(b, [&](float &v) { v = u(rng); });
  return b;
}

// Cost-model weights of the kernels' shapes for S = 39, uniform in [0, 1], from seeds seed..seed+5.
inline kernels::CostModelWeights random_cost_model_weights(unsigned seed) {
  kernels::CostModelWeights w;
  w.head1_filter = random_buffer({8, 40, 7}, seed);
  w.head1_bias = random_buffer({8}, seed + 1);
  w.head2_filter = random_buffer({24, 39}, seed + 2);
  w.head2_bias = random_buffer({24}, seed + 3);
  w.conv1_filter = random_buffer({32, 32}, seed + 4);
  w.conv1_bias = random_buffer({32}, seed + 5);
  return w;
}

// A copy of a buffer's contents as a double-precision Eigen matrix (the reference's precision).
inline Eigen::MatrixXd to_eigen_d(Buffer<float> &b) { return as_eigen(b).cast<double>(); }

// max |a - b| / max(1, max |b|): relative error against the reference's scale.
inline double rel_error(const Eigen::MatrixXd &a, const Eigen::MatrixXd &ref) {
  double scale = std::max(1.0, ref.cwiseAbs().maxCoeff());
  return (a - ref).cwiseAbs().maxCoeff() / scale;
}

// A random symmetric d x d matrix (the covariance updates' precondition on C).
inline Buffer<float> random_symmetric(int d, unsigned seed) {
  Buffer<float> c = random_matrix(d, d, seed);
  auto m = as_eigen(c);
  for (int i = 0; i < d; i++) {
    for (int j = 0; j < i; j++)
      m(j, i) = m(i, j);
  }
  return c;
}

// Success when every C(i, j) has the same bits as C(j, i); otherwise names the first pair.
inline ::testing::AssertionResult exactly_symmetric(Buffer<float> &c) {
  auto m = as_eigen(c);
  for (int i = 0; i < m.rows(); i++) {
    for (int j = 0; j < i; j++) {
      if (m(i, j) != m(j, i)) {
        return ::testing::AssertionFailure() << "C(" << i << ", " << j << ") = " << m(i, j)
                                             << " but C(" << j << ", " << i << ") = " << m(j, i);
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// Runs `call` and expects an hkfac::Error whose message names the argument as 'arg'.
template <typename Call> void expect_error_naming(const char *arg, Call &&call) {
  try {
    call();
    ADD_FAILURE() << "expected hkfac::Error naming '" << arg << "'";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find(std::string("'") + arg + "'"), std::string::npos)
        << e.what();
  }
}

// Runs `call` and expects an hkfac::Error whose message contains `needle`.
template <typename Call> void expect_error_containing(const std::string &needle, Call &&call) {
  try {
    call();
    ADD_FAILURE() << "expected hkfac::Error mentioning " << needle;
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

} // namespace hkfac::testing
