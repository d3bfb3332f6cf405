// KfacOptimizer on LibTorch models: training, layers left to the base optimizer, the KL clip,
// adaptive damping, and a resumed run against an uninterrupted one.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "hkfac/kfac_torch/optimizer.h"
#include "reference.h"

namespace hkfac::kfac_torch {
namespace {

// y = head(x + inner2(tanh(inner1(x)))): a residual block and a linear head.
struct ResidualImpl : torch::nn::Module {
  ResidualImpl(int64_t d, int64_t hidden, int64_t out) {
    inner1 = register_module("inner1", torch::nn::Linear(d, hidden));
    inner2 = register_module("inner2", torch::nn::Linear(hidden, d));
    head = register_module("head", torch::nn::Linear(d, out));
  }
  torch::Tensor forward(const torch::Tensor &x) { return head(x + inner2(torch::tanh(inner1(x)))); }
  torch::nn::Linear inner1{nullptr}, inner2{nullptr}, head{nullptr};
};
TORCH_MODULE(Residual);

torch::Tensor mean_squared(const torch::Tensor &y, const torch::Tensor &t) {
  return (y - t).pow(2).sum(1).mean();
}

// A regression task: targets from a fixed random teacher network.
struct Task {
  torch::Tensor x, y;
  explicit Task(int64_t n, uint64_t seed = 42) {
    torch::manual_seed(seed);
    x = torch::randn({n, 6});
    const torch::Tensor w1 = torch::randn({6, 10}) / std::sqrt(6.0),
                        w2 = torch::randn({10, 3}) / std::sqrt(10.0);
    y = torch::tanh(x.mm(w1)).mm(w2);
  }
  // The step's mini-batch: rows [16·step, 16·step + 16) of the task, cyclically.
  std::pair<torch::Tensor, torch::Tensor> batch(int step) const {
    const int64_t b = 16, first = (step * b) % x.size(0);
    return {x.narrow(0, first, b), y.narrow(0, first, b)};
  }
};

double train_step(Residual &model, KfacOptimizer &opt, const Task &task, int step) {
  const auto [x, y] = task.batch(step);
  opt.zero_grad();
  torch::Tensor loss = mean_squared(model->forward(x), y);
  loss.backward();
  opt.step();
  return loss.item<double>();
}

double full_loss(Residual &model, const Task &task) {
  torch::NoGradGuard no_grad;
  return mean_squared(model->forward(task.x), task.y).item<double>();
}

KfacOptimizerOptions training_options() {
  KfacOptimizerOptions o;
  o.learning_rate = 0.1;
  o.momentum = 0.5;
  o.damping = 1e-2;
  o.kl_clip = 1e-2;
  o.preconditioner.factor_update_period = 2;
  o.preconditioner.inverse_update_period = 3;
  return o;
}

TEST(KfacTorchOptimizer, ResidualModel_LossFalls) {
  testref::deterministic(21);
  const Task task(128);
  torch::manual_seed(1);
  Residual model(6, 12, 3);
  KfacOptimizer opt(*model, training_options());
  EXPECT_EQ(opt.preconditioner().layers().size(), 3u);
  const double before = full_loss(model, task);
  for (int step = 0; step < 40; ++step)
    train_step(model, opt, task, step);
  const double after = full_loss(model, task);
  EXPECT_LT(after, 0.5 * before) << "loss " << before << " -> " << after;
}

TEST(KfacTorchOptimizer, PreconditionerBeforeTorchSgd_LossFalls) {
  testref::deterministic(26);
  const Task task(128);
  torch::manual_seed(2);
  Residual model(6, 12, 3);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.5));
  PreconditionerOptions o;
  o.damping = 3e-2;
  Preconditioner pre(*model, o);
  const double before = full_loss(model, task);
  for (int step = 0; step < 40; ++step) {
    const auto [x, y] = task.batch(step);
    sgd.zero_grad();
    mean_squared(model->forward(x), y).backward();
    pre.step();
    sgd.step();
  }
  const double after = full_loss(model, task);
  EXPECT_LT(after, 0.5 * before) << "loss " << before << " -> " << after;
}

TEST(KfacTorchOptimizer, ResumedRun_EqualsUninterruptedRun) {
  testref::deterministic(22);
  const Task task(64);
  torch::manual_seed(3);
  Residual uninterrupted(6, 8, 3);
  KfacOptimizer opt_a(*uninterrupted, training_options());
  for (int step = 0; step < 7; ++step)
    train_step(uninterrupted, opt_a, task, step);

  torch::manual_seed(3);
  Residual first_half(6, 8, 3);
  const std::string path = ::testing::TempDir() + "kfac_torch_resume.pt";
  {
    KfacOptimizer opt_b(*first_half, training_options());
    for (int step = 0; step < 4; ++step)
      train_step(first_half, opt_b, task, step);
    torch::serialize::OutputArchive archive;
    torch::serialize::OutputArchive model_archive(archive.compilation_unit());
    first_half->save(model_archive);
    archive.write("model", model_archive);
    opt_b.save(archive);
    archive.save_to(path);
  }

  torch::manual_seed(99); // other initial weights: all of them come from the checkpoint
  Residual resumed(6, 8, 3);
  KfacOptimizer opt_c(*resumed, training_options());
  torch::serialize::InputArchive archive;
  archive.load_from(path);
  torch::serialize::InputArchive model_archive;
  archive.read("model", model_archive);
  resumed->load(model_archive);
  opt_c.load(archive);
  EXPECT_EQ(opt_c.steps(), 4);
  for (int step = 4; step < 7; ++step)
    train_step(resumed, opt_c, task, step);

  const auto a = uninterrupted->named_parameters(), c = resumed->named_parameters();
  ASSERT_EQ(a.size(), c.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::equal(a[i].value(), c[i].value())) << a[i].key();
  std::remove(path.c_str());
}

