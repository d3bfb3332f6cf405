// hkfac::kfac_torch from the installed package: a K-FAC preconditioner over a one-Linear LibTorch
// model takes one step, and the step changes the gradient it preconditions.
#include <hkfac/kfac_torch/preconditioner.h>
#include <torch/torch.h>

#include <cstdio>

int main() {
  torch::manual_seed(1);
  torch::nn::Linear model(4, 2);
  hkfac::kfac_torch::Preconditioner kfac(*model);
  const torch::Tensor x = torch::randn({8, 4}), y = torch::randn({8, 2});
  torch::mse_loss(model->forward(x), y).backward();
  const torch::Tensor g = model->weight.grad().clone();
  kfac.step();
  const torch::Tensor u = model->weight.grad();
  if (kfac.layers().size() != 1 || kfac.steps() != 1 || !u.isfinite().all().item<bool>() ||
      torch::allclose(u, g)) {
    std::printf("kfac_torch example failed: %zu layers, %lld steps\n", kfac.layers().size(),
                static_cast<long long>(kfac.steps()));
    return 1;
  }
  std::printf("kfac_torch example ok: one preconditioned step over a Linear layer\n");
  return 0;
}
