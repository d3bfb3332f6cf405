// The layers kfac_torch finds and the factors it captures from a LibTorch model's own forward and
// backward, against brute-force computations and hkfac's own Sequential K-FAC.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <random>
#include <string>
#include <vector>

#include "hkfac/kfac/blocks/dense_two_kronecker_factored.h"
#include "hkfac/kfac/estimator.h"
#include "hkfac/kfac/layers.h"
#include "hkfac/kfac_torch/preconditioner.h"
#include "reference.h"

namespace hkfac::kfac_torch {
namespace {

namespace F = torch::nn::functional;
using testref::covariance;
using testref::near;

// A two-layer tanh MLP and its per-example quantities, computed on copies of its weights (so the
// preconditioner under test does not see these calls).
struct Mlp {
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::Sequential net{nullptr};
  Mlp(int64_t in, int64_t hidden, int64_t out) {
    fc1 = torch::nn::Linear(in, hidden);
    fc2 = torch::nn::Linear(hidden, out);
    net = torch::nn::Sequential(fc1, torch::nn::Tanh(), fc2);
  }
  // Loss: mean over examples of ||y - t||², hkfac's squared-error loss averaged.
  static torch::Tensor loss(const torch::Tensor &y, const torch::Tensor &t) {
    return (y - t).pow(2).sum(1).mean();
  }

