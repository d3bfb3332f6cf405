// Covariance update against a double-precision Eigen reference, on CPU and (when present) CUDA.
#include "hkfac/kernels/covariance.h"

#include <cstring>
#include <limits>

#include "test_util.h"

namespace hkfac {
namespace {

using testing::exactly_symmetric;
using testing::random_matrix;
using testing::random_symmetric;
using testing::rel_error;
using testing::to_eigen_d;

// a*C + b*X̄ᵀX̄ in double, X̄ = [X, 1] when homogeneous.
Eigen::MatrixXd reference(const Eigen::MatrixXd &c0, const Eigen::MatrixXd &x, double a, double b,
                          bool homogeneous) {
  Eigen::MatrixXd xbar(x.rows(), x.cols() + (homogeneous ? 1 : 0));
  xbar.leftCols(x.cols()) = x;
  if (homogeneous)
    xbar.rightCols(1).setOnes();
  return a * c0 + b * xbar.transpose() * xbar;
}

// One update of a random symmetric C by a random n x d X against the reference: within the
// batch-scaled tolerance and exactly symmetric.
void expect_update_matches(Device dev, int d, int n, bool homogeneous, float a, float b,
                           unsigned x_seed, unsigned c_seed) {
  Buffer<float> x = random_matrix(n, d, x_seed);
  Buffer<float> c = random_symmetric(d + (homogeneous ? 1 : 0), c_seed);
  const Eigen::MatrixXd ref = reference(to_eigen_d(c), to_eigen_d(x), a, b, homogeneous);
  kernels::covariance_update(c, x, a, b, homogeneous, dev);
  to_host(c);
  EXPECT_LT(rel_error(to_eigen_d(c), ref), 2e-6 * std::sqrt(double(n)))
      << "d=" << d << " n=" << n << " homogeneous=" << homogeneous;
  EXPECT_TRUE(exactly_symmetric(c)) << "d=" << d << " n=" << n << " homogeneous=" << homogeneous;
}

class CovarianceKernels : public ::testing::TestWithParam<Device> {};

TEST_P(CovarianceKernels, InPlaceUpdateMatchesEigenAndIsExactlySymmetric) {
  const Device dev = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  const float a = 0.9f, b = 0.3f;
  for (bool homogeneous : {false, true}) {
    for (int d : {1, 7, 129, 1001}) {
      for (int n : {1, 7, 128, 1000}) {
        // The two largest shapes together are slow in the double reference; one of them suffices.
        if (d == 1001 && n == 1000 && homogeneous)
          continue;
        const int dc = d + (homogeneous ? 1 : 0);
        Buffer<float> x = random_matrix(n, d, 31 * d + n);
        Buffer<float> c = random_symmetric(dc, 17 * d + n);
        const Eigen::MatrixXd ref = reference(to_eigen_d(c), to_eigen_d(x), a, b, homogeneous);
        kernels::covariance_update(c, x, a, b, homogeneous, dev);
        to_host(c);
        // Sums of n products of values in [-1, 1]: scale the tolerance with the batch.
        EXPECT_LT(rel_error(to_eigen_d(c), ref), 2e-6 * std::sqrt(double(n)))
            << "d=" << d << " n=" << n << " homogeneous=" << homogeneous;
        EXPECT_TRUE(exactly_symmetric(c))
            << "d=" << d << " n=" << n << " homogeneous=" << homogeneous;
      }
    }
  }
}

TEST_P(CovarianceKernels, WidthsAroundOneTileMatchEigen) {
  const Device dev = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  // The kernel vectorises whole rows of X from 16 columns; the GPU switches from its untiled to
  // its tiled variant at 32 and tiles columns in 32s with an edge strip for the rest (the CPU
  // switches at 160, below).
  for (int d : {15, 16, 20, 31, 32, 33, 63, 64, 65}) {
    for (bool homogeneous : {false, true}) {
      Buffer<float> x = random_matrix(5, d, d);
      Buffer<float> c = random_symmetric(d + (homogeneous ? 1 : 0), d + 1);
      const Eigen::MatrixXd ref = reference(to_eigen_d(c), to_eigen_d(x), 1.5, -0.5, homogeneous);
      kernels::covariance_update(c, x, 1.5f, -0.5f, homogeneous, dev);
      to_host(c);
      EXPECT_LT(rel_error(to_eigen_d(c), ref), 1e-5) << "d=" << d << " homogeneous=" << homogeneous;
      EXPECT_TRUE(exactly_symmetric(c)) << "d=" << d << " homogeneous=" << homogeneous;
    }
  }
}

TEST_P(CovarianceKernels, WidthsUnderOneVectorMatchEigen) {
  const Device dev = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  // On the CPU, X narrower than one vector (8 columns with AVX2, 16 with AVX-512) is copied into
  // a zero-padded block; 8 and 16 columns are one whole vector, 9 and 17 a vector and a shifted
  // one. Batches of one row, of fewer rows than the block has, and of many.
  for (int d = 1; d <= 17; ++d) {
    for (int n : {1, 6, 300}) {
      for (bool homogeneous : {false, true})
        expect_update_matches(dev, d, n, homogeneous, 0.7f, 0.6f, 7 * d + n, 3 * d + n);
    }
  }
}

// On the CPU, X narrower than a vector with dense rows and at least a vector of values (n * d >=
// 16 with AVX-512, 8 with AVX2) is read in place, each row as one vector that reaches into the
// rows after it; its last rows are read through a clamped index. Every width, around the row
// count where that switch happens and where the last rows are all of X, plus a long batch.
TEST_P(CovarianceKernels, NarrowWidthsOverEveryRowCountMatchEigen) {
  const Device dev = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  for (int d = 1; d <= 16; ++d) {
    for (int n = 1; n <= 20; ++n) {
      for (bool homogeneous : {false, true})
        expect_update_matches(dev, d, n, homogeneous, 0.8f, 0.4f, 11 * d + n, 5 * d + n);
    }
    expect_update_matches(dev, d, 1000, true, 0.95f, 0.05f, d, d + 1);
  }
}

// A narrow X whose rows are not back to back (a view of some columns of a wider matrix) is not
// read as consecutive rows: its values must still be its own, not the hidden columns'. From the
// first column the view keeps its strides (the padded-copy path); from the third its start is
// not vector-aligned, and the dispatch stages it into a dense aligned copy (the in-place path).
TEST_P(CovarianceKernels, NarrowViewsOfWiderMatricesMatchEigen) {
  const Device dev = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  for (int first : {0, 2}) {
    for (int d : {1, 3, 7, 12}) {
      for (int n : {5, 300}) {
        Buffer<float> wide = random_matrix(n, d + 9, 13 * d + n);
        Buffer<float> x = wide.cropped(0, first, d);
        x.translate(0, -first); // the kernels take matrices whose coordinates start at 0
        Buffer<float> c = random_symmetric(d + 1, d);
        const Eigen::MatrixXd ref = reference(to_eigen_d(c), to_eigen_d(x), 0.9, 0.2, true);
        kernels::covariance_update(c, x, 0.9f, 0.2f, true, dev);
        to_host(c);
        EXPECT_LT(rel_error(to_eigen_d(c), ref), 2e-6 * std::sqrt(double(n)))
            << "first=" << first << " d=" << d << " n=" << n;
        EXPECT_TRUE(exactly_symmetric(c)) << "first=" << first << " d=" << d << " n=" << n;
      }
    }
  }
}

TEST_P(CovarianceKernels, WidthsAroundTheCpuTiledSwitchMatchEigen) {
  const Device dev = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  // On the CPU, X narrower than 160 columns takes the untiled variant, whose rows of blocks run
  // on both cores from 200k n·d² and 256 rows: 5 rows stay on one core at every width here, 300
  // rows split from 26 columns; 159, 160 and 161 straddle the switch to the tiles.
  for (int d : {24, 40, 57, 79, 127, 159, 160, 161}) {
    for (int n : {5, 300}) {
      for (bool homogeneous : {false, true})
        expect_update_matches(dev, d, n, homogeneous, 0.9f, 0.4f, 5 * d + n, 2 * d + n);
    }
  }
}

TEST_P(CovarianceKernels, WidthsAroundTheWideTilesMatchEigen) {
  const Device dev = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  // On the CPU, X from 480 columns takes the wide tiles (48 columns with AVX-512, 24 with AVX2):
  // 479 stays below the switch; 480 and 528 are whole numbers of wide tiles at either width (no
  // strip, or the ones column alone); 481 and 527 leave the narrowest and the widest strips.
  // Batches inside one 128-row chunk of the tile products and one row past it.
  for (int d : {479, 480, 481, 527, 528}) {
    for (int n : {5, 129}) {
      for (bool homogeneous : {false, true})
        expect_update_matches(dev, d, n, homogeneous, 0.8f, 0.2f, d + n, 3 * d);
    }
  }
}

TEST_P(CovarianceKernels, RepeatedUpdatesAccumulateTheEma) {
  const Device dev = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  const int d = 40, n = 16;
  Buffer<float> c = random_symmetric(d + 1, 5);
  Eigen::MatrixXd ref = to_eigen_d(c);
  for (int step = 0; step < 3; step++) {
    Buffer<float> x = random_matrix(n, d, 100 + step);
    ref = reference(ref, to_eigen_d(x), 0.5, 2.0, true);
    kernels::covariance_update(c, x, 0.5f, 2.0f, true, dev);
  }
  to_host(c);
  EXPECT_LT(rel_error(to_eigen_d(c), ref), 1e-5);
  EXPECT_TRUE(exactly_symmetric(c));
}

// More rows than one call reduces on the CPU (the dispatch blocks the reduction by 1024 rows, the
// last block shorter): a in the first block only, the blocks' sums all added.
TEST_P(CovarianceKernels, LongBatchesMatchEigen) {
  const Device dev = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  for (int d : {3, 7, 20, 45}) {
    const int n = 2 * 1024 + 37;
    Buffer<float> x = random_matrix(n, d, 7 * d);
    Buffer<float> c = random_symmetric(d + 1, d);
    const Eigen::MatrixXd ref = reference(to_eigen_d(c), to_eigen_d(x), 0.7, 0.01, true);
    kernels::covariance_update(c, x, 0.7f, 0.01f, true, dev);
    to_host(c);
    EXPECT_LT(rel_error(to_eigen_d(c), ref), 2e-6 * std::sqrt(double(n))) << "d=" << d;
    EXPECT_TRUE(exactly_symmetric(c)) << "d=" << d;
  }
}

// covariance_update_upper: the upper triangle (column >= row) as the full update computes it,
// bit for bit, and against the reference, with NaN in C's strictly lower triangle on entry (the
// upper entries must not read it). Widths on every variant: narrow, untiled, both sides of the
// CPU's tiled (160) and wide (480) switches with and without a strip; batches inside one chunk of
// the tile products, one row past it, and past the dispatch's 1024-row reduction blocks.
TEST_P(CovarianceKernels, UpperTriangleMatchesTheFullUpdateWhateverTheLowerHolds) {
  const Device dev = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  struct Shape {
    int d, n;
  };
  const Shape shapes[] = {
      {1, 5},   {7, 129},   {20, 5},  {33, 129},   {129, 5},           {161, 129},
      {479, 5}, {481, 129}, {528, 5}, {1001, 128}, {45, 2 * 1024 + 37}};
  for (Shape s : shapes) {
    for (bool homogeneous : {false, true}) {
      const int dc = s.d + (homogeneous ? 1 : 0);
      Buffer<float> x = random_matrix(s.n, s.d, 3 * s.d + s.n);
      Buffer<float> full = random_symmetric(dc, s.d + 2 * s.n);
      const Eigen::MatrixXd ref = reference(to_eigen_d(full), to_eigen_d(x), 0.9, 0.3, homogeneous);
      Buffer<float> upper = copy_of(full);
      for (int i = 0; i < dc; ++i) {
        for (int j = 0; j < i; ++j)
          upper(j, i) = std::numeric_limits<float>::quiet_NaN(); // row i, column j < i
      }
      kernels::covariance_update(full, x, 0.9f, 0.3f, homogeneous, dev);
      kernels::covariance_update_upper(upper, x, 0.9f, 0.3f, homogeneous, dev);
      to_host(full);
      to_host(upper);
      Eigen::MatrixXd got = to_eigen_d(upper);
      got.triangularView<Eigen::StrictlyLower>() = ref.triangularView<Eigen::StrictlyLower>();
      const std::string what = "d=" + std::to_string(s.d) + " n=" + std::to_string(s.n) +
                               " homogeneous=" + std::to_string(homogeneous);
      EXPECT_LT(rel_error(got, ref), 2e-6 * std::sqrt(double(s.n))) << what;
      int differing = 0;
      for (int i = 0; i < dc; ++i) {
        for (int j = i; j < dc; ++j)
          differing += std::memcmp(&upper(j, i), &full(j, i), sizeof(float)) != 0;
      }
      EXPECT_EQ(differing, 0) << what << ": upper entries not bitwise equal to the full update's";
    }
  }
}

// At n = 128 the tiled upper form leaves the tiles below the diagonal alone: the point of it.
TEST_P(CovarianceKernels, UpperUpdateOfALargeFactorLeavesTheLowerTilesAsTheyWere) {
  const Device dev = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  const int d = 600;
  Buffer<float> x = random_matrix(128, d, 4);
  Buffer<float> c = make_matrix<float>(d + 1, d + 1);
  fill(c, -7.0f);
  kernels::covariance_update_upper(c, x, 0.5f, 1.0f, true, dev);
  to_host(c);
  // Row d, the ones row, is below the diagonal everywhere left of the corner, and more than a
  // tile below it in its first columns.
  EXPECT_EQ(c(0, d), -7.0f);
  EXPECT_NE(c(d, 0), -7.0f); // its mirror, the ones column, was written
}

TEST(CovarianceKernelsErrors, ShapeMismatchNamesTheArgument) {
  auto expect_names = [](Buffer<float> &c, const Buffer<float> &x, bool homogeneous,
                         const std::string &arg) {
    // Both functions; the upper one names itself, not the full update it shares its code with.
    for (bool upper : {false, true}) {
      try {
        (upper ? kernels::covariance_update_upper
               : kernels::covariance_update)(c, x, 1.0f, 1.0f, homogeneous, Device::cpu);
        FAIL() << "expected hkfac::Error for '" << arg << "'" << (upper ? " (upper)" : "");
      } catch (const Error &e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("'" + arg + "'"), std::string::npos) << m;
        if (upper) {
          EXPECT_NE(m.find("covariance_update_upper"), std::string::npos) << m;
        }
      }
    }
  };
  Buffer<float> x = make_matrix<float>(10, 4);
  Buffer<float> c4 = make_matrix<float>(4, 4), c5 = make_matrix<float>(5, 5);
  Buffer<float> c45 = make_matrix<float>(4, 5);
  expect_names(c4, x, true, "C");  // homogeneous needs 5 x 5
  expect_names(c5, x, false, "C"); // plain needs 4 x 4
  expect_names(c45, x, false, "C");
  Buffer<float> x1 = make_vector<float>(4);
  expect_names(c4, x1, false, "X");
}

INSTANTIATE_TEST_SUITE_P(AllDevices, CovarianceKernels, ::testing::ValuesIn(testing::all_devices()),
                         testing::device_param_name);

} // namespace
} // namespace hkfac
