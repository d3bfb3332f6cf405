// Dataset loading: random vectors, or Fashion-MNIST idx files (gzip) via zlib.
#include "data.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "hkfac/error.h"

namespace autoencoder {
namespace {

uint32_t big_endian(const unsigned char *p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

// Reads an idx3-ubyte image file (optionally gzip-compressed) into one row per image.
hkfac::kfac::Matrix read_idx_images(const std::string &path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f)
    throw hkfac::Error("fashion_mnist: cannot open '" + path + "'");
  unsigned char header[16];
  if (gzread(f, header, 16) != 16 || big_endian(header) != 0x803) {
    gzclose(f);
    throw hkfac::Error("fashion_mnist: '" + path + "' is not an idx3-ubyte image file");
  }
  const int n = static_cast<int>(big_endian(header + 4));
  const int pixels = static_cast<int>(big_endian(header + 8) * big_endian(header + 12));
  std::vector<unsigned char> raw(static_cast<size_t>(n) * pixels);
  const int got = gzread(f, raw.data(), static_cast<unsigned>(raw.size()));
  gzclose(f);
  if (got != static_cast<int>(raw.size())) {
    throw hkfac::Error("fashion_mnist: '" + path + "' is truncated");
  }
  hkfac::kfac::Matrix m(n, pixels);
  for (size_t i = 0; i < raw.size(); ++i)
    m.data()[i] = raw[i] / 255.0f;
  return m;
}

} // namespace

Dataset Dataset::load(const std::string &kind, const std::string &mnist_dir, unsigned seed,
                      int random_examples) {
  Dataset d;
  d.rng_.seed(seed);
  if (kind == "random") {
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    d.examples_ =
        hkfac::kfac::Matrix::NullaryExpr(random_examples, 20, [&]() { return u(d.rng_); });
  } else if (kind == "fashion_mnist") {
    d.examples_ = read_idx_images(mnist_dir + "/train-images-idx3-ubyte.gz");
  } else {
    throw hkfac::Error("--data must be random or fashion_mnist, got '" + kind + "'");
  }
  return d;
}

hkfac::kfac::Batch Dataset::next_batch(int batch_size) {
  std::uniform_int_distribution<int> pick(0, size() - 1);
  hkfac::kfac::Batch b;
  b.inputs.resize(batch_size, dim());
  for (int i = 0; i < batch_size; ++i)
    b.inputs.row(i) = examples_.row(pick(rng_));
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