  struct Reference {
    torch::Tensor a1, g1, a2, g2;
  };
  // A = X̄ᵀX̄/B over each layer's inputs, G = DSᵀDS/B over the per-example gradients of the
  // summed loss (B times the mean loss's) with respect to each layer's output.
  Reference reference(const torch::Tensor &x, const torch::Tensor &t) const {
    const torch::Tensor w1 = fc1->weight.detach().clone(), b1 = fc1->bias.detach().clone();
    const torch::Tensor w2 = fc2->weight.detach().clone(), b2 = fc2->bias.detach().clone();
    const double B = static_cast<double>(x.size(0));
    torch::Tensor s1 = (x.mm(w1.t()) + b1).detach().requires_grad_(true);
    const torch::Tensor h = torch::tanh(s1);
    torch::Tensor s2 = h.mm(w2.t()) + b2;
    const auto grads = torch::autograd::grad({loss(s2, t)}, {s1, s2});
    return {covariance(x, true, B), covariance(grads[0] * B, false, B),
            covariance(h.detach(), true, B), covariance(grads[1] * B, false, B)};
  }
};

TEST(KfacTorchCapture, MlpFactors_EqualBruteForceAndHkfacSequential) {
  testref::deterministic(1);
  Mlp m(5, 7, 3);
  const torch::Tensor x = torch::randn({11, 5}), t = torch::randn({11, 3});
  Preconditioner pre(*m.net);
  ASSERT_EQ(pre.layers().size(), 2u);
  EXPECT_EQ(pre.layers()[0].name, "0");
  EXPECT_EQ(pre.layers()[1].name, "2");
  EXPECT_EQ(pre.layers()[0].a_dim, 6);
  EXPECT_EQ(pre.layers()[0].g_dim, 7);
  ASSERT_TRUE(pre.capturing());

  Mlp::loss(m.net->forward(x), t).backward();
  pre.update_curvature(1e-2);
  const Mlp::Reference ref = m.reference(x, t);
  EXPECT_TRUE(near(pre.factor_a(0), ref.a1, 1e-5));
  EXPECT_TRUE(near(pre.factor_g(0), ref.g1, 1e-5));
  EXPECT_TRUE(near(pre.factor_a(1), ref.a2, 1e-5));
  EXPECT_TRUE(near(pre.factor_g(1), ref.g2, 1e-5));

  // hkfac's own K-FAC on the same network (W = the torch weight transposed), with the real
  // targets' gradients as the user's backward has them: fisher_empirical.
  kfac::Sequential seq(5);
  seq.add<kfac::Dense>(5, 7, kfac::Activation::tanh);
  seq.add<kfac::Dense>(7, 3);
  const kfac::Params params{testref::to_matrix(m.fc1->weight.detach().t()),
                            testref::to_matrix(m.fc1->bias.detach().reshape({1, -1})),
                            testref::to_matrix(m.fc2->weight.detach().t()),
                            testref::to_matrix(m.fc2->bias.detach().reshape({1, -1}))};
  kfac::Batch batch;
  batch.inputs = testref::to_matrix(x);
  batch.targets = testref::to_matrix(t);
  const kfac::Matrix out = seq.forward(params, batch);
  kfac::LossRegistry losses;
  losses.register_squared_error_loss(out, &batch.targets);
  kfac::CurvatureEstimator est(seq, kfac::EstimationMode::fisher_empirical);
  std::mt19937 rng(0);
  ASSERT_TRUE(est.update_curvature_estimate(seq, losses, 0.0f, 1.0f, rng));
  for (size_t i = 0; i < 2; ++i) {
    const auto &block = dynamic_cast<const kfac::DenseTwoKroneckerFactored &>(*est.blocks()[i]);
    EXPECT_TRUE(near(pre.factor_a(i), testref::to_tensor(block.factor_a()), 1e-5)) << i;
    EXPECT_TRUE(near(pre.factor_g(i), testref::to_tensor(block.factor_g()), 1e-5)) << i;
  }
}

TEST(KfacTorchCapture, FactorsAreAMovingAverageOfTheCapturedBatches) {
  testref::deterministic(2);
  Mlp m(4, 3, 2);
  PreconditionerOptions o;
  o.factor_decay = 0.5;
  Preconditioner pre(*m.net, o);
  std::vector<Mlp::Reference> refs;
  for (int step = 0; step < 3; ++step) {
    const torch::Tensor x = torch::randn({6 + step, 4}), t = torch::randn({6 + step, 2});
    Mlp::loss(m.net->forward(x), t).backward();
    refs.push_back(m.reference(x, t));
    pre.update_curvature(1e-2);
  }
  // w = 0.25 + 0.5 + 1, S = 0.25 X0 + 0.5 X1 + X2.
  const torch::Tensor expected =
      (0.25 * refs[0].g2 + 0.5 * refs[1].g2 + refs[2].g2) / (0.25 + 0.5 + 1.0);
  EXPECT_TRUE(near(pre.factor_g(1), expected, 1e-5));
}

TEST(KfacTorchCapture, FactorUpdatePeriod_CapturesOnlyOnFactorSteps) {
  testref::deterministic(3);
  Mlp m(4, 3, 2);
  PreconditionerOptions o;
  o.factor_update_period = 2;
  o.factor_decay = 0.0; // each update replaces the estimate: shows which batch it came from
  Preconditioner pre(*m.net, o);
  std::vector<Mlp::Reference> refs;
  std::vector<torch::Tensor> a_after;
  for (int step = 0; step < 3; ++step) {
    EXPECT_EQ(pre.capturing(), step % 2 == 0) << step;
    const torch::Tensor x = torch::randn({5, 4}), t = torch::randn({5, 2});
    Mlp::loss(m.net->forward(x), t).backward();
    refs.push_back(m.reference(x, t));
    pre.update_curvature(1e-2);
    a_after.push_back(pre.factor_a(0));
  }
  EXPECT_TRUE(near(a_after[0], refs[0].a1, 1e-5));
  EXPECT_TRUE(torch::equal(a_after[1], a_after[0])); // step 1 captured nothing
  EXPECT_TRUE(near(a_after[2], refs[2].a1, 1e-5));
}

TEST(KfacTorchCapture, GradientAccumulation_AveragesEveryCapturedRow) {
  testref::deterministic(10);
  Mlp m(4, 3, 2);
  Preconditioner pre(*m.net);
  const torch::Tensor x1 = torch::randn({5, 4}), x2 = torch::randn({3, 4});
  const torch::Tensor t1 = torch::randn({5, 2}), t2 = torch::randn({3, 2});
  Mlp::loss(m.net->forward(x1), t1).backward();
  Mlp::loss(m.net->forward(x2), t2).backward();
  pre.update_curvature(1e-2);
  const Mlp::Reference r1 = m.reference(x1, t1), r2 = m.reference(x2, t2);
  // Row sums over both micro-batches, over all 8 rows.
  EXPECT_TRUE(near(pre.factor_a(0), (5 * r1.a1 + 3 * r2.a1) / 8, 1e-5));
  EXPECT_TRUE(near(pre.factor_g(1), (5 * r1.g2 + 3 * r2.g2) / 8, 1e-5));
}

TEST(KfacTorchCapture, CallsWithoutGradModeAreNotCaptured) {
  testref::deterministic(4);
  Mlp m(4, 3, 2);
  Preconditioner pre(*m.net);
  const torch::Tensor x = torch::randn({5, 4}), t = torch::randn({5, 2});
  {
    torch::NoGradGuard no_grad;
    m.net->forward(torch::randn({9, 4})); // an evaluation pass: no gradient, no statistics
  }
  Mlp::loss(m.net->forward(x), t).backward();
  pre.update_curvature(1e-2);
  EXPECT_TRUE(near(pre.factor_a(0), m.reference(x, t).a1, 1e-5));
}

TEST(KfacTorchCapture, LinearOnSequences_FlattensLeadingDimensions) {
  testref::deterministic(5);
  torch::nn::Linear fc(3, 2);
  Preconditioner pre(*fc);
  const torch::Tensor x = torch::randn({4, 6, 3}), t = torch::randn({4, 6, 2});
  // A 3-D input goes through matmul (F::linear's path for it), then the bias is added in place.
  (fc->forward(x) - t).pow(2).sum({1, 2}).mean().backward();
  pre.update_curvature(1e-2);
  const torch::Tensor w = fc->weight.detach().clone(), b = fc->bias.detach().clone();
  torch::Tensor s = (x.matmul(w.t()) + b).detach().requires_grad_(true);
  const torch::Tensor gs = torch::autograd::grad({(s - t).pow(2).sum({1, 2}).mean()}, {s})[0];
  // Rows are the 24 positions; the mean over the 4 sequences scales each gradient by 1/4.
  EXPECT_TRUE(near(pre.factor_a(0), covariance(x.reshape({-1, 3}), true, 24), 1e-5));
  EXPECT_TRUE(near(pre.factor_g(0), covariance((gs * 4).reshape({-1, 2}), false, 24), 1e-5));
}

TEST(KfacTorchCapture, Conv2dFactors_EqualIm2colComputation) {
  testref::deterministic(6);
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(3, 4, 3).stride(2).padding(1));
  Preconditioner pre(*conv);
  ASSERT_EQ(pre.layers().size(), 1u);
  EXPECT_EQ(pre.layers()[0].a_dim, 3 * 3 * 3 + 1);
  const int64_t B = 5;
  const torch::Tensor x = torch::randn({B, 3, 8, 8}), t = torch::randn({B, 4, 4, 4});
  auto loss = [](const torch::Tensor &y, const torch::Tensor &t) {
    return (y - t).pow(2).sum({1, 2, 3}).mean();
  };
  loss(conv->forward(x), t).backward();
  pre.update_curvature(1e-2);

