// The preconditioned gradients kfac_torch writes into .grad(), against dense Kronecker solves and
// hkfac's own Sequential K-FAC; inverse periods; the preconditioner's checkpoints.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "hkfac/error.h"
#include "hkfac/kfac/estimator.h"
#include "hkfac/kfac/layers.h"
#include "hkfac/kfac_torch/preconditioner.h"
#include "reference.h"

namespace hkfac::kfac_torch {
namespace {

namespace F = torch::nn::functional;
using testref::covariance;
using testref::near;

torch::nn::Sequential mlp(int64_t in, int64_t hidden, int64_t out) {
  return torch::nn::Sequential(torch::nn::Linear(in, hidden), torch::nn::Tanh(),
                               torch::nn::Linear(hidden, out));
}
torch::nn::LinearImpl &linear(torch::nn::Sequential &net, size_t i) {
  return *net->ptr(i)->as<torch::nn::LinearImpl>();
}
torch::Tensor mean_squared(const torch::Tensor &y, const torch::Tensor &t) {
  return (y - t).pow(2).reshape({y.size(0), -1}).sum(1).mean();
}

// [∇W | ∇b] of a linear layer, detached copies.
torch::Tensor stacked_grad(torch::nn::LinearImpl &l) {
  return torch::cat({l.weight.grad(), l.bias.grad().reshape({-1, 1})}, 1).detach().clone();
}

TEST(KfacTorchPreconditioner, MlpStep_EqualsKroneckerSolveAndHkfacSequential) {
  testref::deterministic(11);
  torch::nn::Sequential net = mlp(5, 6, 3);
  const torch::Tensor x = torch::randn({9, 5}), t = torch::randn({9, 3});
  const double gamma = 1e-2;
  Preconditioner pre(*net);
  mean_squared(net->forward(x), t).backward();
  const torch::Tensor v0 = stacked_grad(linear(net, 0)), v2 = stacked_grad(linear(net, 2));
  pre.step(gamma);

  // Brute force: (G_d ⊗ A_d)⁻¹ vec([∇W | ∇b]) with the factors the capture test checks.
  for (const auto &[index, slot, v] :
       {std::tuple{size_t{0}, size_t{0}, v0}, std::tuple{size_t{2}, size_t{1}, v2}}) {
    const testref::Damped d = testref::pi_damped(pre.factor_a(slot).to(torch::kDouble),
                                                 pre.factor_g(slot).to(torch::kDouble), gamma);
    EXPECT_TRUE(near(stacked_grad(linear(net, index)), testref::kron_solve(d.G, d.A, v), 1e-4))
        << "layer " << index;
  }

  // hkfac's own K-FAC: the same block inverse applied to the same (transposed) gradient.
  kfac::Sequential seq(5);
  seq.add<kfac::Dense>(5, 6, kfac::Activation::tanh);
  seq.add<kfac::Dense>(6, 3);
  kfac::Params params;
  kfac::Params grads;
  for (size_t i : {size_t{0}, size_t{2}}) {
    params.push_back(testref::to_matrix(linear(net, i).weight.detach().t()));
    params.push_back(testref::to_matrix(linear(net, i).bias.detach().reshape({1, -1})));
  }
  for (const torch::Tensor &v : {v0, v2}) {
    grads.push_back(testref::to_matrix(v.narrow(1, 0, v.size(1) - 1).t()));
    grads.push_back(testref::to_matrix(v.select(1, v.size(1) - 1).reshape({1, -1})));
  }
  kfac::Batch batch;
  batch.inputs = testref::to_matrix(x);
  batch.targets = testref::to_matrix(t);
  // The forward must run on the network's parameters before those were stepped: none were.
  const kfac::Matrix out = seq.forward(params, batch);
  kfac::LossRegistry losses;
  losses.register_squared_error_loss(out, &batch.targets);
  kfac::CurvatureEstimator est(seq, kfac::EstimationMode::fisher_empirical);
  std::mt19937 rng(0);
  ASSERT_TRUE(est.update_curvature_estimate(seq, losses, 0.0f, 1.0f, rng));
  est.update_inverse(static_cast<float>(gamma));
  const kfac::Params u = est.multiply_matpower(grads, -1, static_cast<float>(gamma));
  size_t p = 0;
  for (size_t i : {size_t{0}, size_t{2}}) {
    EXPECT_TRUE(near(linear(net, i).weight.grad().t(), testref::to_tensor(u[p]), 1e-4)) << i;
    EXPECT_TRUE(
        near(linear(net, i).bias.grad().reshape({1, -1}), testref::to_tensor(u[p + 1]), 1e-4))
        << i;
    p += 2;
  }
}

TEST(KfacTorchPreconditioner, ExactInverses_ApplyTheExactlyDampedKroneckerInverse) {
  testref::deterministic(12);
  torch::nn::Sequential net = mlp(4, 5, 3);
  const torch::Tensor x = torch::randn({8, 4}), t = torch::randn({8, 3});
  const double gamma = 3e-2;
  PreconditionerOptions o;
  o.use_exact_inverses = true;
  Preconditioner pre(*net, o);
  mean_squared(net->forward(x), t).backward();
  const torch::Tensor v = stacked_grad(linear(net, 2));
  pre.step(gamma);
  const torch::Tensor expected = testref::kron_solve_exact(
      pre.factor_g(1).to(torch::kDouble), pre.factor_a(1).to(torch::kDouble), gamma, v);
  EXPECT_TRUE(near(stacked_grad(linear(net, 2)), expected, 1e-4));
}

TEST(KfacTorchPreconditioner, MultiplyPlusOneThenMinusOne_IsTheIdentityOnTheEigenRoute) {
  testref::deterministic(13);
  torch::nn::Sequential net = mlp(3, 4, 2);
  PreconditionerOptions o;
  o.use_exact_inverses = true;
  Preconditioner pre(*net, o);
  mean_squared(net->forward(torch::randn({7, 3})), torch::randn({7, 2})).backward();
  pre.update_curvature(0.1);
  std::vector<torch::Tensor> v;
  for (const torch::Tensor &p : pre.params())
    v.push_back(torch::randn(p.sizes()));
  const auto back = pre.multiply(pre.multiply(v, 1, 0.1), -1, 0.1);
  for (size_t i = 0; i < v.size(); ++i)
    EXPECT_TRUE(near(back[i], v[i], 1e-4)) << i;
}

TEST(KfacTorchPreconditioner, Conv2dStep_EqualsKroneckerSolveInTorchsWeightOrder) {
  testref::deterministic(14);
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(2, 3, 3).padding(1));
  const int64_t B = 4;
  const torch::Tensor x = torch::randn({B, 2, 5, 5}), t = torch::randn({B, 3, 5, 5});
  const double gamma = 1e-2;
  Preconditioner pre(*conv);
  mean_squared(conv->forward(x), t).backward();
  auto stacked = [&] {
    return torch::cat({conv->weight.grad().reshape({3, -1}), conv->bias.grad().reshape({3, 1})}, 1)
        .detach()
        .clone();
  };
  const torch::Tensor v = stacked();
  pre.step(gamma);
  // Independent factors in torch's (c, kh, kw) order from im2col; pi-adjusted damping and the
  // Kronecker solve do not depend on the order of A's rows.
  const torch::Tensor patches =
      F::unfold(x, F::UnfoldFuncOptions({3, 3}).padding(1)).permute({0, 2, 1}).reshape({-1, 18});
  const torch::Tensor A = covariance(patches, true, B);
  torch::Tensor s = F::conv2d(x, conv->weight.detach().clone(),
                              F::Conv2dFuncOptions().bias(conv->bias.detach().clone()).padding(1))
                        .detach()
                        .requires_grad_(true);
  const torch::Tensor gs = torch::autograd::grad({mean_squared(s, t)}, {s})[0];
  const torch::Tensor G =
      covariance((gs * B).permute({0, 2, 3, 1}).reshape({-1, 3}), false, B * 25);
  const testref::Damped d = testref::pi_damped(A, G, gamma);
  EXPECT_TRUE(near(stacked(), testref::kron_solve(d.G, d.A, v), 1e-4));
}

TEST(KfacTorchPreconditioner, EmbeddingStep_EqualsDiagonalKroneckerSolve) {
  testref::deterministic(15);
  torch::nn::Embedding emb(7, 3);
  const torch::Tensor ids = torch::randint(0, 7, {5, 4}, torch::kLong);
  const torch::Tensor t = torch::randn({5, 4, 3});
  const double gamma = 1e-2;
  for (bool exact : {false, true}) {
    PreconditionerOptions o;
    o.use_exact_inverses = exact;
    Preconditioner pre(*emb, o);
    emb->zero_grad();
    mean_squared(emb->forward(ids), t).backward();
    const torch::Tensor v = emb->weight.grad().detach().clone();
    pre.step(gamma);
    const torch::Tensor A = torch::diag(pre.factor_a(0).to(torch::kDouble));
    const torch::Tensor G = pre.factor_g(0).to(torch::kDouble);
    // Rows of the embedding's gradient are tokens (A's index): V is (dim A x dim G).
    torch::Tensor expected;
    if (exact) {
      expected = testref::kron_solve_exact(A, G, gamma, v);
    } else {
      const testref::Damped d = testref::pi_damped(A, G, gamma);
      expected = testref::kron_solve(d.A, d.G, v);
    }
    EXPECT_TRUE(near(emb->weight.grad(), expected, 1e-4)) << (exact ? "eigen" : "cholesky");
  }
}

TEST(KfacTorchPreconditioner, InverseUpdatePeriod_KeepsTheInverseBetweenRefreshes) {
  testref::deterministic(16);
  torch::nn::Sequential net = mlp(3, 4, 2);
  PreconditionerOptions o;
  o.inverse_update_period = 3;
  o.factor_decay = 0.0;
  Preconditioner pre(*net, o);
  const double gamma = 1e-2;
  torch::Tensor a0, g0;
  for (int step = 0; step < 4; ++step) {
    net->zero_grad();
    mean_squared(net->forward(torch::randn({6, 3})), torch::randn({6, 2})).backward();
    const torch::Tensor v = stacked_grad(linear(net, 2));
    pre.step(gamma);
    if (step % 3 == 0) {
      a0 = pre.factor_a(1).to(torch::kDouble);
      g0 = pre.factor_g(1).to(torch::kDouble);
    }
    // Steps 1 and 2 use step 0's inverse, though the factors moved on; step 3 refreshes.
    const testref::Damped d = testref::pi_damped(a0, g0, gamma);
    EXPECT_TRUE(near(stacked_grad(linear(net, 2)), testref::kron_solve(d.G, d.A, v), 1e-4))
        << "step " << step;
    if (step == 1) {
      EXPECT_FALSE(torch::allclose(pre.factor_a(1).to(torch::kDouble), a0));
    }
  }
}

TEST(KfacTorchPreconditioner, SkippedLayer_KeepsItsGradient) {
  testref::deterministic(17);
  torch::nn::Sequential net = mlp(3, 4, 2);
  PreconditionerOptions o;
  o.skip_layers = {"2"};
  o.log = [](const std::string &) {};
  Preconditioner pre(*net, o);
  ASSERT_EQ(pre.layers().size(), 1u);
  mean_squared(net->forward(torch::randn({6, 3})), torch::randn({6, 2})).backward();
  const torch::Tensor skipped = stacked_grad(linear(net, 2)), kept = stacked_grad(linear(net, 0));
  pre.step();
  EXPECT_TRUE(torch::equal(stacked_grad(linear(net, 2)), skipped));
  EXPECT_FALSE(torch::allclose(stacked_grad(linear(net, 0)), kept));
}

TEST(KfacTorchPreconditioner, SaveLoad_RestoresFactorsInversesAndStepCount) {
  testref::deterministic(18);
  torch::nn::Sequential net = mlp(3, 4, 2);
  PreconditionerOptions o;
  o.inverse_update_period = 4;
  Preconditioner pre(*net, o);
  for (int step = 0; step < 2; ++step) {
    net->zero_grad();
    mean_squared(net->forward(torch::randn({6, 3})), torch::randn({6, 2})).backward();
    pre.step();
  }
  const std::string path = ::testing::TempDir() + "kfac_torch_preconditioner.pt";
  pre.save(path);

  Preconditioner other(*net, o);
  other.load(path);
  EXPECT_EQ(other.steps(), 2);
  EXPECT_TRUE(torch::equal(other.factor_a(0), pre.factor_a(0)));
  EXPECT_TRUE(torch::equal(other.factor_g(1), pre.factor_g(1)));
  // The next step is not an inverse step: both apply the same cached inverse.
  std::vector<torch::Tensor> v;
  for (const torch::Tensor &p : pre.params())
    v.push_back(torch::randn(p.sizes()));
  const auto a = pre.multiply(v, -1, o.damping), b = other.multiply(v, -1, o.damping);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::equal(a[i], b[i])) << i;

  // A preconditioner of another network refuses the file, naming what differs.
  torch::nn::Sequential wider = mlp(3, 5, 2);
  Preconditioner mismatched(*wider, o);
  try {
    mismatched.load(path);
    FAIL() << "load accepted a state of other layer sizes";
  } catch (const hkfac::Error &e) {
    EXPECT_NE(std::string(e.what()).find("g_sum"), std::string::npos) << e.what();
  }
  EXPECT_EQ(mismatched.steps(), 0);
  std::remove(path.c_str());
}

} // namespace
} // namespace hkfac::kfac_torch
