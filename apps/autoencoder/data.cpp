// Dataset loading: random vectors, or the Fashion-MNIST training images.
#include "data.h"

#include <algorithm>

#include "hkfac/error.h"
#include "idx.h"

namespace autoencoder {

Dataset Dataset::load(const std::string &kind, const std::string &mnist_dir, unsigned seed,
                      int random_examples) {
  Dataset d;
  d.rng_.seed(seed);
  if (kind == "random") {
    if (random_examples < 1) {
      throw hkfac::Error("random data: need at least 1 example, got " +
                         std::to_string(random_examples));
    }
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    d.examples_ =
        hkfac::kfac::Matrix::NullaryExpr(random_examples, 20, [&]() { return u(d.rng_); });
  } else if (kind == "fashion_mnist") {
    const std::string path = mnist_dir + "/train-images-idx3-ubyte.gz";
    d.examples_ = hkfac::apps::read_idx_images(path);
    // Batches are drawn from the pool, and the model is built for 28x28 images.
    if (d.examples_.rows() == 0)
      throw hkfac::Error("fashion_mnist: '" + path + "' holds no images");
    if (d.examples_.cols() != kFashionMnistPixels) {
      throw hkfac::Error("fashion_mnist: '" + path + "' holds images of " +
                         std::to_string(d.examples_.cols()) +
                         " pixels, expected 28x28 = " + std::to_string(kFashionMnistPixels));
    }
  } else {
    throw hkfac::Error("--data must be random or fashion_mnist, got '" + kind + "'");
  }
  return d;
}

hkfac::kfac::Batch Dataset::next_shard(int batch_size, int first, int count) {
  std::uniform_int_distribution<int> pick(0, size() - 1);
  hkfac::kfac::Batch b;
  b.inputs.resize(count, dim());
  for (int i = 0; i < batch_size; ++i) {
    const int example = pick(rng_);
    if (i >= first && i < first + count)
      b.inputs.row(i - first) = examples_.row(example);
  }
  b.targets = b.inputs;
  return b;
}

void Dataset::skip_batches(long batches, int batch_size) {
  std::uniform_int_distribution<int> pick(0, size() - 1);
  for (long i = 0; i < batches * batch_size; ++i)
    pick(rng_);
}

hkfac::kfac::Batch Dataset::slice(int first, int count) const {
  first = std::clamp(first, 0, size());
  count = std::clamp(count, 0, size() - first);
  hkfac::kfac::Batch b;
  b.inputs = examples_.middleRows(first, count);
  b.targets = b.inputs;
  return b;
}

} // namespace autoencoder