  // im2col by unfold: (B, C·kh·kw, L) with columns ordered (c, kh, kw).
  const torch::Tensor patches =
      F::unfold(x, F::UnfoldFuncOptions({3, 3}).padding(1).stride(2)).permute({0, 2, 1});
  const int64_t L = patches.size(1);
  ASSERT_EQ(L, 16);
  // KFC: A sums over an example's locations and averages over examples.
  const torch::Tensor a_torch_order = covariance(patches.reshape({B * L, 27}), true, B);
  torch::Tensor s =
      F::conv2d(x, conv->weight.detach().clone(),
                F::Conv2dFuncOptions().bias(conv->bias.detach().clone()).stride(2).padding(1))
          .detach()
          .requires_grad_(true);
  const torch::Tensor gs = torch::autograd::grad({loss(s, t)}, {s})[0];
  const torch::Tensor g_ref =
      covariance((gs * B).permute({0, 2, 3, 1}).reshape({-1, 4}), false, B * L);
  // kfac_torch orders a patch (kh, kw, c), the patch-covariance kernel's order.
  std::vector<int64_t> perm;
  for (int64_t kh = 0; kh < 3; ++kh)
    for (int64_t kw = 0; kw < 3; ++kw)
      for (int64_t c = 0; c < 3; ++c)
        perm.push_back(c * 9 + kh * 3 + kw);
  perm.push_back(27); // the bias's 1
  const torch::Tensor idx = torch::tensor(perm, torch::kLong);
  const torch::Tensor a_ref = a_torch_order.index_select(0, idx).index_select(1, idx);
  EXPECT_TRUE(near(pre.factor_a(0), a_ref, 1e-5));
  EXPECT_TRUE(near(pre.factor_g(0), g_ref, 1e-5));
}

TEST(KfacTorchCapture, Conv2dReflectPadding_SeesThePaddedInput) {
  testref::deterministic(7);
  torch::nn::Conv2d conv(
      torch::nn::Conv2dOptions(2, 3, 3).padding(1).bias(false).padding_mode(torch::kReflect));
  Preconditioner pre(*conv);
  const int64_t B = 3;
  const torch::Tensor x = torch::randn({B, 2, 5, 5});
  conv->forward(x).pow(2).sum({1, 2, 3}).mean().backward();
  pre.update_curvature(1e-2);
  const torch::Tensor padded = F::pad(x, F::PadFuncOptions({1, 1, 1, 1}).mode(torch::kReflect));
  const torch::Tensor patches = F::unfold(padded, F::UnfoldFuncOptions({3, 3})).permute({0, 2, 1});
  std::vector<int64_t> perm;
  for (int64_t kh = 0; kh < 3; ++kh)
    for (int64_t kw = 0; kw < 3; ++kw)
      for (int64_t c = 0; c < 2; ++c)
        perm.push_back(c * 9 + kh * 3 + kw);
  const torch::Tensor idx = torch::tensor(perm, torch::kLong);
  const torch::Tensor a_ref =
      covariance(patches.reshape({-1, 18}), false, B).index_select(0, idx).index_select(1, idx);
  EXPECT_TRUE(near(pre.factor_a(0), a_ref, 1e-5));
}

TEST(KfacTorchCapture, EmbeddingFactorA_IsTheTokenCounts) {
  testref::deterministic(8);
  torch::nn::Embedding emb(10, 4);
  Preconditioner pre(*emb);
  ASSERT_EQ(pre.layers().size(), 1u);
  EXPECT_EQ(pre.layers()[0].kind, LayerKind::embedding);
  const int64_t B = 6, T = 5;
  const torch::Tensor ids = torch::randint(0, 10, {B, T}, torch::kLong);
  const torch::Tensor t = torch::randn({B, T, 4});
  auto loss = [](const torch::Tensor &y, const torch::Tensor &t) {
    return (y - t).pow(2).sum({1, 2}).mean();
  };
  loss(emb->forward(ids), t).backward();
  pre.update_curvature(1e-2);
  const torch::Tensor counts = torch::bincount(ids.reshape({-1}), {}, 10).to(torch::kDouble);
  EXPECT_TRUE(near(pre.factor_a(0), counts / (B * T), 1e-6));
  torch::Tensor s = emb->weight.detach()
                        .clone()
                        .index_select(0, ids.reshape({-1}))
                        .reshape({B, T, 4})
                        .detach()
                        .requires_grad_(true);
  const torch::Tensor gs = torch::autograd::grad({loss(s, t)}, {s})[0];
  EXPECT_TRUE(near(pre.factor_g(0), covariance((gs * B).reshape({-1, 4}), false, B * T), 1e-5));
}

TEST(KfacTorchCapture, EmbeddingPaddingIndex_TakesNoPartInTheFactors) {
  testref::deterministic(9);
  torch::nn::Embedding emb(torch::nn::EmbeddingOptions(6, 3).padding_idx(0));
  Preconditioner pre(*emb);
  const torch::Tensor ids = torch::tensor({1, 0, 2, 2, 0, 5, 1, 1}, torch::kLong).reshape({2, 4});
  emb->forward(ids).pow(2).sum({1, 2}).mean().backward();
  pre.update_curvature(1e-2);
  // Six non-padding tokens: 1 three times, 2 twice, 5 once.
  const torch::Tensor expected = torch::tensor({0.0, 3.0, 2.0, 0.0, 0.0, 1.0}, torch::kDouble) / 6;
  EXPECT_TRUE(near(pre.factor_a(0), expected, 1e-6));
}

// A model with parameters of its own, a LayerNorm and a grouped convolution beside known layers.
struct MixedImpl : torch::nn::Module {
  MixedImpl() {
    fc = register_module("fc", torch::nn::Linear(4, 4));
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({4})));
    grouped =
        register_module("grouped", torch::nn::Conv2d(torch::nn::Conv2dOptions(2, 2, 1).groups(2)));
    head = register_module("head", torch::nn::Linear(4, 2));
    scale = register_parameter("scale", torch::ones({4}));
  }
  torch::nn::Linear fc{nullptr}, head{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Conv2d grouped{nullptr};
  torch::Tensor scale;
};
TORCH_MODULE(Mixed);

