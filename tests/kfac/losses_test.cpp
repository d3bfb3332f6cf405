// Losses: values, gradients, curvature square roots and sampling against double references.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "hkfac/error.h"
#include "hkfac/kfac/losses.h"
#include "reference.h"

namespace hkfac::kfac {
namespace {

using namespace testref;

constexpr int B = 3, K = 4;

struct Case {
  std::unique_ptr<LossFunction> loss;
  // Reference per-example value in double, and the closed-form output Fisher of example i.
  std::function<double(const VectorXd &z, const VectorXd &t)> value;
  std::function<MatrixXd(const VectorXd &z)> fisher;
};

std::vector<Case> cases(const Matrix &z, const Matrix &t) {
  std::vector<Case> out;
  const Matrix t01 = (t.array() + 1.0f) * 0.5f; // in [0, 1]
  Matrix onehot = Matrix::Zero(B, K);
  for (int i = 0; i < B; ++i)
    onehot(i, (i + 1) % K) = 1.0f;
  const double w = 0.7, var = 0.3;
  out.push_back({std::make_unique<NormalMeanNegativeLogProbLoss>(z, &t, var, w),
                 [=](const VectorXd &zz, const VectorXd &tt) {
                   return w * (tt - zz).squaredNorm() / (2 * var);
                 },
                 [=](const VectorXd &) { return normal_fisher(K, var, w); }});
  out.push_back({std::make_unique<CategoricalLogitsNegativeLogProbLoss>(z, &onehot, w),
                 [=](const VectorXd &zz, const VectorXd &tt) {
                   const double lse = std::log((zz.array()).exp().sum());
                   return w * -(tt.array() * (zz.array() - lse)).sum();
                 },
                 [=](const VectorXd &zz) { return categorical_fisher(zz, w); }});
  out.push_back({std::make_unique<MultiBernoulliNegativeLogProbLoss>(z, &t01, w),
                 [=](const VectorXd &zz, const VectorXd &tt) {
                   const Eigen::ArrayXd p = 1.0 / (1.0 + (-zz.array()).exp());
                   return w * -(tt.array() * p.log() + (1 - tt.array()) * (1 - p).log()).sum();
                 },
                 [=](const VectorXd &zz) { return bernoulli_fisher(zz, w); }});
  return out;
}

struct Data {
  Matrix z, t;
  Data() {
    std::mt19937 rng(11);
    z = random_matrix(B, K, rng, -2.0f, 2.0f);
    t = random_matrix(B, K, rng);
  }
};

TEST(kfacLosses, ValuesAndGradientsMatchDoubleReference) {
  Data d;
  for (Case &c : cases(d.z, d.t)) {
    const Eigen::VectorXd values = c.loss->values();
    const Matrix grad = c.loss->gradient();
    for (int i = 0; i < B; ++i) {
      const VectorXd zi = d.z.row(i).cast<double>().transpose();
      const VectorXd ti = c.loss->targets().row(i).cast<double>().transpose();
      EXPECT_NEAR(values(i), c.value(zi, ti), 1e-6 * std::max(1.0, std::abs(values(i))))
          << c.loss->name();
      for (int k = 0; k < K; ++k) {
        const double h = 1e-6;
        VectorXd zp = zi, zm = zi;
        zp(k) += h;
        zm(k) -= h;
        const double fd = (c.value(zp, ti) - c.value(zm, ti)) / (2 * h);
        EXPECT_NEAR(grad(i, k), fd, 1e-5) << c.loss->name() << " example " << i << " k " << k;
      }
    }
  }
}

TEST(kfacLosses, FisherAndHessianSquareRootsReproduceTheCurvature) {
  Data d;
  for (Case &c : cases(d.z, d.t)) {
    for (int i = 0; i < B; ++i) {
      const VectorXd zi = d.z.row(i).cast<double>().transpose();
      const VectorXd ti = c.loss->targets().row(i).cast<double>().transpose();
      MatrixXd L(K, K), LH(K, K), F(K, K);
      for (int k = 0; k < K; ++k) {
        Matrix e = Matrix::Zero(B, K);
        e(i, k) = 1.0f;
        L.col(k) = c.loss->multiply_fisher_factor(e).row(i).cast<double>().transpose();
        LH.col(k) = c.loss->multiply_hessian_factor(e).row(i).cast<double>().transpose();
        F.col(k) = c.loss->multiply_fisher(e).row(i).cast<double>().transpose();
      }
      const MatrixXd ref_f = c.fisher(zi);
      const MatrixXd ref_h = fd_hessian([&](const VectorXd &z) { return c.value(z, ti); }, zi);
      EXPECT_LT(rel_err(L * L.transpose(), ref_f), 1e-5) << c.loss->name();
      EXPECT_LT(rel_err(F, ref_f), 1e-5) << c.loss->name();
      EXPECT_LT(rel_err(LH * LH.transpose(), ref_h), 1e-4) << c.loss->name();
    }
  }
}

// E_t~p[∇ℓ(t) ∇ℓ(t)ᵀ] = w²·F_NLL, so the √w-scaled sampled gradient's outer product has mean F.
// 20000 samples: relative Monte Carlo error ~1/sqrt(20000) ≈ 0.7% per entry; tolerance 5%.
TEST(kfacLosses, SampledGradientOuterProductsAverageToTheFisher) {
  Data d;
  for (Case &c : cases(d.z, d.t)) {
    const int n = 20000;
    std::vector<MatrixXd> acc(B, MatrixXd::Zero(K, K));
    for (int s = 0; s < n; ++s) {
      const ExampleSeeds seeds{static_cast<uint64_t>(13 + s), 0};
      const Matrix g = c.loss->gradient_on(c.loss->sample(seeds)) / std::sqrt(c.loss->weight());
      for (int i = 0; i < B; ++i) {
        const VectorXd gi = g.row(i).cast<double>().transpose();
        acc[i] += gi * gi.transpose();
      }
    }
    for (int i = 0; i < B; ++i) {
      const MatrixXd ref = c.fisher(d.z.row(i).cast<double>().transpose());
      EXPECT_LT(rel_err(acc[i] / n, ref), 0.05) << c.loss->name() << " example " << i;
    }
  }
}

TEST(kfacLosses, SquaredErrorIsNormalWithVarianceHalf) {
  Data d;
  LossRegistry r;
  r.register_squared_error_loss(d.z, &d.t);
  const Eigen::VectorXd v = r.losses()[0]->values();
  for (int i = 0; i < B; ++i) {
    EXPECT_NEAR(v(i), (d.t.row(i) - d.z.row(i)).cast<double>().squaredNorm(), 1e-6);
  }
  EXPECT_EQ(r.losses()[0]->name(), "normal_predictive_distribution");
}

TEST(kfacLosses, RegistryRejectsMismatchedShapesAndMissingTargets) {
  Data d;
  LossRegistry r;
  r.register_categorical_predictive_distribution(d.z);
  EXPECT_THROW(r.losses()[0]->values(), Error);
  EXPECT_THROW(r.register_normal_predictive_distribution(Matrix::Zero(2, 2)), Error);
  EXPECT_THROW(r.register_normal_predictive_distribution(d.z, &d.t, 0.0f), Error);
  const Matrix wrong = Matrix::Zero(B, K + 1);
  EXPECT_THROW(r.register_multi_bernoulli_predictive_distribution(d.z, &wrong), Error);
}

// Such targets would give negative cross-entropies: refused at registration and in values_on,
// naming the loss, the value and where it is.
TEST(kfacLosses, OutOfRangeTargetsAreErrorsNamingTheLossValueAndPosition) {
  Data d;
  LossRegistry r;
  Matrix cat = Matrix::Zero(B, K);
  cat.col(0).setOnes();
  Matrix negative = cat;
  negative.row(1) << -2.0f, 3.0f, 0.0f, 0.0f; // sums to 1
  expect_error_names([&] { r.register_categorical_predictive_distribution(d.z, &negative); },
                     {"register_categorical_predictive_distribution", "categorical_logits",
                      "row 1, column 0", "is -2", "[0, 1]"});
  Matrix two_labels = cat;
  two_labels(2, 3) = 1.0f;
  expect_error_names([&] { r.register_categorical_predictive_distribution(d.z, &two_labels); },
                     {"categorical_logits", "row 2 sum to 2", "summing to 1"});
  const Matrix none = Matrix::Zero(B, K);
  expect_error_names([&] { r.register_categorical_predictive_distribution(d.z, &none); },
                     {"row 0 sum to 0"});

  Matrix bern = Matrix::Constant(B, K, 0.5f);
  bern(2, 3) = 7.0f;
  expect_error_names([&] { r.register_multi_bernoulli_predictive_distribution(d.z, &bern); },
                     {"register_multi_bernoulli_predictive_distribution", "multi_bernoulli_logits",
                      "row 2, column 3", "is 7", "[0, 1]"});
  bern(2, 3) = -0.25f;
  expect_error_names([&] { r.register_multi_bernoulli_predictive_distribution(d.z, &bern); },
                     {"is -0.25"});
  EXPECT_TRUE(r.empty());

  // Targets passed to values_on / gradient_on directly are checked too.
  const MultiBernoulliNegativeLogProbLoss loss(d.z, nullptr, 1.0f);
  expect_error_names([&] { loss.values_on(bern); }, {"multi_bernoulli values_on", "is -0.25"});
  const CategoricalLogitsNegativeLogProbLoss categorical(d.z, &cat, 1.0f);
  expect_error_names([&] { categorical.gradient_on(two_labels); },
                     {"categorical gradient_on", "row 2 sum to 2"});
}

// Soft labels are legal; a non-finite target is not an error but a non-finite loss, which the
// optimizer rejects as a bad batch.
TEST(kfacLosses, SoftAndNonFiniteTargetsAreAccepted) {
  Data d;
  LossRegistry r;
  const Matrix soft = Matrix::Constant(B, K, 1.0f / K);
  r.register_categorical_predictive_distribution(d.z, &soft);
  const Matrix bern = Matrix::Constant(B, K, 0.3f);
  r.register_multi_bernoulli_predictive_distribution(d.z, &bern);
  EXPECT_TRUE(r.total_values().allFinite());
  EXPECT_TRUE((r.total_values().array() > 0.0).all());

  Matrix nan_cat = soft;
  nan_cat(1, 2) = std::numeric_limits<float>::quiet_NaN();
  Matrix inf_bern = bern;
  inf_bern(0, 0) = std::numeric_limits<float>::infinity();
  LossRegistry bad;
  bad.register_categorical_predictive_distribution(d.z, &nan_cat);
  EXPECT_FALSE(std::isfinite(bad.total_values()(1)));
  bad.clear();
  bad.register_multi_bernoulli_predictive_distribution(d.z, &inf_bern);
  EXPECT_FALSE(std::isfinite(bad.total_values()(0)));
}

} // namespace
} // namespace hkfac::kfac
