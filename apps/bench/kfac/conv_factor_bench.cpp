// Conv2D's curvature update, images route vs patches route, interleaved.
//
// Conv2D records its input images and the KFC block forms A from them with the patch covariance
// kernel (the images route). Before that kernel, the layer recorded a copy of its im2col patches
// and the block ran the covariance kernel on them (the patches route, still what a conv2d tag
// without a geometry does). Both routes are timed here as the library runs them per step: the
// record's copy made in the forward pass plus the block's update_curvature_estimate (A and G), on
// the layers of a CIFAR-sized network at batch 128. Also reported: the bytes each record holds.
// Usage: conv_factor_bench [rounds=15].
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cli.h"
#include "hkfac/kfac/blocks/curvature_block.h"
#include "hkfac/kfac/model.h"

namespace {

using hkfac::kfac::Matrix;

struct Layer {
  int hw, channels, kernel, stride, out_channels;
};

Matrix random_matrix(Eigen::Index rows, Eigen::Index cols, std::mt19937 &rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  return Matrix::NullaryExpr(rows, cols, [&] { return u(rng); });
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

} // namespace

int main(int argc, char **argv) {
  const char *usage = "usage: conv_factor_bench [ROUNDS (>= 1, default 15)]";
  if (argc > 1 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::printf("conv_factor_bench: Conv2D's curvature update, images route vs patches route.\n"
                "%s\n",
                usage);
    return 0;
  }
  const std::optional<int> parsed = argc > 1 ? hkfac::apps::parse_int(argv[1]) : 15;
  if (argc > 2 || !parsed || *parsed < 1) {
    std::fprintf(stderr, "conv_factor_bench: bad argument '%s'\n%s\n", argv[argc > 2 ? 2 : 1],
                 usage);
    return 2;
  }
  const int rounds = *parsed;
  const int batch = 128;
  const std::vector<Layer> layers = {
      {32, 3, 3, 1, 32}, {16, 32, 3, 1, 64}, {8, 64, 3, 1, 128}, {16, 32, 3, 2, 64}};
  std::printf("| layer (B=%d) | A size | patch rows | images route ms | patches route ms | "
              "patches / images (median of rounds) | record MB, images / patches |\n",
              batch);
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const Layer &l : layers) {
    hkfac::kernels::PatchGeometry g;
    g.height = g.width = l.hw;
    g.channels = l.channels;
    g.kernel_h = g.kernel_w = l.kernel;
    g.stride_h = g.stride_w = l.stride;
    g.pad_h = g.pad_w = l.kernel / 2;
    hkfac::kfac::LayerTag tag;
    tag.kind = hkfac::kfac::TagKind::conv2d;
    tag.name = "conv";
    tag.params = {0, 1};
    tag.has_bias = true;
    tag.input_dim = g.patch_size();
    tag.output_dim = l.out_channels;
    tag.locations = g.locations();
    const std::vector<hkfac::kfac::ParamShape> shapes = {{g.patch_size(), l.out_channels, "kernel"},
                                                         {1, l.out_channels, "b"}};
    hkfac::kfac::LayerTag image_tag = tag;
    image_tag.geometry = g;
    const auto kind = hkfac::kfac::BlockKind::conv2d_two_kronecker_factored;
    auto from_images = hkfac::kfac::make_block(kind, image_tag, shapes);
    auto from_patches = hkfac::kfac::make_block(kind, tag, shapes);
    from_images->init();
    from_patches->init();

    std::mt19937 rng(l.hw * 100 + l.channels);
    const Matrix images = random_matrix(batch, g.image_size(), rng);
    const Matrix patches = hkfac::kfac::im2col(images, g); // the layer's own, made for its GEMM
    hkfac::kfac::BlockBatch b;
    b.batch_size = batch;
    b.output_grads = {random_matrix(patches.rows(), l.out_channels, rng)};
    Matrix record;
    auto images_route = [&] {
      record = images; // the forward pass's record
      b.inputs = &record;
      from_images->update_curvature_estimate(0.95f, 1.0f, b);
    };
    auto patches_route = [&] {
      record = patches;
      b.inputs = &record;
      from_patches->update_curvature_estimate(0.95f, 1.0f, b);
    };
    auto time = [](auto &&f, int reps) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < reps; i++)
        f();
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
    };
    images_route();
    patches_route();
    const int reps = std::max(1, static_cast<int>(0.05 / std::max(1e-6, time(patches_route, 1))));
    std::vector<double> ti, tp, ratio;
    for (int r = 0; r < rounds; r++) {
      ti.push_back(time(images_route, reps));
      tp.push_back(time(patches_route, reps));
      ratio.push_back(tp.back() / ti.back());
    }
    const double mb = 1.0 / (1 << 20) * sizeof(float);
    std::printf("| %dx%dx%d k%d s%d -> %d | %d | %lld | %.2f | %.2f | %.2f | %.1f / %.1f |\n", l.hw,
                l.hw, l.channels, l.kernel, l.stride, l.out_channels, g.patch_size() + 1,
                static_cast<long long>(patches.rows()), 1e3 * median(ti), 1e3 * median(tp),
                median(ratio), images.size() * mb, patches.size() * mb);
  }
  return 0;
}
