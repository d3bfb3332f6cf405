#include "resnet.h"

namespace torch_resnet {
namespace {

torch::nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1));
}

} // namespace

ResidualBlockImpl::ResidualBlockImpl(int64_t channels)
    : conv1(register_module("conv1", conv3x3(channels, channels, 1))),
      conv2(register_module("conv2", conv3x3(channels, channels, 1))) {}

torch::Tensor ResidualBlockImpl::forward(torch::Tensor x) {
  return torch::relu(x + conv2->forward(torch::relu(conv1->forward(x))));
}

ResNetImpl::ResNetImpl()
    : stem(register_module("stem", conv3x3(1, 16, 1))),
      down1(register_module("down1", conv3x3(16, 32, 2))),
      down2(register_module("down2", conv3x3(32, 64, 2))),
      block0(register_module("block0", ResidualBlock(16))),
      block1(register_module("block1", ResidualBlock(32))),
      block2(register_module("block2", ResidualBlock(64))),
      head(register_module("head", torch::nn::Linear(64, 10))) {}

torch::Tensor ResNetImpl::forward(torch::Tensor x) {
  x = block0->forward(torch::relu(stem->forward(x)));
  x = block1->forward(torch::relu(down1->forward(x)));
  x = block2->forward(torch::relu(down2->forward(x)));
  return head->forward(x.mean({2, 3}));
}

} // namespace torch_resnet
