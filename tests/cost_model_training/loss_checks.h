// What the training losses' tests share: a column of values, and the check of a loss's curvature
// products against a reference Gauss–Newton matrix.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <initializer_list>
#include <random>

#include "hkfac/kfac/losses.h"

namespace hkfac::cost_model {

inline kfac::Matrix column(std::initializer_list<float> v) {
  kfac::Matrix m(static_cast<Eigen::Index>(v.size()), 1);
  Eigen::Index i = 0;
  for (float x : v)
    m(i++, 0) = x;
  return m;
}

// multiply_fisher against gn · v for three random v, and multiply_hessian equal to it.
inline void expect_curvature_products(const kfac::LossFunction &loss, const Eigen::MatrixXd &gn) {
  const Eigen::Index b = gn.rows();
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (int trial = 0; trial < 3; ++trial) {
    kfac::Matrix v(b, 1);
    for (Eigen::Index n = 0; n < b; ++n)
      v(n, 0) = normal(rng);
    const Eigen::VectorXd want = gn * v.cast<double>();
    const kfac::Matrix fv = loss.multiply_fisher(v), hv = loss.multiply_hessian(v);
    for (Eigen::Index n = 0; n < b; ++n) {
      EXPECT_NEAR(fv(n, 0), want(n), 1e-4 * (1 + std::abs(want(n)))) << trial << " " << n;
      EXPECT_EQ(fv(n, 0), hv(n, 0));
    }
  }
}

} // namespace hkfac::cost_model
