// Conv2D's input factor from the images: C <- a*C + b*P̄ᵀP̄ without im2col in memory.
#pragma once

#include <string>
#include <string_view>

#include "hkfac/buffer.h"
#include "hkfac/device.h"

namespace hkfac::kernels {

// Where a convolution's patches come from: images of height x width x channels (NHWC, one example
// per row of a row-major batch x (height·width·channels) matrix), a kernel_h x kernel_w window
// moved by the strides over the image zero-padded by pad_h rows above and below and pad_w columns
// left and right. Patch row example·T + oh·out_w + ow (T = out_h·out_w locations) holds the window
// at output position (oh, ow), column (kh·kernel_w + kw)·channels + ch: the layout of Conv2D's
// im2col, and of its kernel's rows.
struct PatchGeometry {
  int height = 0, width = 0, channels = 0;
  int kernel_h = 0, kernel_w = 0;
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;

  int out_h() const { return (height + 2 * pad_h - kernel_h) / stride_h + 1; }
  int out_w() const { return (width + 2 * pad_w - kernel_w) / stride_w + 1; }
  int locations() const { return out_h() * out_w(); }
  int image_size() const { return height * width * channels; }      // columns of an image row
  int patch_size() const { return kernel_h * kernel_w * channels; } // columns of a patch row

  // Throws hkfac::Error naming `what` and the first field out of range: sizes and kernel >= 1,
  // strides >= 1, padding >= 0, the kernel no larger than the padded image, and the patch matrix
  // of `examples` images addressable with 32-bit indices (examples = 0 skips that check).
  // A view, not a std::string: the dispatch validates on every call, with a name too long for a
  // string's inline buffer.
  void validate(std::string_view what, long long examples = 0) const;
};

// C <- a*C + b*P̄ᵀP̄ in place, P the patches of `images` (examples x geometry.image_size()) and
// P̄ = [P, 1] with `homogeneous` (C is then patch_size()+1 square), P̄ = P otherwise. As the
// covariance update: C symmetric on entry, exactly symmetric on exit. P is never materialised: on
// the GPU it is read inside the kernel, on the CPU packed by column tiles for about 1024 patch
// rows at a time (patches narrower than one tile, 32 columns, into a small patch matrix).
void patch_covariance_update(Buffer<float> &C, const Buffer<float> &images,
                             const PatchGeometry &geometry, float a, float b, bool homogeneous,
                             Device dev = default_device());

} // namespace hkfac::kernels
