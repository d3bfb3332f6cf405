// Training data for the autoencoder: random vectors or Fashion-MNIST images.
#pragma once

#include <random>
#include <string>

#include "hkfac/kfac/types.h"

namespace autoencoder {

constexpr int kFashionMnistPixels = 28 * 28;

// A fixed pool of examples, served as shuffled mini-batches whose targets are the inputs.
class Dataset {
public:
  // "random": `random_examples` vectors of 20 uniform values in [0, 1];
  // "fashion_mnist": the 60000 training images (784 pixels scaled to [0, 1]) read from
  // `mnist_dir`. Throws hkfac::Error naming the file when it cannot be read, holds no images or
  // images of another size.
  static Dataset load(const std::string &kind, const std::string &mnist_dir, unsigned seed,
                      int random_examples = 10000);

  int dim() const { return static_cast<int>(examples_.cols()); }
  int size() const { return static_cast<int>(examples_.rows()); }
  hkfac::kfac::Batch next_batch(int batch_size) { return next_shard(batch_size, 0, batch_size); }
  // Rows [first, first + count) of the next batch of `batch_size`: every rank of a data-parallel
  // run draws the same global batches and copies only its own shard of each.
  hkfac::kfac::Batch next_shard(int batch_size, int first, int count);
  // Advances the shuffling as `batches` calls of next_batch(batch_size) would, without copying
  // examples: a resumed run continues with the batches the saved run would have drawn next.
  void skip_batches(long batches, int batch_size);
  // Examples [first, first + count) in order (clipped to the pool), for a fixed evaluation set.
  hkfac::kfac::Batch slice(int first, int count) const;

private:
  hkfac::kfac::Matrix examples_;
  std::mt19937 rng_;
};

} // namespace autoencoder
