// The checks every kernel's dispatch makes on its arguments beyond their shapes: outputs that
// share memory with inputs, views the kernels cannot index (crops with nonzero mins, transposed
// or strided rows), enum values outside their enums, and allocations the machine cannot hold.
// Each was found giving wrong values without an error, or a crash, before it was checked.
#include <cmath>
#include <cstdint>

#include "hkfac/kernels/cost_model.h"
#include "hkfac/kernels/covariance.h"
#include "hkfac/kernels/dense.h"
#include "hkfac/kernels/diagonal.h"
#include "hkfac/kernels/gemm.h"
#include "hkfac/kernels/precondition.h"
#include "../test_util.h"

namespace hkfac {
namespace {

using kernels::Activation;
using kernels::Transpose;
using testing::expect_error_containing;
using testing::expect_error_naming;
using testing::random_matrix;
using testing::to_eigen_d;

constexpr Device kCpu = Device::cpu;

// Columns [first, first + count) of a matrix buffer, as a view indexed from 0.
Buffer<float> column_block(Buffer<float> &m, int first, int count) {
  Buffer<float> v = m.cropped(0, first, count);
  v.set_min(0, 0);
  return v;
}

// Rows [first, first + count), indexed from 0.
Buffer<float> row_block(Buffer<float> &m, int first, int count) {
  Buffer<float> v = m.cropped(1, first, count);
  v.set_min(0, 0);
  return v;
}

TEST(KernelArguments, OutputsOverInputsAreRefusedNamingBoth) {
  Buffer<float> a = random_matrix(64, 64, 1), b = random_matrix(64, 64, 2);
  // Both gemm and the dense layers gave wrong values here (differences of 38 and 2) at n = 64.
  expect_error_containing("'C' shares memory with argument 'A'", [&] {
    kernels::gemm(a, a, Transpose::no, b, Transpose::no, 1.0f, 0.0f, kCpu);
  });
  expect_error_containing("'C' shares memory with argument 'B'", [&] {
    kernels::gemm(b, a, Transpose::no, b, Transpose::yes, 1.0f, 0.0f, kCpu);
  });
  Buffer<float> bias = random_matrix(1, 64, 3).sliced(1, 0);
  expect_error_containing("'Y' shares memory with argument 'X'",
                          [&] { kernels::dense_forward(a, a, b, bias, Activation::tanh, kCpu); });
  Buffer<float> dz = make_matrix<float>(64, 64), dw = make_matrix<float>(64, 64);
  Buffer<float> db = make_vector<float>(64), dy = random_matrix(64, 64, 4);
  expect_error_containing("'dX' shares memory with argument 'X'", [&] {
    kernels::dense_backward(dz, a, dw, db, dy, b, a, b, Activation::tanh, kCpu);
  });
  expect_error_containing("'dZ' shares memory with argument 'dW'", [&] {
    kernels::dense_backward(dz, a, dz, db, dy, b, b, b, Activation::tanh, kCpu);
  });
  Buffer<float> u = make_matrix<float>(64, 64);
  expect_error_containing("'U' shares memory with argument 'G_inv'",
                          [&] { kernels::kron_precondition(b, a, u, b, kCpu); });
  // C over X (a square X, without the ones column, fits C's shape).
  expect_error_containing("'C' shares memory with argument 'X'",
                          [&] { kernels::covariance_update(a, a, 0.5f, 1.0f, false, kCpu); });
  // d over g's first row.
  Buffer<float> g_first_row = a.sliced(1, 0);
  expect_error_containing("'d' shares memory with argument 'g'",
                          [&] { kernels::diagonal_ema(g_first_row, a, 0.5f, 1.0f, kCpu); });
  // A partial overlap: the output is the input shifted by one element.
  Buffer<float> flat = random_matrix(1, 65, 5).sliced(1, 0);
  Buffer<float> lo = flat.cropped(0, 0, 64), hi = flat.cropped(0, 1, 64);
  hi.set_min(0);
  Buffer<float> diag = random_matrix(1, 64, 6).sliced(1, 0);
  for (int i = 0; i < 64; ++i)
    diag(i) = std::abs(diag(i)) + 0.5f;
  expect_error_containing("'u' shares memory with argument 'g'",
                          [&] { kernels::diagonal_matpower(hi, lo, diag, 0.1f, -1, kCpu); });
  // The cost model's predictions over a weight of the same extent.
  kernels::CostModelWeights w = kernels::make_cost_model_weights(39);
  Buffer<float> pipeline(40, 7, 1), schedules(8, 39, 1);
  fill(pipeline, 0.5f);
  fill(schedules, 0.5f);
  expect_error_containing("'predictions' shares memory with argument 'head1_bias'", [&] {
    kernels::cost_model_predict(pipeline, schedules, w, 2, w.head1_bias, kCpu);
  });
}

// The one overlap a kernel allows: diagonal_matpower's u = g (elementwise, in place).
TEST(KernelArguments, DiagonalMatpowerInPlaceStillComputesTheProduct) {
  Buffer<float> g = random_matrix(1, 129, 7).sliced(1, 0),
                d = random_matrix(1, 129, 8).sliced(1, 0);
  for (int i = 0; i < 129; ++i)
    d(i) = std::abs(d(i)) + 0.5f;
  Buffer<float> expected = make_vector<float>(129);
  kernels::diagonal_matpower(expected, g, d, 0.25f, -1, kCpu);
  kernels::diagonal_matpower(g, g, d, 0.25f, -1, kCpu);
  for (int i = 0; i < 129; ++i)
    EXPECT_EQ(g(i), expected(i)) << i;
}

// Column blocks of one matrix interleave in memory without sharing an element: the overlap check
// resolves rows of one stride exactly, so a product from the left block into the right one runs
// (and is right), while blocks that do share elements are refused.
TEST(KernelArguments, DisjointBlocksOfOneMatrixAreAccepted) {
  Buffer<float> m = random_matrix(129, 200, 9);
  Buffer<float> left = column_block(m, 0, 100), right = column_block(m, 100, 100);
  Buffer<float> w = random_matrix(100, 100, 10);
  const Eigen::MatrixXd expected = to_eigen_d(left) * to_eigen_d(w);
  kernels::gemm(right, left, Transpose::no, w, Transpose::no, 1.0f, 0.0f, kCpu);
  EXPECT_LT((to_eigen_d(right) - expected).norm(), 1e-4 * expected.norm());

  Buffer<float> overlapping = column_block(m, 99, 100);
  expect_error_containing("'C' shares memory with argument 'A'", [&] {
    kernels::gemm(overlapping, left, Transpose::no, w, Transpose::no, 1.0f, 0.0f, kCpu);
  });
  // Rows 0-63 against rows 64-128 of the same columns: disjoint; rows 60-123: not.
  Buffer<float> top = row_block(m, 0, 64), bottom = row_block(m, 64, 64),
                mid = row_block(m, 60, 64);
  Buffer<float> sq = random_matrix(200, 200, 11);
  kernels::gemm(bottom, top, Transpose::no, sq, Transpose::no, 1.0f, 0.0f, kCpu);
  expect_error_containing("'C' shares memory with argument 'A'", [&] {
    kernels::gemm(mid, top, Transpose::no, sq, Transpose::no, 1.0f, 0.0f, kCpu);
  });
}

TEST(KernelArguments, CropsAndTransposedViewsAreRefusedNamingTheArgument) {
  Buffer<float> x = random_matrix(40, 33, 12), w = random_matrix(33, 20, 13);
  Buffer<float> c = make_matrix<float>(20, 20);
  // Rows 3.. of a matrix, keeping Halide's min of 3: Halide's own assertion named its internal
  // parameter ('x', 'c_in') and only for some variants.
  Buffer<float> crop = x.cropped(1, 3, 20);
  expect_error_containing("argument 'A' starts at index 3 in dimension 1", [&] {
    kernels::gemm(c, crop, Transpose::no, w, Transpose::no, 1.0f, 0.0f, kCpu);
  });
  Buffer<float> cov = make_matrix<float>(34, 34);
  expect_error_naming("X", [&] { kernels::covariance_update(cov, crop, 1.0f, 1.0f, true, kCpu); });
  // A transposed view: refused whether or not its pointer is aligned (an unaligned one used to
  // be staged into a dense copy and run; an aligned one failed inside Halide).
  Buffer<float> wt = random_matrix(20, 33, 14).transposed(0, 1);
  expect_error_containing("argument 'B' has stride 33 in dimension 0", [&] {
    kernels::gemm(c, row_block(x, 0, 20), Transpose::no, wt, Transpose::no, 1.0f, 0.0f, kCpu);
  });
  Buffer<float> wide = random_matrix(21, 34, 15);
  Buffer<float> unaligned_t = column_block(wide, 1, 20).transposed(0, 1);
  ASSERT_NE(reinterpret_cast<uintptr_t>(unaligned_t.data()) % 64, 0u);
  expect_error_naming("B", [&] {
    kernels::gemm(c, row_block(x, 0, 20), Transpose::no, unaligned_t, Transpose::no, 1.0f, 0.0f,
                  kCpu);
  });
}

TEST(KernelArguments, ValuesOutsideTheirEnumsAreRefused) {
  Buffer<float> a = random_matrix(8, 8, 16), b = random_matrix(8, 8, 17),
                c = make_matrix<float>(8, 8);
  expect_error_naming("tb", [&] {
    kernels::gemm(c, a, Transpose::no, b, static_cast<Transpose>(5), 1.0f, 0.0f, kCpu);
  });
  Buffer<float> bias = make_vector<float>(8);
  expect_error_naming(
      "act", [&] { kernels::dense_forward(c, a, b, bias, static_cast<Activation>(9), kCpu); });
  // Device(7) ran on the CPU.
  expect_error_containing("invalid hkfac::Device value 7", [&] {
    kernels::gemm(c, a, Transpose::no, b, Transpose::no, 1.0f, 0.0f, static_cast<Device>(7));
  });
}

TEST(KernelArguments, AMatrixTooLargeForTheMachineIsAnError) {
#if defined(HKFAC_SANITIZE)
  GTEST_SKIP() << "AddressSanitizer aborts on an impossible request instead of returning null";
#else
  // 512 TB, beyond the 47-bit address space, so no overcommit policy can grant it: Halide's
  // Buffer used malloc's null and crashed in the zero fill.
  expect_error_containing("make_matrix: cannot allocate 16777216 x 8388608",
                          [] { make_matrix<float>(1 << 24, 1 << 23); });
#endif
}

} // namespace
} // namespace hkfac
