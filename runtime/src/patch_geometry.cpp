// PatchGeometry's validation. Outside the kernel's dispatch file: the K-FAC library checks layer
// tags with it in builds without the patch covariance kernel group too.
#include <limits>
#include <string>
#include <string_view>

#include "hkfac/error.h"
#include "hkfac/kernels/patch_covariance.h"

namespace hkfac::kernels {

void PatchGeometry::validate(std::string_view what, long long examples) const {
  auto fail = [&](const std::string &why) {
    throw Error(std::string(what) + ": patch geometry: " + why);
  };
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

} // namespace hkfac::kernels
