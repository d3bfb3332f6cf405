// The cuSOLVER route for factor inverses: the probe explains itself; on a GPU, results match Eigen.
#include <gtest/gtest.h>

#include <Eigen/Cholesky>
#include <Eigen/Eigenvalues>
#include <random>

#include "hkfac/cusolver.h"
#include "hkfac/device.h"
#include "hkfac/error.h"

namespace hkfac {
namespace {

using Eigen::MatrixXd;

// A random symmetric positive definite matrix: BᵀB / n plus a small ridge, like a damped factor.
MatrixXd random_spd(int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> g;
  MatrixXd b(n + 3, n);
  for (Eigen::Index i = 0; i < b.size(); i++)
    b.data()[i] = g(rng);
  MatrixXd m = b.transpose() * b / n;
  m.diagonal().array() += 1e-3;
  return m;
}

// A macro: GTEST_SKIP only leaves the function it is written in.
#define SKIP_UNLESS_CUSOLVER_USABLE()                                                              \
  if (!cusolver::status().usable)                                                                  \
  GTEST_SKIP() << "cuSOLVER not usable: " << cusolver::status().reason

TEST(Cusolver, ProbeIsConsistentAndExplainsItself) {
  const cusolver::Status &s = cusolver::status();
  if (!cuda_status().usable) {
    EXPECT_FALSE(s.usable);
  }
  if (s.usable)
    return;
  EXPECT_FALSE(s.reason.empty());
  MatrixXd m = MatrixXd::Identity(2, 2);
  try {
    cusolver::spd_inverse(m.data(), 2);
    FAIL() << "spd_inverse ran without a usable cuSOLVER";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find(s.reason), std::string::npos) << e.what();
  }
}

TEST(Cusolver, SpdInverseMatchesEigenOnAwkwardSizes) {
  SKIP_UNLESS_CUSOLVER_USABLE();
  for (int n : {1, 7, 129, 1001}) {
    const MatrixXd m = random_spd(n, 100 + n);
    MatrixXd inv = m;
    ASSERT_TRUE(cusolver::spd_inverse(inv.data(), n)) << "n=" << n;
    const MatrixXd ref = m.llt().solve(MatrixXd::Identity(n, n));
    EXPECT_LT((inv - ref).norm() / ref.norm(), 1e-9) << "n=" << n;
    EXPECT_EQ(inv, inv.transpose()) << "the inverse must be exactly symmetric, n=" << n;
  }
}

TEST(Cusolver, SpdInverseReportsAnIndefiniteMatrix) {
  SKIP_UNLESS_CUSOLVER_USABLE();
  MatrixXd m = random_spd(9, 3);
  m(4, 4) = -1.0; // a negative pivot: not positive definite
  EXPECT_FALSE(cusolver::spd_inverse(m.data(), 9));
}

TEST(Cusolver, SymmetricEigenMatchesEigenAndReconstructs) {
  SKIP_UNLESS_CUSOLVER_USABLE();
  for (int n : {1, 7, 257}) {
    const MatrixXd m = random_spd(n, 200 + n);
    MatrixXd q = m;
    Eigen::VectorXd w(n);
    ASSERT_TRUE(cusolver::symmetric_eigen(q.data(), w.data(), n)) << "n=" << n;
    Eigen::SelfAdjointEigenSolver<MatrixXd> ref(m);
    EXPECT_LT((w - ref.eigenvalues()).norm() / ref.eigenvalues().norm(), 1e-10) << "n=" << n;
    const MatrixXd back = q * w.asDiagonal() * q.transpose();
    EXPECT_LT((back - m).norm() / m.norm(), 1e-10) << "n=" << n;
  }
}

} // namespace
} // namespace hkfac
