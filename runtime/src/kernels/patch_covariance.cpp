// Dispatch for the patch covariance kernel (Conv2D's input factor read from the images).
#include "hkfac/kernels/patch_covariance.h"

#include "dispatch.h"
#include "hkfac/error.h"
#include "hkfac_k_patch_covariance_update_cpu.h"
#include "hkfac_k_patch_covariance_update_small_cpu.h"
#if HKFAC_HAVE_CUDA
#include "hkfac_k_patch_covariance_update_cuda.h"
#include "hkfac_k_patch_covariance_update_small_cuda.h"
#endif

namespace hkfac::kernels {

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
  detail::expect_disjoint(k, {{C.raw_buffer(), "C"}}, {{images.raw_buffer(), "images"}});
  // The kernel reads homogeneity from the shapes: C one wider than a patch means a ones column.
  detail::AlignedArgs args(dev);
  halide_buffer_t *c = args.out(C), *x = args.in(images);
  auto run = [&](halide_buffer_t *part, float a_part) {
    if (g.patch_size() >= detail::kCovarianceTile) {
      HKFAC_RUN(patch_covariance_update, dev, c, part, a_part, b, g.height, g.width, g.channels,
                g.kernel_h, g.kernel_w, g.stride_h, g.stride_w, g.pad_h, g.pad_w, c);
    } else {
      HKFAC_RUN(patch_covariance_update_small, dev, c, part, a_part, b, g.height, g.width,
                g.channels, g.kernel_h, g.kernel_w, g.stride_h, g.stride_w, g.pad_h, g.pad_w, c);
    }
  };
  // The reduction runs over patch rows, T per image: blocked by whole images, about
  // kCpuReductionBlockRows patch rows at a time, as the covariance update blocks its rows. A
  // block's first image must stay 64-byte aligned (AlignedArgs' guarantee for the whole buffer):
  // images of a size that is not a multiple of 16 floats go in blocks of 16.
  int per_block = std::max(1, detail::kCpuReductionBlockRows / g.locations());
  if (g.image_size() % 16 != 0)
    per_block = (per_block + 15) / 16 * 16;
  if (dev == Device::cpu && examples > per_block) {
    detail::for_each_row_block(
        x, per_block, [&](halide_buffer_t *part, bool first) { run(part, first ? a : 1.0f); });
  } else {
    run(x, a);
  }
  args.commit();
}

} // namespace hkfac::kernels
