// Every estimation mode against a brute-force Fisher / GGN / empirical Fisher of a tiny network,
// computed in double precision from finite-difference Jacobians.
#include <gtest/gtest.h>

#include <limits>

#include "hkfac/error.h"
#include "hkfac/kfac/blocks/dense_two_kronecker_factored.h"
#include "hkfac/kfac/estimator.h"
#include "reference.h"

namespace hkfac::kfac {
namespace {

using namespace testref;

enum class LossKind { normal, categorical, bernoulli };
const LossKind kLosses[] = {LossKind::normal, LossKind::categorical, LossKind::bernoulli};
constexpr int K = 3;
constexpr double kWeight = 0.8;

const char *loss_name(LossKind k) {
  return k == LossKind::normal        ? "normal"
         : k == LossKind::categorical ? "categorical"
                                      : "bernoulli";
}

double ref_loss(LossKind k, const VectorXd &z, const VectorXd &t) {
  switch (k) {
  case LossKind::normal:
    return kWeight * (t - z).squaredNorm(); // variance 0.5
  case LossKind::categorical:
    return kWeight * -(t.array() * (z.array() - std::log(z.array().exp().sum()))).sum();
  case LossKind::bernoulli: {
    const Eigen::ArrayXd p = 1.0 / (1.0 + (-z.array()).exp());
    return kWeight * -(t.array() * p.log() + (1 - t.array()) * (1 - p).log()).sum();
  }
  }
  return 0;
}

struct Problem {
  std::vector<RefLayer> net = {{RefLayer::dense, Activation::tanh, 3, 4, true},
                               {RefLayer::bias, Activation::identity, 4, 4},
                               {RefLayer::dense, Activation::identity, 4, K, true}};
  Sequential model = build(net, 3);
  Params params;
  Batch batch;
  LossKind loss;
  int B;

  Problem(LossKind l, int batch_size) : loss(l), B(batch_size) {
    std::mt19937 rng(17 + batch_size);
    params = model.init_params(rng);
    params[1] = random_matrix(1, 4, rng, -0.5f, 0.5f);
    params[2] = random_matrix(1, 4, rng, -0.5f, 0.5f);
    batch.inputs = random_matrix(B, 3, rng, -1.5f, 1.5f);
    batch.targets = Matrix::Zero(B, K);
    for (int i = 0; i < B; ++i) {
      if (loss == LossKind::normal) {
        batch.targets.row(i) = random_matrix(1, K, rng);
      } else if (loss == LossKind::categorical) {
        batch.targets(i, i % K) = 1.0f;
      } else {
        batch.targets.row(i) = random_matrix(1, K, rng, 0.0f, 1.0f);
      }
    }
  }

  // Forward through the library and register the loss, as a value function would.
  LossRegistry run_forward() {
    const Matrix out = model.forward(params, batch);
    LossRegistry r;
    if (loss == LossKind::normal) {
      r.register_squared_error_loss(out, &batch.targets, static_cast<float>(kWeight));
    } else if (loss == LossKind::categorical) {
      r.register_categorical_predictive_distribution(out, &batch.targets,
                                                     static_cast<float>(kWeight));
    } else {
      r.register_multi_bernoulli_predictive_distribution(out, &batch.targets,
                                                         static_cast<float>(kWeight));
    }
    return r;
  }

  // The output-space matrix M_i of each example for `mode`: closed-form Fisher, finite-difference
  // loss Hessian (GGN), or the outer product of the real loss gradient (empirical Fisher).
  std::vector<MatrixXd> output_curvatures(EstimationMode mode) const {
    const MatrixXd z = forward(net, to_double(params), batch.inputs.cast<double>());
    std::vector<MatrixXd> M;
    for (int i = 0; i < B; ++i) {
      const VectorXd zi = z.row(i).transpose();
      const VectorXd ti = batch.targets.row(i).cast<double>().transpose();
      auto f = [&](const VectorXd &zz) { return ref_loss(loss, zz, ti); };
      if (mode == EstimationMode::fisher_empirical) {
        VectorXd g(K);
        for (int k = 0; k < K; ++k) {
          VectorXd zp = zi, zm = zi;
          zp(k) += 1e-6;
          zm(k) -= 1e-6;
          g(k) = (f(zp) - f(zm)) / 2e-6;
        }
        M.push_back(g * g.transpose() / kWeight); // the estimator uses √w-scaled gradients
      } else if (is_ggn_mode(mode)) {
        M.push_back(fd_hessian(f, zi));
      } else if (loss == LossKind::normal) {
        M.push_back(normal_fisher(K, 0.5, kWeight));
      } else if (loss == LossKind::categorical) {
        M.push_back(categorical_fisher(zi, kWeight));
      } else {
        M.push_back(bernoulli_fisher(zi, kWeight));
      }
    }
    return M;
  }