TEST(KfacTorchCapture, Discovery_FindsKnownLayersAndSaysOnceWhatItLeaves) {
  Mixed model;
  std::vector<std::string> messages;
  PreconditionerOptions o;
  o.log = [&](const std::string &m) { messages.push_back(m); };
  o.skip_layers = {"he.*"};
  Preconditioner pre(*model, o);
  ASSERT_EQ(pre.layers().size(), 1u);
  EXPECT_EQ(pre.layers()[0].name, "fc");
  ASSERT_EQ(messages.size(), 1u);
  std::vector<std::string> names;
  for (const UnhandledModule &u : pre.unhandled())
    names.push_back(u.name);
  EXPECT_EQ(names, (std::vector<std::string>{"", "norm", "grouped", "head"}));
  EXPECT_NE(pre.unhandled()[1].type.find("LayerNorm"), std::string::npos);
  EXPECT_EQ(pre.unhandled()[3].reason, "skipped by name");
  for (const char *n : {"'norm'", "'grouped'", "'head'", "LayerNorm"})
    EXPECT_NE(messages[0].find(n), std::string::npos) << n << " in: " << messages[0];
  // fc's weight and bias first, then every other parameter.
  EXPECT_EQ(pre.num_preconditioned_params(), 2u);
  EXPECT_EQ(pre.params().size(), model->parameters().size());
}

} // namespace
} // namespace hkfac::kfac_torch