TEST(KfacTorchOptimizer, UnknownLayerKind_IsLeftToTheBaseOptimizerAndReportedOnce) {
  testref::deterministic(23);
  torch::nn::Sequential net(torch::nn::Linear(6, 8),
                            torch::nn::LayerNorm(torch::nn::LayerNormOptions({8})),
                            torch::nn::Tanh(), torch::nn::Linear(8, 3));
  auto &norm = *net->ptr(1)->as<torch::nn::LayerNormImpl>();
  std::vector<std::string> messages;
  KfacOptimizerOptions o = training_options();
  o.momentum = 0.0;
  o.kl_clip.reset();
  o.preconditioner.log = [&](const std::string &m) { messages.push_back(m); };
  KfacOptimizer opt(*net, o);
  EXPECT_EQ(opt.preconditioner().layers().size(), 2u);
  const Task task(64);
  auto loss_of = [&] {
    torch::NoGradGuard no_grad;
    return mean_squared(net->forward(task.x), task.y).item<double>();
  };
  const double before = loss_of();
  for (int step = 0; step < 30; ++step) {
    const auto [x, y] = task.batch(step);
    opt.zero_grad();
    mean_squared(net->forward(x), y).backward();
    const torch::Tensor w = norm.weight.detach().clone(), g = norm.weight.grad().clone();
    opt.step();
    // Plain gradient descent on the layer K-FAC does not know.
    EXPECT_TRUE(testref::near(norm.weight.detach(), w - o.learning_rate * g, 1e-6)) << step;
  }
  EXPECT_LT(loss_of(), before);
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_NE(messages[0].find("LayerNorm"), std::string::npos) << messages[0];
}

TEST(KfacTorchOptimizer, KlClip_ScalesTheStepSoThatItsKlEqualsTheBound) {
  testref::deterministic(24);
  torch::nn::Sequential net(torch::nn::Linear(4, 5), torch::nn::Tanh(), torch::nn::Linear(5, 2));
  torch::nn::Sequential twin(std::dynamic_pointer_cast<torch::nn::SequentialImpl>(net->clone()));
  const torch::Tensor x = torch::randn({10, 4}), y = torch::randn({10, 2});
  KfacOptimizerOptions o;
  o.learning_rate = 1.0;
  o.momentum = 0.0;
  KfacOptimizerOptions clipped = o;
  clipped.kl_clip = 1e-4;
  KfacOptimizer free_opt(*twin, o), clip_opt(*net, clipped);
  std::vector<torch::Tensor> before, g;
  for (const torch::Tensor &p : twin->parameters())
    before.push_back(p.detach().clone());
  mean_squared(twin->forward(x), y).backward();
  mean_squared(net->forward(x), y).backward();
  for (const torch::Tensor &p : twin->parameters())
    g.push_back(p.grad().clone());
  free_opt.step();
  const KfacStepStats s = clip_opt.step();
  ASSERT_LT(s.clip_scale, 1.0);
  // u = -Δ_free / lr; the clipped step is ν·Δ_free with lr²·ν²·⟨u, g⟩ = C.
  double ug = 0.0;
  const auto pf = twin->parameters(), pc = net->parameters();
  for (size_t i = 0; i < pf.size(); ++i) {
    const torch::Tensor delta_free = pf[i].detach() - before[i];
    const torch::Tensor delta_clip = pc[i].detach() - before[i];
    EXPECT_TRUE(testref::near(delta_clip, s.clip_scale * delta_free, 1e-5)) << i;
    ug += (-delta_free / o.learning_rate * g[i]).sum().item<double>();
  }
  EXPECT_NEAR(o.learning_rate * o.learning_rate * s.clip_scale * s.clip_scale * ug, 1e-4, 1e-8);
}

TEST(KfacTorchOptimizer, AdaptiveDamping_FollowsTheReductionRatio) {
  testref::deterministic(25);
  const Task task(64);
  torch::manual_seed(4);
  Residual model(6, 8, 3);
  KfacOptimizerOptions o = training_options();
  o.use_adaptive_damping = true;
  o.damping_adaptation_interval = 2;
  o.damping = 1e-1;
  KfacOptimizer opt(*model, o);
  const double decay = std::pow(0.95, 2);
  int measured = 0;
  for (int step = 0; step < 8; ++step) {
    const auto batch = task.batch(step);
    const torch::Tensor &x = batch.first, &y = batch.second; // captured below: not a binding
    opt.zero_grad();
    torch::Tensor loss = mean_squared(model->forward(x), y);
    loss.backward();
    const double damping = opt.damping();
    const KfacStepStats s = opt.step(loss.item<double>(), [&] {
      torch::NoGradGuard no_grad;
      return mean_squared(model->forward(x), y).item<double>();
    });
    EXPECT_EQ(s.rho.has_value(), step % 2 == 1) << step;
    if (!s.rho)
      continue;
    ++measured;
    ASSERT_TRUE(std::isfinite(*s.rho));
    const double expected = *s.rho > 0.75   ? damping * decay
                            : *s.rho < 0.25 ? damping / decay
                                            : damping;
    EXPECT_NEAR(opt.damping(), expected, 1e-12 * expected) << step;
  }
  EXPECT_EQ(measured, 4);
}

} // namespace
} // namespace hkfac::kfac_torch
