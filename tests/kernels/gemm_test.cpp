// gemm against a double-precision Eigen reference: every transpose pair, awkward shapes, beta.
#include "hkfac/kernels/gemm.h"

#include <cmath>
#include <limits>
#include <tuple>

#include "test_util.h"

namespace hkfac {
namespace {

using kernels::Transpose;
using testing::random_matrix;
using testing::rel_error;
using testing::to_eigen_d;

// (m, n, depth): every awkward extent appears in every role, without a 1001^3 reference. Two
// are deep and wide enough for the CPU's packed transposed-A variant (kGemmPackedDepthFrom),
// with m and depth off its 8 x 8 copy blocks; then two put n on both sides of the CPU's narrow
// variants (kNarrowColumnsTo = 16), and the last two are one column deep enough for the
// one-column variant (kOneColumnDepthFrom = 16), with and without a partial vector of depth.
const std::vector<std::tuple<int, int, int>> kShapes = {
    {1, 1, 1},     {7, 129, 1},     {129, 1, 7},  {1, 7, 129},  {1001, 7, 129},  {7, 1001, 33},
    {33, 7, 1001}, {129, 129, 129}, {1, 1001, 7}, {1001, 1, 7}, {257, 259, 263}, {129, 1001, 257},
    {37, 16, 20},  {37, 17, 20},    {37, 1, 20},  {9, 1, 64}};

// A buffer holding op⁻¹ of a (rows x cols) operand: its transpose when t == yes.
Buffer<float> stored_operand(int rows, int cols, Transpose t, unsigned seed) {
  return t == Transpose::yes ? random_matrix(cols, rows, seed) : random_matrix(rows, cols, seed);
}

Eigen::MatrixXd op(Buffer<float> &b, Transpose t) {
  Eigen::MatrixXd m = to_eigen_d(b);
  return t == Transpose::yes ? Eigen::MatrixXd(m.transpose()) : m;
}

class GemmKernel : public ::testing::TestWithParam<Device> {};

TEST_P(GemmKernel, MatchesEigenForEveryTransposeOnAwkwardShapes) {
  const Device dev = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  for (Transpose ta : {Transpose::no, Transpose::yes}) {
    for (Transpose tb : {Transpose::no, Transpose::yes}) {
      for (auto [m, n, depth] : kShapes) {
        const unsigned seed = 7 * m + 11 * n + 13 * depth;
        Buffer<float> A = stored_operand(m, depth, ta, seed);
        Buffer<float> B = stored_operand(depth, n, tb, seed + 1);
        Buffer<float> C = random_matrix(m, n, seed + 2);
        Eigen::MatrixXd ref = 0.5 * op(A, ta) * op(B, tb) - 2.0 * to_eigen_d(C);
        kernels::gemm(C, A, ta, B, tb, 0.5f, -2.0f, dev);
        to_host(C);
        EXPECT_LT(rel_error(to_eigen_d(C), ref), 2e-5)
            << "m=" << m << " n=" << n << " depth=" << depth << " ta=" << int(ta)
            << " tb=" << int(tb);
      }
    }
  }
}

TEST_P(GemmKernel, BetaZeroIgnoresNanInC) {
  const Device dev = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  for (auto [m, n, depth] : kShapes) {
    Buffer<float> A = random_matrix(m, depth, m), B = random_matrix(depth, n, n);
    Buffer<float> C = make_matrix<float>(m, n);
    hkfac::fill(C, std::numeric_limits<float>::quiet_NaN());
    kernels::gemm(C, A, Transpose::no, B, Transpose::no, 1.0f, 0.0f, dev);
    to_host(C);
    Eigen::MatrixXd got = to_eigen_d(C);
    ASSERT_TRUE(got.allFinite()) << "m=" << m << " n=" << n << " depth=" << depth;
    EXPECT_LT(rel_error(got, to_eigen_d(A) * to_eigen_d(B)), 2e-5);
  }
}

TEST(GemmKernelErrors, ShapeMismatchNamesTheArgument) {
  Buffer<float> A = make_matrix<float>(4, 3), B = make_matrix<float>(3, 5);
  Buffer<float> C = make_matrix<float>(4, 5), wrong = make_matrix<float>(2, 2);
  Buffer<float> vec = make_vector<float>(3);
  testing::expect_error_naming("A",
                               [&] { kernels::gemm(C, wrong, Transpose::no, B, Transpose::no); });
  testing::expect_error_naming("B",
                               [&] { kernels::gemm(C, A, Transpose::no, wrong, Transpose::no); });
  testing::expect_error_naming("B", [&] { kernels::gemm(C, A, Transpose::no, B, Transpose::yes); });
  testing::expect_error_naming("C",
                               [&] { kernels::gemm(vec, A, Transpose::no, B, Transpose::no); });
  // C's row count disagrees with op(A)'s: reported against A, whose extent is checked against C.
  Buffer<float> C_bad = make_matrix<float>(3, 5);
  testing::expect_error_naming("A",
                               [&] { kernels::gemm(C_bad, A, Transpose::no, B, Transpose::no); });
}

INSTANTIATE_TEST_SUITE_P(AllDevices, GemmKernel, ::testing::ValuesIn(testing::all_devices()),
                         testing::device_param_name);

} // namespace
} // namespace hkfac
