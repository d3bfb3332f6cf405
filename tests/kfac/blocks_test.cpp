// Curvature blocks: estimates against brute-force sums, inverse consistency, pi-adjusted damping.
#include <gtest/gtest.h>
#include <type_traits>
#include <utility>

#include "../test_util.h"
#include "hkfac/cusolver.h"
#include "hkfac/device.h"
#include "hkfac/error.h"
#include "hkfac/kfac/blocks/dense_two_kronecker_factored.h"
#include "hkfac/kfac/blocks/diagonal.h"
#include "hkfac/kfac/blocks/full.h"
#include "reference.h"

namespace hkfac::kfac {
namespace {

using namespace testref;

constexpr int B = 6;

struct TagFixture {
  LayerTag tag;
  std::vector<ParamShape> shapes;
  Matrix inputs;
  std::vector<Matrix> grads; // two backward passes
};

TagFixture dense_fixture(int din, int dout, bool bias, unsigned seed) {
  TagFixture f;
  f.tag.kind = TagKind::dense;
  f.tag.name = "dense_0";
  f.tag.has_bias = bias;
  f.tag.input_dim = din;
  f.tag.output_dim = dout;
  f.shapes.push_back({din, dout, "w"});
  f.tag.params = {0};
  if (bias) {
    f.shapes.push_back({1, dout, "b"});
    f.tag.params.push_back(1);
  }
  std::mt19937 rng(seed);
  f.inputs = random_matrix(B, din, rng);
  for (int k = 0; k < 2; ++k)
    f.grads.push_back(random_matrix(B, dout, rng));
  return f;
}

TagFixture scale_and_shift_fixture(int d, unsigned seed) {
  TagFixture f;
  f.tag.kind = TagKind::scale_and_shift;
  f.tag.name = "scale_and_shift_0";
  f.tag.has_scale = f.tag.has_shift = true;
  f.tag.params = {0, 1};
  f.shapes = {{1, d, "scale"}, {1, d, "shift"}};
  std::mt19937 rng(seed);
  f.inputs = random_matrix(B, d, rng);
  for (int k = 0; k < 2; ++k)
    f.grads.push_back(random_matrix(B, d, rng));
  return f;
}

BlockBatch batch_of(const TagFixture &f) {
  BlockBatch b;
  b.inputs = &f.inputs;
  b.output_grads = f.grads;
  b.batch_size = B;
  return b;
}

// Brute force: the per-example gradient covariance Σ_passes Σ_i g_i g_iᵀ / B in double.
MatrixXd brute_force_covariance(const TagFixture &f) {
  MatrixXd c;
  for (const Matrix &dy : f.grads) {
    const MatrixXd g = per_example_gradients(f.tag, f.inputs, dy).cast<double>();
    const MatrixXd add = g.transpose() * g / B;
    c = c.size() ? MatrixXd(c + add) : add;
  }
  return c;
}

std::vector<Matrix> random_vec(const std::vector<ParamShape> &shapes, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<Matrix> v;
  for (const ParamShape &s : shapes)
    v.push_back(random_matrix(s.rows, s.cols, rng));
  return v;
}

MatrixXd flat(const std::vector<Matrix> &v) {
  std::vector<double> out;
  for (const Matrix &m : v)
    out.insert(out.end(), m.data(), m.data() + m.size());
  return Eigen::Map<MatrixXd>(out.data(), static_cast<Eigen::Index>(out.size()), 1);
}

MatrixXd kron(const MatrixXd &a, const MatrixXd &g) {
  MatrixXd k(a.rows() * g.rows(), a.cols() * g.cols());
  for (Eigen::Index i = 0; i < a.rows(); ++i) {
    for (Eigen::Index j = 0; j < a.cols(); ++j) {
      k.block(i * g.rows(), j * g.cols(), g.rows(), g.cols()) = a(i, j) * g;
    }
  }
  return k;
}

// Layers wide enough for the tiled factor updates (and the wide tiles for G), which write the
// sums' upper triangles only: the factors are the brute-force ones across an EMA step, and
// exactly symmetric.
TEST(kfacBlocks, WideDenseBlockFactorsMatchBruteForceAcrossEmaSteps) {
  TagFixture f = dense_fixture(299, 500, true, 3);
  DenseTwoKroneckerFactored block(f.tag, f.shapes, {});
  block.init();
  auto batch_stats = [&](const TagFixture &t, MatrixXd &A, MatrixXd &G) {
    MatrixXd xbar(B, 300);
    xbar.leftCols(299) = t.inputs.cast<double>();
    xbar.col(299).setOnes();
    A = xbar.transpose() * xbar / B;
    G = MatrixXd::Zero(500, 500);
    for (const Matrix &dy : t.grads)
      G += dy.cast<double>().transpose() * dy.cast<double>() / B;
  };
  MatrixXd A1, G1, A2, G2;
  batch_stats(f, A1, G1);
  block.update_curvature_estimate(1.0f, 1.0f, batch_of(f));
  TagFixture f2 = dense_fixture(299, 500, true, 4);
  batch_stats(f2, A2, G2);
  block.update_curvature_estimate(0.95f, 1.0f, batch_of(f2));
  const MatrixXd A = (0.95 * A1 + A2) / 1.95, G = (0.95 * G1 + G2) / 1.95;
  const Matrix a = block.factor_a(), g = block.factor_g();
  EXPECT_LT(rel_err(a.cast<double>(), A), 1e-6);
  EXPECT_LT(rel_err(g.cast<double>(), G), 1e-6);
  EXPECT_TRUE(a == a.transpose());
  EXPECT_TRUE(g == g.transpose());
}

TEST(kfacBlocks, DenseBlockCurvatureIsKroneckerProductOfBruteForceFactors) {
  for (bool bias : {true, false}) {
    TagFixture f = dense_fixture(3, 4, bias, 1);
    DenseTwoKroneckerFactored block(f.tag, f.shapes, {});
    block.init();
    block.update_curvature_estimate(1.0f, 1.0f, batch_of(f));
    MatrixXd xbar(B, 3 + (bias ? 1 : 0));
    xbar.leftCols(3) = f.inputs.cast<double>();
    if (bias)
      xbar.col(3).setOnes();
    const MatrixXd A = xbar.transpose() * xbar / B;
    MatrixXd G = MatrixXd::Zero(4, 4);
    for (const Matrix &dy : f.grads)
      G += dy.cast<double>().transpose() * dy.cast<double>() / B;
    EXPECT_LT(rel_err(block.factor_a().cast<double>(), A), 1e-6);
    EXPECT_LT(rel_err(block.factor_g().cast<double>(), G), 1e-6);
    EXPECT_LT(rel_err(block.full_curvature(), kron(A, G)), 1e-6);
  }
}

TEST(kfacBlocks, MovingAverageIsWeightedBySumOfEmaWeights) {
  TagFixture f1 = dense_fixture(2, 3, true, 2), f2 = dense_fixture(2, 3, true, 3);
  DenseTwoKroneckerFactored block(f1.tag, f1.shapes, {});
  block.init();
  // Burn-in style (1, 1/2) twice gives the mean; then a normal step (0.95, 1).
  block.update_curvature_estimate(1.0f, 0.5f, batch_of(f1));
  block.update_curvature_estimate(1.0f, 0.5f, batch_of(f2));
  DenseTwoKroneckerFactored b1(f1.tag, f1.shapes, {}), b2(f2.tag, f2.shapes, {});
  b1.init();
  b2.init();
  b1.update_curvature_estimate(0.0f, 1.0f, batch_of(f1));
  b2.update_curvature_estimate(0.0f, 1.0f, batch_of(f2));
  // Each factor is the mean of the two batches' factors (the curvature is their Kronecker
  // product, not the mean of the two products).
  const MatrixXd a_mean = 0.5 * (b1.factor_a() + b2.factor_a()).cast<double>();
  const MatrixXd g_mean = 0.5 * (b1.factor_g() + b2.factor_g()).cast<double>();
  EXPECT_NEAR(block.ema_weight(), 1.0, 1e-12);
  EXPECT_LT(rel_err(block.factor_a().cast<double>(), a_mean), 1e-6);
  EXPECT_LT(rel_err(block.factor_g().cast<double>(), g_mean), 1e-6);
  EXPECT_LT(rel_err(block.full_curvature(), kron(a_mean, g_mean)), 1e-6);
  // Then (ema_old, ema_new) = (0.95, 1): the sum weighs the old mean by 0.95 and the new batch
  // by 1, and the estimate divides by the sum of the weights, 1.95.
  block.update_curvature_estimate(0.95f, 1.0f, batch_of(f1));
  EXPECT_NEAR(block.ema_weight(), 1.95, 1e-6);
  const MatrixXd a_expected = (0.95 * a_mean + b1.factor_a().cast<double>()) / 1.95;
  const MatrixXd g_expected = (0.95 * g_mean + b1.factor_g().cast<double>()) / 1.95;
  EXPECT_LT(rel_err(block.factor_a().cast<double>(), a_expected), 1e-6);
  EXPECT_LT(rel_err(block.factor_g().cast<double>(), g_expected), 1e-6);
}

TEST(kfacBlocks, PiAdjustedDampingMatchesClosedForm) {
  std::mt19937 rng(4);
  const MatrixXd ma = random_matrix(3, 3, rng).cast<double>(),
                 mg = random_matrix(2, 2, rng).cast<double>();
  const MatrixXd A = ma * ma.transpose(), G = mg * mg.transpose();
  const double gamma = 0.04;
  const DampedFactors f = pi_adjusted_damped_factors(A, G, gamma);
  const double pi = std::sqrt((A.trace() / 3) / (G.trace() / 2));
  EXPECT_NEAR(f.pi, pi, 1e-12);
  EXPECT_LT(rel_err(f.A, A + pi * 0.2 * MatrixXd::Identity(3, 3)), 1e-12);
  EXPECT_LT(rel_err(f.G, G + (0.2 / pi) * MatrixXd::Identity(2, 2)), 1e-12);

  // Both 1x1: exactly a·g + γ.
  const MatrixXd a1 = MatrixXd::Constant(1, 1, 2.0), g1 = MatrixXd::Constant(1, 1, 3.0);
  const DampedFactors s = pi_adjusted_damped_factors(a1, g1, gamma);
  EXPECT_NEAR((kron(s.A, s.G))(0, 0), 6.0 + gamma, 1e-12);
  // One scalar factor: all damping to the other, exactly a·G + γI.
  const DampedFactors one = pi_adjusted_damped_factors(a1, G, gamma);
  EXPECT_LT(rel_err(kron(one.A, one.G), 2.0 * G + gamma * MatrixXd::Identity(2, 2)), 1e-12);
  const DampedFactors other = pi_adjusted_damped_factors(A, g1, gamma);
  EXPECT_LT(rel_err(kron(other.A, other.G), 3.0 * A + gamma * MatrixXd::Identity(3, 3)), 1e-12);
  // Zero trace: γI overall, finite.
  const DampedFactors z = pi_adjusted_damped_factors(MatrixXd::Zero(3, 3), G, gamma);
  EXPECT_TRUE(z.A.allFinite() && z.G.allFinite());
  EXPECT_LT(rel_err(kron(z.A, z.G), gamma * MatrixXd::Identity(6, 6)), 1e-12);
}

// Estimates the block's factors from f's batch, inverts them with damping gamma and returns the
// damped factors in double (the reference the inverse is checked against).
DampedFactors estimate_and_invert(DenseTwoKroneckerFactored &block, const TagFixture &f,
                                  float gamma) {
  block.init();
  block.update_curvature_estimate(1.0f, 1.0f, batch_of(f));
  block.update_inverse(gamma);
  return pi_adjusted_damped_factors(block.factor_a().cast<double>(),
                                    block.factor_g().cast<double>(), gamma);
}

TEST(kfacBlocks, DenseBlockInverseIsInverseOfPiDampedKroneckerProduct) {
  TagFixture f = dense_fixture(3, 4, true, 5);
  DenseTwoKroneckerFactored block(f.tag, f.shapes, {});
  const float gamma = 0.05f;
  const DampedFactors d = estimate_and_invert(block, f, gamma);
  const std::vector<Matrix> v = random_vec(f.shapes, 6);
  const MatrixXd ref = kron(d.A, d.G).inverse() * flat(v);
  EXPECT_LT(rel_err(flat(block.multiply_matpower(v, -1, gamma)), ref), 1e-5);
}

// Checkpoints save a block through its read-only state view: it must show the same members,
// in the same order, as the view restoring writes through, and hold the estimate's sums.
TEST(kfacBlocks, ReadOnlyStateViewShowsTheMembersRestoringWrites) {
  TagFixture f = dense_fixture(3, 4, true, 7);
  DenseTwoKroneckerFactored block(f.tag, f.shapes, {});
  estimate_and_invert(block, f, 0.05f);
  const CurvatureBlock::ConstState seen = std::as_const(block).state();
  static_assert(std::is_same_v<decltype(seen.matrices[0].matrix), const Matrix *>);
  static_assert(std::is_same_v<decltype(seen.ema_weight), const double *>);
  const CurvatureBlock::State live = block.state();
  EXPECT_EQ(seen.ema_weight, live.ema_weight);
  EXPECT_EQ(seen.have_inverse, live.have_inverse);
  EXPECT_TRUE(*seen.have_inverse);
  ASSERT_EQ(seen.matrices.size(), live.matrices.size());
  for (size_t i = 0; i < seen.matrices.size(); ++i) {
    SCOPED_TRACE(live.matrices[i].name);
    EXPECT_STREQ(seen.matrices[i].name, live.matrices[i].name);
    EXPECT_EQ(seen.matrices[i].matrix, live.matrices[i].matrix);
    EXPECT_EQ(seen.matrices[i].rows, live.matrices[i].rows);
    EXPECT_EQ(seen.matrices[i].cols, live.matrices[i].cols);
    EXPECT_EQ(seen.matrices[i].inverse, live.matrices[i].inverse);
    EXPECT_EQ(seen.matrices[i].optional, live.matrices[i].optional);
  }
  // The A sum is the estimate times the moving-average weight (here one update of weight 1), in
  // its upper triangle (the dense updates write that one alone).
  ASSERT_STREQ(seen.matrices[0].name, "a_sum");
  const MatrixXd a_sum = seen.matrices[0].matrix->cast<double>().triangularView<Eigen::Upper>();
  const MatrixXd a_upper =
      (*seen.ema_weight * block.factor_a().cast<double>()).triangularView<Eigen::Upper>();
  EXPECT_LT(rel_err(a_sum, a_upper), 1e-6);
}

// Factors wider than the inversion's blocks (64-column solves, 128-row Gram blocks), with
// partial last blocks: A⁻¹ V G⁻¹ against the damped factors inverted in double. The factors have
// rank 6 (B examples) below their damping, so the damping sets their conditioning, as in
// training.
TEST(kfacBlocks, WideDenseBlockInverseMatchesDoubleReference) {
  for (auto [din, dout] : {std::pair{299, 130}, std::pair{200, 257}}) {
    TagFixture f = dense_fixture(din, dout, true, 7 + din);
    DenseTwoKroneckerFactored block(f.tag, f.shapes, {});
    const float gamma = 0.05f;
    const DampedFactors d = estimate_and_invert(block, f, gamma);
    const std::vector<Matrix> v = random_vec(f.shapes, 8);
    auto stacked = [](const std::vector<Matrix> &wb) { // [W; b], the rows A multiplies
      MatrixXd m(wb[0].rows() + 1, wb[0].cols());
      m << wb[0].cast<double>(), wb[1].cast<double>();
      return m;
    };
    const MatrixXd ref = d.A.inverse() * stacked(v) * d.G.inverse();
    const MatrixXd got = stacked(block.multiply_matpower(v, -1, gamma));
    EXPECT_LT(rel_err(got, ref), 1e-5) << din << " x " << dout;
  }
}

// Without damping, a factor whose last columns never vary is singular: its Cholesky fails in a
// later block of the factorisation, and update_inverse says so instead of writing inverses.
TEST(kfacBlocks, UpdateInverseReportsAFactorThatIsNotPositiveDefinite) {
  TagFixture f = dense_fixture(150, 3, false, 11);
  std::mt19937 rng(12);
  const int n = 400; // enough examples for the first 100 columns to have full rank
  f.inputs = random_matrix(n, 150, rng);
  f.inputs.rightCols(50).setZero();
  f.grads = {random_matrix(n, 3, rng)};
  BlockBatch batch = batch_of(f);
  batch.batch_size = n;
  DenseTwoKroneckerFactored block(f.tag, f.shapes, {});
  block.init();
  block.update_curvature_estimate(1.0f, 1.0f, batch);
  try {
    block.update_inverse(0.0f);
    FAIL() << "update_inverse accepted a singular factor";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("not positive definite"), std::string::npos) << e.what();
  }
  block.update_inverse(0.05f); // damped, the same factor inverts
  const std::vector<Matrix> v = random_vec(f.shapes, 12);
  EXPECT_TRUE(flat(block.multiply_matpower(v, -1, 0.05f)).allFinite());
}

// The full blocks share the factors' inversion: a 150-parameter estimate (two 64-column solve
// blocks and a partial one, two Gram blocks) against its damped inverse in double.
TEST(kfacBlocks, WideFullBlockInverseMatchesDoubleReference) {
  TagFixture f = dense_fixture(14, 10, true, 9);
  auto block = make_block(BlockKind::naive_full, f.tag, f.shapes);
  block->init();
  block->update_curvature_estimate(1.0f, 1.0f, batch_of(f));
  const float gamma = 0.05f;
  block->update_inverse(gamma);
  const MatrixXd C = brute_force_covariance(f);
  ASSERT_EQ(C.rows(), 150);
  const std::vector<Matrix> v = random_vec(f.shapes, 10);
  const MatrixXd ref = (C + gamma * MatrixXd::Identity(150, 150)).inverse() * flat(v);
  EXPECT_LT(rel_err(flat(block->multiply_matpower(v, -1, gamma)), ref), 1e-5);
}

TEST(kfacBlocks, EigenRouteAppliesExactDampedInverse) {
  TagFixture f = dense_fixture(3, 2, true, 7);
  BlockOptions o;
  o.use_exact_inverses = true;
  DenseTwoKroneckerFactored block(f.tag, f.shapes, o);
  block.init();
  block.update_curvature_estimate(1.0f, 1.0f, batch_of(f));
  const float gamma = 0.1f;
  block.update_inverse(gamma);
  const std::vector<Matrix> v = random_vec(f.shapes, 8);
  const MatrixXd F = block.full_curvature() + gamma * MatrixXd::Identity(8, 8);
  EXPECT_LT(rel_err(flat(block.multiply_matpower(v, -1, gamma)), F.inverse() * flat(v)), 1e-5);
  EXPECT_LT(rel_err(flat(block.multiply_matpower(v, 1, gamma)), F * flat(v)), 1e-5);
}

// Factor inverses run through cuSOLVER when the kernels run on CUDA; both routes must agree.
TEST(kfacBlocks, DeviceAndHostFactorInversesAgree) {
  if (!cusolver::status().usable)
    GTEST_SKIP() << "cuSOLVER not usable: " << cusolver::status().reason;
  const Device before = default_device();
  for (bool exact : {false, true}) {
    TagFixture f = dense_fixture(40, 30, true, 70 + exact);
    BlockOptions o;
    o.use_exact_inverses = exact;
    const float gamma = 0.02f;
    const std::vector<Matrix> v = random_vec(f.shapes, 71);
    std::vector<MatrixXd> results;
    for (Device d : {Device::cpu, Device::cuda}) {
      set_default_device(d);
      DenseTwoKroneckerFactored block(f.tag, f.shapes, o);
      block.init();
      block.update_curvature_estimate(1.0f, 1.0f, batch_of(f));
      block.update_inverse(gamma);
      results.push_back(flat(block.multiply_matpower(v, -1, gamma)));
    }
    set_default_device(before);
    EXPECT_LT(rel_err(results[1], results[0]), 1e-4) << (exact ? "eigen route" : "Cholesky");
  }
}

TEST(kfacBlocks, EigenRouteRejectsNonFiniteFactorsBeforeDecomposing) {
  TagFixture f = dense_fixture(2, 2, true, 9);
  f.inputs(0, 0) = std::numeric_limits<float>::quiet_NaN();
  BlockOptions o;
  o.use_exact_inverses = true;
  DenseTwoKroneckerFactored block(f.tag, f.shapes, o);
  block.init();
  block.update_curvature_estimate(1.0f, 1.0f, batch_of(f));
  try {
    block.update_inverse(0.1f);
    FAIL() << "expected hkfac::Error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("dense_0"), std::string::npos) << e.what();
  }
}

TEST(kfacBlocks, DiagonalAndFullBlocksMatchBruteForceCovariance) {
  const TagFixture fixtures[] = {dense_fixture(2, 3, true, 10), scale_and_shift_fixture(4, 11)};
  for (const TagFixture &f : fixtures) {
    const MatrixXd C = brute_force_covariance(f);
    NaiveDiagonal diag(f.tag, f.shapes);
    NaiveFull full(f.tag, f.shapes);
    for (CurvatureBlock *b : std::vector<CurvatureBlock *>{&diag, &full}) {
      b->init();
      b->update_curvature_estimate(1.0f, 1.0f, batch_of(f));
    }
    EXPECT_LT(rel_err(diag.full_curvature(), MatrixXd(C.diagonal().asDiagonal())), 1e-6);
    EXPECT_LT(rel_err(full.full_curvature(), C), 1e-6);
  }
  const TagFixture s = scale_and_shift_fixture(3, 12);
  ScaleAndShiftDiagonal sd(s.tag, s.shapes);
  ScaleAndShiftFull sf(s.tag, s.shapes);
  sd.init();
  sf.init();
  sd.update_curvature_estimate(1.0f, 1.0f, batch_of(s));
  sf.update_curvature_estimate(1.0f, 1.0f, batch_of(s));
  const MatrixXd C = brute_force_covariance(s);
  EXPECT_LT(rel_err(sd.full_curvature(), MatrixXd(C.diagonal().asDiagonal())), 1e-6);
  EXPECT_LT(rel_err(sf.full_curvature(), C), 1e-6);
}

// (+1) then (-1) is the identity for every block type, with and without bias / exact inverses.
TEST(kfacBlocks, MatpowerPlusThenMinusIsIdentityForEveryBlock) {
  const float gamma = 0.03f;
  std::vector<std::pair<std::unique_ptr<CurvatureBlock>, TagFixture>> cases;
  for (bool bias : {true, false}) {
    for (bool exact : {false, true}) {
      TagFixture f = dense_fixture(3, 2, bias, 20 + bias + 2 * exact);
      BlockOptions o;
      o.use_exact_inverses = exact;
      cases.emplace_back(make_block(BlockKind::dense_two_kronecker_factored, f.tag, f.shapes, o),
                         f);
    }
  }
  for (int din : {1, 3}) { // scalar A factor (no bias, d_in = 1) and the scalar G case
    TagFixture f = dense_fixture(din, din == 1 ? 3 : 1, false, 30 + din);
    cases.emplace_back(make_block(BlockKind::dense_two_kronecker_factored, f.tag, f.shapes), f);
  }
  for (BlockKind k : {BlockKind::naive_diagonal, BlockKind::naive_full}) {
    TagFixture f = dense_fixture(2, 2, true, 40);
    cases.emplace_back(make_block(k, f.tag, f.shapes), f);
  }
  for (BlockKind k : {BlockKind::scale_and_shift_diagonal, BlockKind::scale_and_shift_full}) {
    TagFixture f = scale_and_shift_fixture(3, 50);
    cases.emplace_back(make_block(k, f.tag, f.shapes), f);
  }
  for (auto &[block, f] : cases) {
    block->init();
    block->update_curvature_estimate(1.0f, 1.0f, batch_of(f));
    block->update_inverse(gamma);
    const std::vector<Matrix> v = random_vec(f.shapes, 60);
    const std::vector<Matrix> back =
        block->multiply_matpower(block->multiply_matpower(v, 1, gamma), -1, gamma);
    EXPECT_LT(rel_err(flat(back), flat(v)), 1e-4) << block->name() << " " << f.tag.name;
  }
}

// KFC: with the B·T patch rows, A and G average over rows and the curvature is T·(A ⊗ G).
TEST(kfacBlocks, Conv2DBlockCurvatureIsLocationsTimesKroneckerProduct) {
  const int T = 5, din = 4, dout = 3;
  TagFixture f;
  f.tag.kind = TagKind::conv2d;
  f.tag.name = "conv2d_0";
  f.tag.has_bias = true;
  f.tag.locations = T;
  f.tag.params = {0, 1};
  f.shapes = {{din, dout, "kernel"}, {1, dout, "b"}};
  std::mt19937 rng(70);
  f.inputs = random_matrix(B * T, din, rng);
  f.grads = {random_matrix(B * T, dout, rng)};
  auto block = make_block(default_block_kind(TagKind::conv2d), f.tag, f.shapes);
  EXPECT_EQ(block->name(), "Conv2DTwoKroneckerFactored");
  block->init();
  block->update_curvature_estimate(1.0f, 1.0f, batch_of(f));
  MatrixXd xbar(B * T, din + 1);
  xbar.leftCols(din) = f.inputs.cast<double>();
  xbar.col(din).setOnes();
  const MatrixXd A = xbar.transpose() * xbar / (B * T);
  const MatrixXd G = f.grads[0].cast<double>().transpose() * f.grads[0].cast<double>() / (B * T);
  EXPECT_LT(rel_err(block->full_curvature(), T * kron(A, G)), 1e-5);
  block->update_inverse(0.02f);
  const std::vector<Matrix> v = random_vec(f.shapes, 71);
  const std::vector<Matrix> back =
      block->multiply_matpower(block->multiply_matpower(v, 1, 0.02f), -1, 0.02f);
  EXPECT_LT(rel_err(flat(back), flat(v)), 1e-4);
}

// Batches with different numbers of locations (T = 2, then 5) under a per-batch tag
// (locations = 0): each batch contributes A_b = Σ_t x̄ x̄ᵀ / B and G_b = Σ ds dsᵀ / (B·T_b), and
// the estimate is their EMA-weighted mean; the diagonal block sees the same per-example
// gradients as with a fixed T.
TEST(kfacBlocks, Conv2DBlockWithPerBatchLocationsWeighsEachBatchByItsOwnT) {
  const int din = 3, dout = 2;
  TagFixture f;
  f.tag.kind = TagKind::conv2d;
  f.tag.name = "per_stage";
  f.tag.has_bias = true;
  f.tag.locations = 0;
  f.tag.params = {0, 1};
  f.shapes = {{din, dout, "kernel"}, {1, dout, "b"}};
  auto block = make_block(default_block_kind(TagKind::conv2d), f.tag, f.shapes);
  auto diag = make_block(BlockKind::naive_diagonal, f.tag, f.shapes);
  block->init();
  diag->init();
  std::mt19937 rng(72);
  MatrixXd A = MatrixXd::Zero(din + 1, din + 1), G = MatrixXd::Zero(dout, dout);
  MatrixXd D = MatrixXd::Zero((din + 1) * dout, 1);
  const float ema_old[2] = {0.0f, 0.5f}, ema_new[2] = {1.0f, 0.5f};
  for (int b = 0; b < 2; ++b) {
    const int T = b == 0 ? 2 : 5;
    f.inputs = random_matrix(B * T, din, rng);
    f.grads = {random_matrix(B * T, dout, rng)};
    block->update_curvature_estimate(ema_old[b], ema_new[b], batch_of(f));
    diag->update_curvature_estimate(ema_old[b], ema_new[b], batch_of(f));
    MatrixXd xbar(B * T, din + 1);
    xbar.leftCols(din) = f.inputs.cast<double>();
    xbar.col(din).setOnes();
    const MatrixXd dy = f.grads[0].cast<double>();
    A = ema_old[b] * A + ema_new[b] * xbar.transpose() * xbar / B;
    G = ema_old[b] * G + ema_new[b] * dy.transpose() * dy / (B * T);
    LayerTag fixed = f.tag;
    fixed.locations = T;
    const MatrixXd g = per_example_gradients(fixed, f.inputs, f.grads[0]).cast<double>();
    D = ema_old[b] * D + ema_new[b] * g.array().square().colwise().sum().transpose().matrix() / B;
  }
  EXPECT_LT(rel_err(block->full_curvature(), kron(A, G)), 1e-5);
  EXPECT_LT(rel_err(MatrixXd(diag->full_curvature().diagonal()), D), 1e-5);
  f.tag.kind = TagKind::dense;
  EXPECT_THROW(
      make_block(default_block_kind(TagKind::dense), f.tag, {{din, dout, "w"}, {1, dout, "b"}}),
      hkfac::Error);
}

// A conv2d tag with a geometry records images; its blocks must see exactly the curvature they see
// from the patch rows of a plain conv2d tag. The KFC block reads the images with the patch
// covariance kernel, the others through im2col, so this checks the kernel's index arithmetic
// against the library's im2col, below and above the kernel's 32-column tile.
TEST(kfacBlocks, Conv2DImageRecordsGiveTheCurvatureOfTheirPatches) {
  struct Geo {
    int h, w, c, k, stride, pad, dout;
  };
  for (const Geo &geo :
       {Geo{4, 4, 2, 3, 1, 1, 2}, Geo{5, 6, 4, 3, 2, 1, 3}, Geo{3, 3, 1, 3, 1, 0, 2}}) {
    kernels::PatchGeometry g;
    g.height = geo.h, g.width = geo.w, g.channels = geo.c, g.kernel_h = g.kernel_w = geo.k;
    g.stride_h = g.stride_w = geo.stride, g.pad_h = g.pad_w = geo.pad;
    TagFixture patches;
    patches.tag.kind = TagKind::conv2d;
    patches.tag.name = "conv";
    patches.tag.has_bias = true;
    patches.tag.params = {0, 1};
    patches.tag.input_dim = g.patch_size();
    patches.tag.output_dim = geo.dout;
    patches.tag.locations = g.locations();
    patches.shapes = {{g.patch_size(), geo.dout, "kernel"}, {1, geo.dout, "b"}};
    TagFixture images = patches;
    images.tag.geometry = g;
    std::mt19937 rng(80 + geo.h);
    images.inputs = random_matrix(B, g.image_size(), rng);
    patches.inputs = im2col(images.inputs, g);
    for (int k = 0; k < 2; ++k)
      images.grads.push_back(random_matrix(B * g.locations(), geo.dout, rng));
    patches.grads = images.grads;
    for (BlockKind kind : {BlockKind::conv2d_two_kronecker_factored, BlockKind::naive_diagonal,
                           BlockKind::naive_full}) {
      auto from_images = make_block(kind, images.tag, images.shapes);
      auto from_patches = make_block(kind, patches.tag, patches.shapes);
      from_images->init();
      from_patches->init();
      for (float ema_old : {0.0f, 0.9f}) {
        from_images->update_curvature_estimate(ema_old, 1.0f, batch_of(images));
        from_patches->update_curvature_estimate(ema_old, 1.0f, batch_of(patches));
      }
      EXPECT_LT(rel_err(from_images->full_curvature(), from_patches->full_curvature()), 1e-5)
          << from_images->name() << " patch size " << g.patch_size();
    }
  }
}

TEST(kfacBlocks, Conv2DGeometryMustAgreeWithTheTagAndTheRecord) {
  kernels::PatchGeometry g;
  g.height = g.width = 4, g.channels = 2, g.kernel_h = g.kernel_w = 3, g.pad_h = g.pad_w = 1;
  TagFixture f;
  f.tag.kind = TagKind::conv2d;
  f.tag.name = "conv";
  f.tag.params = {0};
  f.tag.input_dim = g.patch_size();
  f.tag.locations = g.locations();
  f.tag.geometry = g;
  f.shapes = {{g.patch_size(), 2, "kernel"}};
  using hkfac::testing::expect_error_containing;
  // A record of patches where images are expected.
  std::mt19937 rng(90);
  f.inputs = random_matrix(B * g.locations(), g.patch_size(), rng);
  f.grads = {random_matrix(B * g.locations(), 2, rng)};
  auto block = make_block(BlockKind::conv2d_two_kronecker_factored, f.tag, f.shapes);
  block->init();
  expect_error_containing("'batch.inputs' must be the images",
                          [&] { block->update_curvature_estimate(0.0f, 1.0f, batch_of(f)); });
  auto diag = make_block(BlockKind::naive_diagonal, f.tag, f.shapes);
  diag->init();
  expect_error_containing("'images'",
                          [&] { diag->update_curvature_estimate(0.0f, 1.0f, batch_of(f)); });
  // Tags that contradict their geometry, or a geometry on a dense tag.
  TagFixture bad = f;
  bad.tag.locations = 4;
  expect_error_containing("disagree with its geometry", [&] {
    make_block(BlockKind::conv2d_two_kronecker_factored, bad.tag, bad.shapes);
  });
  bad = f;
  bad.tag.geometry->stride_h = 0;
  expect_error_containing("stride_h",
                          [&] { make_block(BlockKind::naive_diagonal, bad.tag, bad.shapes); });
  bad = f;
  bad.tag.kind = TagKind::dense;
  expect_error_containing("only conv2d tags",
                          [&] { make_block(BlockKind::naive_diagonal, bad.tag, bad.shapes); });
}

TEST(kfacBlocks, FactoryRejectsBlocksThatCannotHandleTheTag) {
  TagFixture s = scale_and_shift_fixture(3, 1);
  EXPECT_THROW(make_block(BlockKind::dense_two_kronecker_factored, s.tag, s.shapes), Error);
  TagFixture d = dense_fixture(2, 2, true, 1);
  EXPECT_THROW(make_block(BlockKind::scale_and_shift_full, d.tag, d.shapes), Error);
  EXPECT_THROW(parse_block_kind("Kronecker"), Error);
  EXPECT_EQ(parse_block_kind("DenseFull"), BlockKind::naive_full);
  auto block = make_block(BlockKind::naive_full, d.tag, d.shapes);
  EXPECT_THROW(block->multiply_matpower(random_vec(d.shapes, 1), -1, 0.1f), Error);
}

} // namespace
} // namespace hkfac::kfac
