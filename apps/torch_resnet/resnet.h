// The benchmark's network: a small residual network for 28x28 grey images, in plain torch::nn.
#pragma once

#include <torch/torch.h>

namespace torch_resnet {

// relu(x + conv(relu(conv(x)))), two 3x3 'same' convolutions of `channels` channels.
struct ResidualBlockImpl : torch::nn::Module {
  explicit ResidualBlockImpl(int64_t channels);
  torch::Tensor forward(torch::Tensor x);
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
};
TORCH_MODULE(ResidualBlock);

// 28x28x1 -> stem 3x3 conv to 16 channels -> block -> strided conv to 14x14x32 -> block ->
// strided conv to 7x7x64 -> block -> global average pool -> linear to the 10 logits: nine
// convolutions and one linear layer, all of which K-FAC preconditions (no normalisation layers,
// so the comparison is of the optimizers alone).
struct ResNetImpl : torch::nn::Module {
  ResNetImpl();
  torch::Tensor forward(torch::Tensor x);
  torch::nn::Conv2d stem{nullptr}, down1{nullptr}, down2{nullptr};
  ResidualBlock block0{nullptr}, block1{nullptr}, block2{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(ResNet);

} // namespace torch_resnet