  // (1/B) Σ J_iᵀ M_i J_i over all parameters.
  MatrixXd brute_force_curvature(EstimationMode mode) const {
    const std::vector<MatrixXd> J =
        fd_jacobians(net, to_double(params), batch.inputs.cast<double>());
    const std::vector<MatrixXd> M = output_curvatures(mode);
    MatrixXd F = MatrixXd::Zero(J[0].cols(), J[0].cols());
    for (int i = 0; i < B; ++i)
      F += J[i].transpose() * M[i] * J[i];
    return F / B;
  }

  // The G factor of dense layer k: (1/B) Σ J_s,iᵀ M_i J_s,i.
  MatrixXd brute_force_g(EstimationMode mode, size_t dense_k) const {
    const std::vector<MatrixXd> J =
        fd_preactivation_jacobians(net, to_double(params), batch.inputs.cast<double>(), dense_k);
    const std::vector<MatrixXd> M = output_curvatures(mode);
    MatrixXd G = MatrixXd::Zero(J[0].cols(), J[0].cols());
    for (int i = 0; i < B; ++i)
      G += J[i].transpose() * M[i] * J[i];
    return G / B;
  }
};

// Parameter layout of the problem: dense_0 W (12) b (4) | bias (4) | dense_1 W (12) b (3).
constexpr int kDense0 = 0, kDense0Size = 16, kBias = 16, kBiasSize = 4, kDense1 = 20,
              kDense1Size = 15;

const EstimationMode kExactModes[] = {EstimationMode::fisher_exact, EstimationMode::ggn_exact,
                                      EstimationMode::fisher_empirical};
const EstimationMode kSampledModes[] = {EstimationMode::fisher_gradients,
                                        EstimationMode::fisher_curvature_prop,
                                        EstimationMode::ggn_curvature_prop};

// fisher_exact and ggn_exact are held to 1e-5 relative. The empirical Fisher squares the residual
// t - z, which the float forward pass carries with less relative precision, so 5e-5.
double exact_tolerance(EstimationMode mode) {
  return mode == EstimationMode::fisher_empirical ? 5e-5 : 1e-5;
}

// With one example the Kronecker factorisation is exact, so every block must equal its diagonal
// block of the brute-force curvature.
TEST(kfacEstimator, ExactModesMatchBruteForceCurvatureWithOneExample) {
  for (LossKind loss : kLosses) {
    for (EstimationMode mode : kExactModes) {
      Problem p(loss, 1);
      CurvatureEstimator est(p.model, mode);
      std::mt19937 rng(1);
      ASSERT_TRUE(est.update_curvature_estimate(p.model, p.run_forward(), 0.0f, 1.0f, rng));
      const MatrixXd F = p.brute_force_curvature(mode);
      const std::string what = std::string(loss_name(loss)) + " " + estimation_mode_name(mode);
      const double tol = exact_tolerance(mode);
      EXPECT_LT(rel_err(est.blocks()[0]->full_curvature(),
                        F.block(kDense0, kDense0, kDense0Size, kDense0Size)),
                tol)
          << what;
      EXPECT_LT(
          rel_err(est.blocks()[1]->full_curvature(),
                  MatrixXd(F.block(kBias, kBias, kBiasSize, kBiasSize).diagonal().asDiagonal())),
          tol)
          << what;
      EXPECT_LT(rel_err(est.blocks()[2]->full_curvature(),
                        F.block(kDense1, kDense1, kDense1Size, kDense1Size)),
                tol)
          << what;
    }
  }
}

// With a batch, the G factors and a full generic block still equal their brute-force values.
TEST(kfacEstimator, ExactModesMatchBruteForceFactorsOnABatch) {
  BlockSelection sel;
  sel.layer_tag_to_block["generic"] = "NaiveFull";
  for (LossKind loss : kLosses) {
    for (EstimationMode mode : kExactModes) {
      Problem p(loss, 4);
      CurvatureEstimator est(p.model, mode, sel);
      std::mt19937 rng(1);
      ASSERT_TRUE(est.update_curvature_estimate(p.model, p.run_forward(), 0.0f, 1.0f, rng));
      const std::string what = std::string(loss_name(loss)) + " " + estimation_mode_name(mode);
      const double tol = exact_tolerance(mode);
      for (size_t k = 0; k < 2; ++k) {
        const auto &block =
            dynamic_cast<const DenseTwoKroneckerFactored &>(*est.blocks()[k == 0 ? 0 : 2]);
        EXPECT_LT(rel_err(block.factor_g().cast<double>(), p.brute_force_g(mode, k)), tol)
            << what << " dense_" << k;
      }
      const MatrixXd F = p.brute_force_curvature(mode);
      EXPECT_EQ(est.blocks()[1]->name(), "NaiveFull");
      EXPECT_LT(
          rel_err(est.blocks()[1]->full_curvature(), F.block(kBias, kBias, kBiasSize, kBiasSize)),
          tol)
          << what;
    }
  }
}

// The sampled modes are unbiased: the mean of N independent estimates (ema_old = 1, ema_new = 1
// accumulates a plain mean) approaches the exact value. N = 6000; the per-entry Monte Carlo error
// is a few percent of the largest entry at most, so the stated tolerance is 10% of the largest
// entry (max-abs relative error).
TEST(kfacEstimator, SampledModesMatchBruteForceInExpectation) {
  BlockSelection sel;
  sel.layer_tag_to_block["generic"] = "NaiveFull";
  for (LossKind loss : kLosses) {
    for (EstimationMode mode : kSampledModes) {
      Problem p(loss, 3);
      CurvatureEstimator est(p.model, mode, sel);
      std::mt19937 rng(123);
      const LossRegistry losses = p.run_forward();
      for (int s = 0; s < 6000; ++s)
        ASSERT_TRUE(est.update_curvature_estimate(p.model, losses, 1.0f, 1.0f, rng));
      const std::string what = std::string(loss_name(loss)) + " " + estimation_mode_name(mode);
      const auto &d0 = dynamic_cast<const DenseTwoKroneckerFactored &>(*est.blocks()[0]);
      EXPECT_LT(rel_err(d0.factor_g().cast<double>(), p.brute_force_g(mode, 0)), 0.1) << what;
      const MatrixXd F = p.brute_force_curvature(mode);
      EXPECT_LT(
          rel_err(est.blocks()[1]->full_curvature(), F.block(kBias, kBias, kBiasSize, kBiasSize)),
          0.1)
          << what;
    }
  }
}

// KFC's G factor is exact in the exact modes: (1/(B·T)) Σ_{i,t} J_{i,t}ᵀ M_i J_{i,t} with J_{i,t}
// the Jacobian with respect to the conv pre-activation at location t. A full generic block on
// the conv tag (per-example gradients summed over locations) equals the brute-force curvature.
TEST(kfacEstimator, ExactModesMatchBruteForceForConv2D) {
  const std::vector<RefLayer> net = {RefLayer::conv2d(4, 3, 2, 2, 2, 1, 0, Activation::tanh),
                                     {RefLayer::dense, Activation::identity, 12, K, true}};
  for (EstimationMode mode : {EstimationMode::fisher_exact, EstimationMode::ggn_exact}) {
    Problem p(LossKind::categorical, 3);
    p.net = net;
    p.model = build(net, 24);
    std::mt19937 rng(31);
    p.params = p.model.init_params(rng);
    p.params[1] = random_matrix(1, 2, rng);
    p.batch.inputs = random_matrix(3, 24, rng);
    BlockSelection full;
    full.layer_tag_to_block["conv2d"] = "NaiveFull";
    CurvatureEstimator kfc(p.model, mode), exact(p.model, mode, full);
    EXPECT_EQ(kfc.blocks()[0]->name(), "Conv2DTwoKroneckerFactored");
    const LossRegistry losses = p.run_forward();
    ASSERT_TRUE(kfc.update_curvature_estimate(p.model, losses, 0.0f, 1.0f, rng));
    ASSERT_TRUE(exact.update_curvature_estimate(p.model, losses, 0.0f, 1.0f, rng));

    const int T = 6, oc = 2;
    const std::vector<MatrixXd> J =
        fd_preactivation_jacobians(net, to_double(p.params), p.batch.inputs.cast<double>(), 0);
    const std::vector<MatrixXd> M = p.output_curvatures(mode);
    MatrixXd G = MatrixXd::Zero(oc, oc);
    for (int i = 0; i < 3; ++i) {
      for (int t = 0; t < T; ++t) {
        const MatrixXd jt = J[i].middleCols(t * oc, oc);
        G += jt.transpose() * M[i] * jt;
      }
    }
    G /= 3.0 * T;
    const auto &block = dynamic_cast<const DenseTwoKroneckerFactored &>(*kfc.blocks()[0]);
    EXPECT_LT(rel_err(block.factor_g().cast<double>(), G), 1e-5) << estimation_mode_name(mode);
    const MatrixXd F = p.brute_force_curvature(mode);
    EXPECT_LT(rel_err(exact.blocks()[0]->full_curvature(), F.topLeftCorner(18, 18)), 1e-5)
        << estimation_mode_name(mode);
  }
}

TEST(kfacEstimator, BlockSelectionFollowsOptions) {
  Problem p(LossKind::normal, 2);
  BlockSelection sel;
  sel.patterns_to_skip = {"dense_1"};
  sel.layer_tag_to_block["dense_0"] = "NaiveFull";
  CurvatureEstimator est(p.model, EstimationMode::fisher_exact, sel);
  EXPECT_EQ(est.blocks()[0]->name(), "NaiveFull");
  EXPECT_EQ(est.blocks()[1]->name(), "NaiveDiagonal");
  EXPECT_EQ(est.blocks()[2]->name(), "NaiveDiagonal");
  BlockSelection generic;
  generic.register_only_generic = true;
  CurvatureEstimator all(p.model, EstimationMode::fisher_exact, generic);
  for (const auto &b : all.blocks())
    EXPECT_EQ(b->name(), "NaiveDiagonal");
  BlockSelection typo;
  typo.layer_tag_to_block["dense"] = "KroneckerSomething";
  EXPECT_THROW(CurvatureEstimator(p.model, EstimationMode::fisher_exact, typo), Error);
  EXPECT_THROW(parse_estimation_mode("fisher"), Error);
}

// A key that names neither a tag of the model nor a kind is a typo, and the error lists what
// would have been valid; a kind no tag of this model has is still a valid key.
TEST(kfacEstimator, LayerTagToBlockKeysMustNameATagOrAKind) {
  Problem p(LossKind::normal, 2);
  for (const char *key : {"dense_7", "Dense", ""}) {
    BlockSelection sel;
    sel.layer_tag_to_block[key] = "NaiveFull";
    try {
      CurvatureEstimator est(p.model, EstimationMode::fisher_exact, sel);
      ADD_FAILURE() << "key '" << key << "' was ignored";
    } catch (const Error &e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("key '" + std::string(key) + "' is neither a tag"), std::string::npos)
          << what;
      EXPECT_NE(what.find("dense_0, generic_0, dense_1"), std::string::npos) << what;
      EXPECT_NE(what.find("dense, conv2d, scale_and_shift, generic"), std::string::npos) << what;
    }
  }
  BlockSelection valid;
  valid.layer_tag_to_block["dense_1"] = "NaiveFull";
  valid.layer_tag_to_block["conv2d"] = "NaiveFull";
  CurvatureEstimator est(p.model, EstimationMode::fisher_exact, valid);
  EXPECT_EQ(est.blocks()[2]->name(), "NaiveFull");
}

// dense_1's inputs follow a bias: a huge bias (finite, but its square times the batch overflows
// float) or a NaN one poisons only dense_1's A factor. The batch is refused whole — every block
// checked before any accumulates — so the blocks before dense_1 are not left a batch ahead, and
// nothing of it enters a moving average. A large bias whose statistics fit is taken.
TEST(kfacEstimator, BatchThatWouldMakeAnEstimateNonFiniteChangesNoBlock) {
  Problem p(LossKind::normal, 4);
  CurvatureEstimator est(p.model, EstimationMode::fisher_exact);
  std::mt19937 rng(1);
  ASSERT_TRUE(est.update_curvature_estimate(p.model, p.run_forward(), 0.0f, 1.0f, rng));
  std::vector<MatrixXd> before;
  for (const auto &b : est.blocks())
    before.push_back(b->full_curvature());
  const Matrix bias = p.params[2];
  for (float bad : {1e19f, std::numeric_limits<float>::quiet_NaN()}) {
    p.params[2](0, 1) = bad;
    EXPECT_FALSE(est.update_curvature_estimate(p.model, p.run_forward(), 0.5f, 1.0f, rng)) << bad;
    for (size_t b = 0; b < before.size(); ++b) {
      EXPECT_EQ(est.blocks()[b]->ema_weight(), 1.0) << bad << " block " << b;
      EXPECT_EQ(est.blocks()[b]->full_curvature(), before[b]) << bad << " block " << b;
    }
  }
  p.params[2](0, 1) = 1e15f;
  EXPECT_TRUE(est.update_curvature_estimate(p.model, p.run_forward(), 0.5f, 1.0f, rng));
  EXPECT_EQ(est.blocks()[2]->ema_weight(), 1.5);
  EXPECT_TRUE(est.blocks()[2]->full_curvature().allFinite());
  EXPECT_GT(est.blocks()[2]->full_curvature().maxCoeff(), 1e29);
  p.params[2] = bias;
}

TEST(kfacEstimator, EmpiricalModeNeedsTargets) {
  Problem p(LossKind::normal, 2);
  CurvatureEstimator est(p.model, EstimationMode::fisher_empirical);
  const Matrix out = p.model.forward(p.params, p.batch);
  LossRegistry r;
  r.register_squared_error_loss(out);
  std::mt19937 rng(1);
  EXPECT_THROW((void)est.update_curvature_estimate(p.model, r, 0.0f, 1.0f, rng), Error);
}

} // namespace
} // namespace hkfac::kfac
