// Dispatch for the patch covariance kernel (Conv2D's input factor read from the images).
#include "hkfac/kernels/patch_covariance.h"

#include <limits>

#include "dispatch.h"
#include "hkfac/error.h"
#include "hkfac_k_patch_covariance_update_cpu.h"
#include "hkfac_k_patch_covariance_update_small_cpu.h"
#if HKFAC_HAVE_CUDA
#include "hkfac_k_patch_covariance_update_cuda.h"
#include "hkfac_k_patch_covariance_update_small_cuda.h"
#endif

namespace hkfac::kernels {

namespace {
// The generator's tile width (generators/covariance_tiles.h, kCovarianceTile): the tiled kernel
// needs patches at least one tile wide.
constexpr int kTile = 32;
} // namespace

void PatchGeometry::validate(const std::string &what, long long examples) const {
  auto fail = [&](const std::string &why) { throw Error(what + ": patch geometry: " + why); };
  auto at_least = [&](const char *field, int value, int min) {
    if (value < min) {
      fail(std::string(field) + " must be >= " + std::to_string(min) + ", got " +
           std::to_string(value));
    }
  };
  at_least("height", height, 1);
  at_least("width", width, 1);
  at_least("channels", channels, 1);
  at_least("kernel_h", kernel_h, 1);
  at_least("kernel_w", kernel_w, 1);
  at_least("stride_h", stride_h, 1);
  at_least("stride_w", stride_w, 1);
  at_least("pad_h", pad_h, 0);
  at_least("pad_w", pad_w, 0);
  // Sizes are ints in the kernels: products are checked in 64 bits before anything uses them.
  constexpr long long int_max = std::numeric_limits<int>::max();
  const long long padded_h = height + 2LL * pad_h, padded_w = width + 2LL * pad_w;
  if (padded_h > int_max || padded_w > int_max)
    fail("the padded image is too large for 32-bit indices");
  if (kernel_h > padded_h || kernel_w > padded_w) {
    fail("the kernel " + std::to_string(kernel_h) + " x " + std::to_string(kernel_w) +
         " exceeds the padded image " + std::to_string(padded_h) + " x " +
         std::to_string(padded_w));
  }
  const long long image = static_cast<long long>(height) * width * channels;
  const long long patch = static_cast<long long>(kernel_h) * kernel_w * channels;
  const long long locs =
      ((padded_h - kernel_h) / stride_h + 1) * ((padded_w - kernel_w) / stride_w + 1);
  if (image > int_max || patch + 1 > int_max)
    fail("an image or a patch has more than 2^31 - 1 values");
  if (examples > 0 && (locs > int_max / examples || locs * examples > int_max / (patch + 1)))
    fail(std::to_string(examples) + " examples give a patch matrix too large for 32-bit indices");
}

void patch_covariance_update(Buffer<float> &C, const Buffer<float> &images, const PatchGeometry &g,
                             float a, float b, bool homogeneous, Device dev) {
  constexpr const char *k = "patch_covariance_update";
  detail::expect_dims(C.raw_buffer(), 2, k, "C");
  detail::expect_dims(images.raw_buffer(), 2, k, "images");
  const int examples = detail::rows_of(images.raw_buffer());
  g.validate(k, examples);
  detail::expect_extent(images.raw_buffer(), 0, g.image_size(), k, "images");
  const int d = g.patch_size() + (homogeneous ? 1 : 0);
  detail::expect_extent(C.raw_buffer(), 0, d, k, "C");
  detail::expect_extent(C.raw_buffer(), 1, d, k, "C");
  if (examples < 1)
    throw Error(std::string(k) + ": 'images' has no rows (examples)");
  // The kernel reads homogeneity from the shapes: C one wider than a patch means a ones column.
  detail::AlignedArgs args(dev);
  halide_buffer_t *c = args.out(C), *x = args.in(images);
  if (g.patch_size() >= kTile) {
    HKFAC_RUN(patch_covariance_update, dev, c, x, a, b, g.height, g.width, g.channels, g.kernel_h,
              g.kernel_w, g.stride_h, g.stride_w, g.pad_h, g.pad_w, c);
  } else {
    HKFAC_RUN(patch_covariance_update_small, dev, c, x, a, b, g.height, g.width, g.channels,
              g.kernel_h, g.kernel_w, g.stride_h, g.stride_w, g.pad_h, g.pad_w, c);
  }
  args.commit();
}

} // namespace hkfac::kernels
