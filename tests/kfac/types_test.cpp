// Parameter-list arithmetic: the vectorised double sums against a naive long double sum, combine,
// and the finiteness check against a non-finite value at every kind of position (lane, tail,
// tensor).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "hkfac/error.h"
#include "hkfac/kfac/types.h"

namespace hkfac::kfac {
namespace {

// Sizes below, at and past one vector of lanes, and a large tensor with a ragged tail.
Params random_params(unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 3.0f);
  Params p;
  for (auto [r, c] : {std::pair{1, 1}, {1, 15}, {1, 16}, {1, 17}, {37, 1000}, {3, 33}}) {
    Matrix m(r, c);
    for (Eigen::Index i = 0; i < m.size(); ++i)
      m.data()[i] = n(rng);
    p.push_back(m);
  }
  return p;
}

long double naive_dot(const Params &a, const Params &b) {
  long double s = 0.0L;
  for (size_t t = 0; t < a.size(); ++t) {
    for (Eigen::Index i = 0; i < a[t].size(); ++i)
      s += static_cast<long double>(a[t].data()[i]) * b[t].data()[i];
  }
  return s;
}

TEST(ParamsArithmetic, DotAndSquaredNormMatchANaiveSum) {
  const Params a = random_params(1), b = random_params(2);
  const long double ab = naive_dot(a, b), aa = naive_dot(a, a);
  EXPECT_NEAR(dot(a, b), static_cast<double>(ab), 1e-12 * std::sqrt(static_cast<double>(aa)) *
                                                       std::sqrt(squared_norm(b)));
  EXPECT_NEAR(squared_norm(a), static_cast<double>(aa), 1e-12 * static_cast<double>(aa));
  // Every element counts, the tails included: change the last one of each tensor in turn.
  for (size_t t = 0; t < a.size(); ++t) {
    Params c = a;
    c[t].data()[c[t].size() - 1] += 1.0f;
    EXPECT_NE(squared_norm(c), squared_norm(a)) << "tensor " << t;
    EXPECT_NE(dot(c, b), dot(a, b)) << "tensor " << t;
  }
}

TEST(ParamsArithmetic, SumsInDoubleNotFloat) {
  // (1 + 2^-20)^2 = 1 + 2^-19 + 2^-40: a float square or float sum drops the 2^-40.
  Params p{Matrix::Constant(1, 40, 1.0f)};
  p[0](0, 39) = 1.0f + std::ldexp(1.0f, -20);
  EXPECT_DOUBLE_EQ(squared_norm(p) - 40.0, std::ldexp(1.0, -19) + std::ldexp(1.0, -40));
}

TEST(ParamsArithmetic, AllFiniteFindsEveryNonFiniteValue) {
  const Params p = random_params(3);
  EXPECT_TRUE(all_finite(p));
  Params extreme = p;
  extreme[4](0, 0) = std::numeric_limits<float>::max();
  extreme[4](1, 0) = -std::numeric_limits<float>::max();
  extreme[4](2, 0) = std::numeric_limits<float>::denorm_min();
  EXPECT_TRUE(all_finite(extreme)) << "large and denormal values are finite";
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    for (size_t t = 0; t < p.size(); ++t) {
      for (Eigen::Index i : {Eigen::Index{0}, p[t].size() / 2, p[t].size() - 1}) {
        Params q = p;
        q[t].data()[i] = bad;
        EXPECT_FALSE(all_finite(q)) << bad << " at tensor " << t << " element " << i;
      }
    }
  }
}

TEST(ParamsArithmetic, CombineIsElementwiseAlphaXPlusBetaY) {
  const Params x = random_params(5), y = random_params(6);
  const Params z = combine(0.5f, x, -2.0f, y);
  ASSERT_EQ(z.size(), x.size());
  for (size_t t = 0; t < x.size(); ++t) {
    ASSERT_EQ(z[t].rows(), x[t].rows());
    ASSERT_EQ(z[t].cols(), x[t].cols());
    for (Eigen::Index i = 0; i < x[t].size(); ++i) {
      EXPECT_FLOAT_EQ(z[t].data()[i], 0.5f * x[t].data()[i] - 2.0f * y[t].data()[i])
          << "tensor " << t << " element " << i;
    }
  }
  Params short_y = y;
  short_y.pop_back();
  EXPECT_THROW(combine(1.0f, x, 1.0f, short_y), Error);
}

TEST(ParamsArithmetic, MatrixDotIsTheOneTensorCase) {
  const Params a = random_params(7), b = random_params(8);
  EXPECT_DOUBLE_EQ(dot(a[4], b[4]), dot(Params{a[4]}, Params{b[4]}));
  EXPECT_NEAR(dot(a[4], b[4]), static_cast<double>(naive_dot({a[4]}, {b[4]})), 1e-9);
  EXPECT_THROW(dot(a[4], b[5]), Error);
}

TEST(ParamsArithmetic, DotRejectsMismatchedShapes) {
  const Params a = random_params(4);
  Params b = a;
  b[4].resize(1000, 37);
  EXPECT_THROW(dot(a, b), Error);
  b.pop_back();
  EXPECT_THROW(dot(a, b), Error);
}

} // namespace
} // namespace hkfac::kfac
