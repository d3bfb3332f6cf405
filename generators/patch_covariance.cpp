// Conv2D's input factor without im2col in memory: C <- a*C + b*P̄ᵀP̄, where P holds the patches a
// convolution sees (one row per example and output location, kernel_h·kernel_w·channels columns)
// and P̄ = [P, 1]. The patches are read from the images inside the kernel; the tile algorithm and
// its schedules are the covariance update's (covariance_tiles.h).
#include "Halide.h"
#include "covariance_tiles.h"

namespace {

using namespace Halide;

class PatchCovarianceUpdate : public Generator<PatchCovarianceUpdate> {
public:
  // Patches narrower than one tile (hkfac::gen::kCovarianceTile columns) use the variant built
  // with tiled=false.
  GeneratorParam<bool> tiled{"tiled", true};

  Input<Buffer<float>> c_in{"c_in", 2};
  // One image per column-1 index: images(((h * width) + w) * channels + ch, example), the layout
  // of a row-major batch x (height·width·channels) matrix.
  Input<Buffer<float>> images{"images", 2};
  Input<float> a{"a"};
  Input<float> b{"b"};
  Input<int> height{"height"}, width{"width"}, channels{"channels"};
  Input<int> kernel_h{"kernel_h"}, kernel_w{"kernel_w"};
  Input<int> stride_h{"stride_h"}, stride_w{"stride_w"};
  Input<int> pad_h{"pad_h"}, pad_w{"pad_w"};
  Output<Buffer<float>> c_out{"c_out", 2};

  void generate() {
    const Expr out_h = (height + 2 * pad_h - kernel_h) / stride_h + 1;
    const Expr out_w = (width + 2 * pad_w - kernel_w) / stride_w + 1;
    const Expr locations = out_h * out_w, examples = images.dim(1).extent();
    const Expr d = c_in.dim(0).extent(), dx = kernel_h * kernel_w * channels;
    const Expr n = examples * locations;

    // Patch column col = (kh * kernel_w + kw) * channels + ch. Its kernel offsets and its offset
    // into the image from the receptive field's top-left corner are tabulated once: vectorised
    // over columns, the divisions would otherwise run per element, one lane at a time.
    Expr kk = col / channels;
    col_table(col) = Tuple(((kk / kernel_w) * width + kk % kernel_w) * channels + col % channels,
                           kk / kernel_w, kk % kernel_w);
    // Patch row row = example * locations + oh * out_w + ow; its divisions are per row, scalar.
    Expr example = row / locations, loc = row % locations;
    Expr ih0 = (loc / out_w) * stride_h - pad_h, iw0 = (loc % out_w) * stride_w - pad_w;
    Expr ih = ih0 + col_table(col)[1], iw = iw0 + col_table(col)[2];
    Expr inside = ih >= 0 && ih < height && iw >= 0 && iw < width;
    // The table makes the image index data-dependent: clamped, so bounds inference can bound it;
    // outside the image (padding) the patch is zero.
    Expr offset =
        clamp((ih0 * width + iw0) * channels + col_table(col)[0], 0, images.dim(0).extent() - 1);
    patch(col, row) = select(inside, images(offset, clamp(example, 0, examples - 1)), 0.0f);
    // X̄: ones past the patch's columns (the homogeneous column, and the tiled form's padding).
    Func xbar{"xbar"};
    xbar(col, row) = select(col < dx, patch(col, row), 1.0f);

    // Narrow tiles only: the covariance kernel's wide CPU variant is not yet measured on patches.
    // The patch matrix is a Func, computed over whatever columns the untiled form's blocks read
    // (x_padded): no zero-padded copy of narrow patches is needed.
    const bool gpu = get_target().has_gpu_feature();
    hkfac::gen::CovarianceTiles cov(tiled, hkfac::gen::kCovarianceTile,
                                    gpu ? 0 : natural_vector_size<float>(), /*x_padded=*/true,
                                    c_out, c_in, patch, xbar, d, dx, n, a, b);

    images.dim(0).set_min(0).dim(1).set_min(0);
    c_in.dim(0).set_min(0).dim(1).set_bounds(0, d);
    c_out.dim(0).set_bounds(0, d).dim(1).set_bounds(0, d);
    // A 3x3 convolution over 16 channels of 28x28 images, batch 128.
    c_in.set_estimates({{0, 145}, {0, 145}});
    images.set_estimates({{0, 28 * 28 * 16}, {0, 128}});
    c_out.set_estimates({{0, 145}, {0, 145}});
    a.set_estimate(0.95f);
    b.set_estimate(0.05f);
    height.set_estimate(28);
    width.set_estimate(28);
    channels.set_estimate(16);
    kernel_h.set_estimate(3);
    kernel_w.set_estimate(3);
    stride_h.set_estimate(1);
    stride_w.set_estimate(1);
    pad_h.set_estimate(1);
    pad_w.set_estimate(1);

    if (gpu) {
      schedule_gpu(cov);
    } else {
      schedule_cpu(cov);
    }
  }

private:
  Var col{"col"}, row{"row"};
  Func col_table{"col_table"}, patch{"patch"};

  void schedule_cpu(hkfac::gen::CovarianceTiles &cov) {
    const int vec = natural_vector_size<float>();
    cov.schedule_cpu(vec, false);
    col_table.compute_root().vectorize(col, vec, TailStrategy::GuardWithIf);
    if (tiled) {
      // The patches are gathered into the covariance's packed panels (xpack, computed once per
      // call), so each is read from the images once; nothing else holds them.
      return;
    }
    // The untiled form reads each patch element from its innermost loop: gathered into a patch
    // matrix first (under kTile columns, and a block of rows per call: it stays in cache). The
    // vector tail is rounded up, not guarded: a guarded tail ran its gathers one lane at a time.
    // Serial: a parallel gather left Halide's worker spinning through the serial product that
    // follows, on a core that on these VMs may share its physical core with ours. (Copying tap by
    // tap instead, channels contiguous, measured slower: per-row index arithmetic at every tap.)
    patch.compute_root().vectorize(col, vec, TailStrategy::RoundUp);
  }

  void schedule_gpu(hkfac::gen::CovarianceTiles &cov) {
    cov.schedule_gpu();
    Var co{"co"}, ci{"ci"}, ro{"ro"}, ri{"ri"};
    col_table.compute_root().gpu_tile(col, co, ci, 64, TailStrategy::GuardWithIf);
    if (tiled) {
      return; // gathered by the block's threads as they stage each panel in shared memory
    }
    patch.compute_root().gpu_tile(col, row, co, ro, ci, ri, 32, 8, TailStrategy::GuardWithIf);
  }
};

} // namespace

HALIDE_REGISTER_GENERATOR(PatchCovarianceUpdate, hkfac_patch_covariance_update)
