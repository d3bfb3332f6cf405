// The top-choice loss: its gradient and curvature against finite differences and a softmax
// written out here, and that it is about the top of a ranking.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "hkfac/cost_model/top_choice_loss.h"
#include "hkfac/error.h"
#include "loss_checks.h"

namespace hkfac::cost_model {
namespace {

double total(const TopChoiceLoss &l) { return l.values().sum(); }

// The loss in double, from its definition: -Σ Q_n log P_n with Q, P softmaxes of -log(x)/τ.
double reference_loss(const Eigen::VectorXd &p, const Eigen::VectorXd &t, double tau) {
  const Eigen::ArrayXd zp = -p.array().log() / tau, zt = -t.array().log() / tau;
  const Eigen::ArrayXd q = zt.exp() / zt.exp().sum();
  const Eigen::ArrayXd log_p = zp - std::log(zp.exp().sum());
  return -(q * log_p).sum();
}

TEST(TopChoiceLoss, ValueAndGradientMatchTheDefinitionAndFiniteDifferences) {
  const kfac::Matrix p = column({2.0f, 0.7f, 1.5f, 3.0f, 0.9f});
  const kfac::Matrix t = column({4.0f, 1.0f, 2.5f, 9.0f, 1.2f});
  const double tau = 0.3;
  const TopChoiceLoss loss(p, &t, static_cast<float>(tau), 0.5f);
  // 1e-6: the loss holds τ as a float.
  EXPECT_NEAR(total(loss), 0.5 * reference_loss(p.cast<double>(), t.cast<double>(), tau), 1e-6);
  const kfac::Matrix g = loss.gradient();
  for (Eigen::Index n = 0; n < p.rows(); ++n) {
    const double h = 1e-5 * p(n, 0);
    Eigen::VectorXd up = p.cast<double>(), down = p.cast<double>();
    up(n) += h;
    down(n) -= h;
    const double fd = 0.5 * (reference_loss(up, t.cast<double>(), tau) -
                             reference_loss(down, t.cast<double>(), tau)) /
                      (2 * h);
    EXPECT_NEAR(g(n, 0), fd, 1e-4 * (1.0 + std::abs(fd))) << "schedule " << n;
  }
}

// Jᵀ H_z J: J = dz/dp and H_z = d(P - Q)/dz both by central differences, the latter of a
// softmax written out here.
Eigen::MatrixXd gauss_newton(const Eigen::VectorXd &p, double tau, double w) {
  const Eigen::Index b = p.size();
  const auto softmax = [](const Eigen::VectorXd &z) {
    const Eigen::VectorXd e = z.array().exp();
    return Eigen::VectorXd(e / e.sum());
  };
  const Eigen::VectorXd z = -p.array().log() / tau;
  Eigen::MatrixXd hz(b, b);
  Eigen::MatrixXd J = Eigen::MatrixXd::Zero(b, b);
  for (Eigen::Index k = 0; k < b; ++k) {
    const double h = 1e-6;
    Eigen::VectorXd up = z, down = z;
    up(k) += h;
    down(k) -= h;
    hz.col(k) = (softmax(up) - softmax(down)) / (2 * h);
    const double hp = 1e-6 * p(k);
    J(k, k) = (-std::log(p(k) + hp) / tau + std::log(p(k) - hp) / tau) / (2 * hp);
  }
  return w * J.transpose() * hz * J;
}

TEST(TopChoiceLoss, CurvatureIsTheGaussNewtonMatrixThroughTheLogits) {
  const kfac::Matrix p = column({2.0f, 0.7f, 1.5f, 3.0f});
  const kfac::Matrix t = column({4.0f, 1.0f, 2.5f, 9.0f});
  const TopChoiceLoss loss(p, &t, 0.5f, 2.0f);
  const Eigen::MatrixXd gn = gauss_newton(p.cast<double>(), 0.5, 2.0);
  ASSERT_GT(std::abs(gn(0, 1)), 0.05); // the softmax couples the schedules
  expect_curvature_products(loss, gn);
  // The row-wise factor squares to the diagonal (see top_choice_loss.h).
  const kfac::Matrix v = column({1.0f, -2.0f, 0.5f, 3.0f});
  const kfac::Matrix llv = loss.multiply_fisher_factor(loss.multiply_fisher_factor(v));
  for (Eigen::Index n = 0; n < 4; ++n)
    EXPECT_NEAR(llv(n, 0), gn(n, n) * v(n, 0), 1e-4 * (1 + std::abs(gn(n, n)))) << n;
}

TEST(TopChoiceLoss, WherePredictionsAreProportionalToRuntimesTheCurvatureIsTheHessian) {
  // P = Q: the gradient is zero and the term the Gauss–Newton matrix leaves out vanishes.
  const kfac::Matrix t = column({4.0f, 1.0f, 2.5f});
  const kfac::Matrix p = 0.5f * t;
  const TopChoiceLoss loss(p, &t, 0.4f);
  EXPECT_NEAR(loss.gradient().cwiseAbs().maxCoeff(), 0.0, 1e-6);
  for (Eigen::Index k = 0; k < 3; ++k) {
    const float h = 1e-3f * p(k, 0);
    kfac::Matrix up = p, down = p;
    up(k, 0) += h;
    down(k, 0) -= h;
    const Eigen::VectorXd hessian_col = (TopChoiceLoss(up, &t, 0.4f).gradient().cast<double>() -
                                         TopChoiceLoss(down, &t, 0.4f).gradient().cast<double>()) /
                                        (static_cast<double>(up(k, 0)) - down(k, 0));
    kfac::Matrix e = kfac::Matrix::Zero(3, 1);
    e(k, 0) = 1.0f;
    const kfac::Matrix col = loss.multiply_hessian(e);
    for (Eigen::Index n = 0; n < 3; ++n)
      EXPECT_NEAR(col(n, 0), hessian_col(n), 2e-3 * (1 + std::abs(hessian_col(n)))) << n << k;
  }
}

TEST(TopChoiceLoss, ASwapAtTheTopCostsMoreThanTheSameSwapAtTheBottom) {
  // Runtimes 1, 2, 4, 8, 16 ms: predictions right but for one swapped pair.
  const kfac::Matrix t = column({1.0f, 2.0f, 4.0f, 8.0f, 16.0f});
  const TopChoiceLoss top(column({2.0f, 1.0f, 4.0f, 8.0f, 16.0f}), &t, 0.25f);
  const TopChoiceLoss bottom(column({1.0f, 2.0f, 4.0f, 16.0f, 8.0f}), &t, 0.25f);
  const TopChoiceLoss right(t, &t, 0.25f);
  EXPECT_GT(total(top) - total(right), 100 * (total(bottom) - total(right)));
  EXPECT_GT(total(bottom), total(right));
}

TEST(TopChoiceLoss, BadInputIsAnErrorNamingIt) {
  const kfac::Matrix p = column({2.0f, 0.7f});
  const kfac::Matrix t = column({4.0f, 1.0f});
  const kfac::Matrix bad = column({4.0f, 0.0f});
  EXPECT_THROW(TopChoiceLoss(p, &bad, 0.25f), hkfac::Error);
  try {
    TopChoiceLoss(p, &t, 0.0f);
    ADD_FAILURE() << "a temperature of 0 was accepted";
  } catch (const hkfac::Error &e) {
    EXPECT_NE(std::string(e.what()).find("temperature"), std::string::npos) << e.what();
  }
  EXPECT_THROW(TopChoiceLoss(p, &t, 0.25f).sample(kfac::ExampleSeeds{1, 0}), hkfac::Error);
  // A non-positive prediction is held at the floor: finite values, no gradient through it.
  const TopChoiceLoss floored(column({-1.0f, 0.7f}), &t, 0.25f);
  EXPECT_TRUE(floored.values().allFinite());
  EXPECT_EQ(floored.gradient()(0, 0), 0.0f);
}

} // namespace
} // namespace hkfac::cost_model
