// Parameter-list arithmetic: the vectorised double sums against a naive long double sum, combine,
// the one-pass Gram matrix and step, the finiteness check against a non-finite value at every
// kind of position (lane, tail, tensor), and the thread pool's passes against one thread.
#include <HalideRuntime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
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

// Past the size where passes go parallel (64K elements), with tensors that straddle chunks.
Params large_params(unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  Params p;
  for (auto [r, c] : {std::pair{1, 1}, {300, 1001}, {1, 17}, {129, 513}, {1, 32768}}) {
    Matrix m(r, c);
    for (Eigen::Index i = 0; i < m.size(); ++i)
      m.data()[i] = n(rng);
    p.push_back(m);
  }
  return p;
}

bool bitwise_equal(const Params &a, const Params &b) {
  if (a.size() != b.size())
    return false;
  for (size_t t = 0; t < a.size(); ++t) {
    if (a[t].rows() != b[t].rows() || a[t].cols() != b[t].cols() ||
        std::memcmp(a[t].data(), b[t].data(), sizeof(float) * a[t].size()) != 0)
      return false;
  }
  return true;
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

TEST(ParamsArithmetic, GramIsEveryPairwiseDot) {
  for (const auto &make : {random_params, large_params}) {
    const Params a = make(11), b = make(12), c = make(13), d = make(14), e = make(15);
    const Params *all[] = {&a, &b, &c, &d, &e};
    // Every list count the pass handles in one sweep (1-4), and one past it.
    for (int k = 1; k <= 5; ++k) {
      const std::vector<const Params *> lists(all, all + k);
      const Eigen::MatrixXd g = gram(lists);
      ASSERT_EQ(g.rows(), k);
      ASSERT_EQ(g.cols(), k);
      for (int i = 0; i < k; ++i) {
        for (int j = 0; j < k; ++j) {
          const double ref = static_cast<double>(naive_dot(*lists[i], *lists[j]));
          const double scale = std::sqrt(static_cast<double>(naive_dot(*lists[i], *lists[i])) *
                                         static_cast<double>(naive_dot(*lists[j], *lists[j])));
          EXPECT_NEAR(g(i, j), ref, 1e-12 * scale) << k << " lists: " << i << ", " << j;
        }
      }
    }
    const Eigen::MatrixXd g = gram({&a, &b, &c});
    EXPECT_EQ(g(0, 1), g(1, 0));
    EXPECT_EQ(gram({&a}).size(), 1);
    const double aa = squared_norm(a);
    EXPECT_NEAR(gram({&a})(0, 0), aa, 1e-13 * aa); // summed in another order
  }
  const Params a = random_params(1);
  Params short_a = a;
  short_a.pop_back();
  EXPECT_THROW(gram({&a, &short_a}), Error);
}

TEST(ParamsArithmetic, FormStepIsCombineTwiceWithItsSums) {
  for (const auto &make : {random_params, large_params}) {
    const Params x = make(21), y = make(22), base = make(23), g = make(24);
    Params delta, next;
    const StepSums s = form_step(-0.25f, x, 0.75f, y, base, g, delta, next);
    const Params want_delta = combine(-0.25f, x, 0.75f, y);
    EXPECT_TRUE(bitwise_equal(delta, want_delta));
    EXPECT_TRUE(bitwise_equal(next, combine(1.0f, base, 1.0f, want_delta)));
    const double dd = static_cast<double>(naive_dot(delta, delta));
    const double nn = static_cast<double>(naive_dot(next, next));
    EXPECT_NEAR(s.delta_squared_norm, dd, 1e-12 * dd);
    EXPECT_NEAR(s.next_squared_norm, nn, 1e-12 * nn);
    EXPECT_NEAR(s.g_dot_delta, static_cast<double>(naive_dot(g, delta)),
                1e-12 * std::sqrt(dd * static_cast<double>(naive_dot(g, g))));
    // A second step into the same lists reuses their storage.
    const float *delta_storage = delta[1].data(), *next_storage = next[1].data();
    form_step(1.0f, y, 0.0f, x, base, g, delta, next);
    EXPECT_EQ(delta[1].data(), delta_storage);
    EXPECT_EQ(next[1].data(), next_storage);
    EXPECT_TRUE(bitwise_equal(delta, combine(1.0f, y, 0.0f, x)));
    // A non-finite input shows in both squared norms.
    Params bad = x;
    bad[1](0, 0) = std::numeric_limits<float>::infinity();
    const StepSums b = form_step(1.0f, bad, 1.0f, y, base, g, delta, next);
    EXPECT_FALSE(std::isfinite(b.delta_squared_norm));
    EXPECT_FALSE(std::isfinite(b.next_squared_norm));
    Params short_g = g;
    short_g.pop_back();
    EXPECT_THROW(form_step(1.0f, x, 1.0f, y, base, short_g, delta, next), Error);
  }
}

TEST(ParamsArithmetic, ThreadPoolPassesEqualOneThreadBitForBit) {
  const Params a = large_params(31), b = large_params(32), c = large_params(33);
  struct Results {
    double dot_ab = 0, norm_a = 0;
    Eigen::MatrixXd gram_abc;
    Params combined, axpy_into, delta, next;
    StepSums sums;
  };
  auto run_all = [&]() {
    Results r;
    r.dot_ab = dot(a, b);
    r.norm_a = squared_norm(a);
    r.gram_abc = gram({&a, &b, &c});
    r.combined = combine(0.3f, a, -1.7f, b);
    r.axpy_into = c;
    axpy(0.1f, a, r.axpy_into);
    r.sums = form_step(0.5f, a, 0.25f, b, c, a, r.delta, r.next);
    return r;
  };
  const int before = halide_set_num_threads(1);
  const Results one = run_all();
  halide_set_num_threads(4);
  const Results many = run_all();
  halide_set_num_threads(before);
  EXPECT_EQ(one.dot_ab, many.dot_ab);
  EXPECT_EQ(one.norm_a, many.norm_a);
  EXPECT_TRUE(one.gram_abc == many.gram_abc);
  EXPECT_TRUE(bitwise_equal(one.combined, many.combined));
  EXPECT_TRUE(bitwise_equal(one.axpy_into, many.axpy_into));
  EXPECT_TRUE(bitwise_equal(one.delta, many.delta));
  EXPECT_TRUE(bitwise_equal(one.next, many.next));
  EXPECT_EQ(one.sums.delta_squared_norm, many.sums.delta_squared_norm);
  EXPECT_EQ(one.sums.g_dot_delta, many.sums.g_dot_delta);
  EXPECT_EQ(one.sums.next_squared_norm, many.sums.next_squared_norm);
  // And the parallel results are right, not only reproducible.
  for (size_t t = 0; t < a.size(); ++t) {
    for (Eigen::Index i = 0; i < a[t].size(); i += 997) {
      // To a float rounding of the terms: the library may fuse the multiply-adds where this
      // file does not.
      const float x = a[t].data()[i], y = b[t].data()[i], z = c[t].data()[i];
      ASSERT_NEAR(many.combined[t].data()[i], 0.3f * x - 1.7f * y,
                  1e-6f * (std::abs(0.3f * x) + std::abs(1.7f * y)));
      ASSERT_NEAR(many.axpy_into[t].data()[i], z + 0.1f * x,
                  1e-6f * (std::abs(z) + std::abs(0.1f * x)));
    }
  }
}

} // namespace
} // namespace hkfac::kfac
