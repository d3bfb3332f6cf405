// Diagonal kernels against a double-precision Eigen reference, on CPU and (when present) CUDA.
#include "hkfac/kernels/diagonal.h"

#include "test_util.h"

namespace hkfac {
namespace {

using testing::random_matrix;
using testing::random_vector;
using testing::rel_error;
using testing::to_eigen_d;

class DiagonalKernels : public ::testing::TestWithParam<Device> {};

TEST_P(DiagonalKernels, EmaMatchesEigenOnAwkwardShapes) {
  const Device dev = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  for (int p : {1, 7, 129, 1001}) {
    for (int n : {1, 7, 128}) {
      Buffer<float> d = random_vector(p, 11 * p + n, 0.0f, 1.0f);
      Buffer<float> g = random_matrix(n, p, 13 * p + n);
      Eigen::MatrixXd d0 = to_eigen_d(d), gd = to_eigen_d(g);
      kernels::diagonal_ema(d, g, 0.95f, 0.25f, dev);
      to_host(d);
      Eigen::MatrixXd ref =
          0.95 * d0 + 0.25 * gd.array().square().colwise().sum().transpose().matrix();
      EXPECT_LT(rel_error(to_eigen_d(d), ref), 1e-5) << "p=" << p << " n=" << n;
    }
  }
}

TEST_P(DiagonalKernels, MatpowerPlusThenMinusIsIdentity) {
  const Device dev = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  for (int p : {1, 7, 129, 1001}) {
    Buffer<float> g = random_vector(p, p);
    Buffer<float> d = random_vector(p, p + 1, 0.0f, 2.0f);
    Buffer<float> u = make_vector<float>(p), back = make_vector<float>(p);
    kernels::diagonal_matpower(u, g, d, 0.1f, +1, dev);
    kernels::diagonal_matpower(back, u, d, 0.1f, -1, dev);
    to_host(u);
    to_host(back);
    Eigen::MatrixXd ref = to_eigen_d(g).array() * (to_eigen_d(d).array() + 0.1);
    EXPECT_LT(rel_error(to_eigen_d(u), ref), 1e-6);
    EXPECT_LT(rel_error(to_eigen_d(back), to_eigen_d(g)), 1e-6);
  }
}

TEST(DiagonalKernelsErrors, ShapeMismatchNamesTheArgument) {
  Buffer<float> d = make_vector<float>(5), g = make_matrix<float>(3, 4);
  try {
    kernels::diagonal_ema(d, g, 1.0f, 1.0f, Device::cpu);
    FAIL() << "expected hkfac::Error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("'g'"), std::string::npos) << e.what();
  }
  Buffer<float> u = make_vector<float>(5);
  EXPECT_THROW(kernels::diagonal_matpower(u, d, d, 0.1f, 2, Device::cpu), Error);
}

INSTANTIATE_TEST_SUITE_P(AllDevices, DiagonalKernels, ::testing::ValuesIn(testing::all_devices()),
                         testing::device_param_name);

} // namespace
} // namespace hkfac
