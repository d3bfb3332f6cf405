// Convolution patches: im2col and its adjoint over kernels::PatchGeometry, and what a conv2d
// tag's record means when it holds images.
#include <algorithm>
#include <string>

#include "hkfac/error.h"
#include "hkfac/kfac/model.h"
#include "parallel_chunks.h"

namespace hkfac::kfac {

namespace {

void expect_images(const Matrix &images, const kernels::PatchGeometry &g, const char *what) {
  g.validate(what, images.rows());
  if (images.cols() != g.image_size()) {
    throw Error(std::string(what) + ": 'images' has " + std::to_string(images.cols()) +
                " columns, the geometry's images have height·width·channels = " +
                std::to_string(g.image_size()));
  }
}

// Calls visit(patch row, patch column offset of the pixel's channel 0, image row, offset of the
// pixel's channel 0 in that row) for every in-image pixel of every window; padding is skipped.
template <typename Visit>
void for_each_window_pixel(Eigen::Index first, Eigen::Index end, const kernels::PatchGeometry &g,
                           Visit visit) {
  const int oh_n = g.out_h(), ow_n = g.out_w();
  for (Eigen::Index e = first; e < end; ++e) {
    for (int oh = 0; oh < oh_n; ++oh) {
      for (int ow = 0; ow < ow_n; ++ow) {
        const Eigen::Index r = (e * oh_n + oh) * ow_n + ow;
        for (int kh = 0; kh < g.kernel_h; ++kh) {
          const int ih = oh * g.stride_h - g.pad_h + kh;
          if (ih < 0 || ih >= g.height)
            continue;
          for (int kw = 0; kw < g.kernel_w; ++kw) {
            const int iw = ow * g.stride_w - g.pad_w + kw;
            if (iw < 0 || iw >= g.width)
              continue;
            visit(r, (kh * g.kernel_w + kw) * g.channels, e, (ih * g.width + iw) * g.channels);
          }
        }
      }
    }
  }
}

} // namespace

Matrix im2col(const Matrix &images, const kernels::PatchGeometry &g) {
  expect_images(images, g, "im2col");
  const Eigen::Index T = g.locations();
  Matrix p(images.rows() * T, g.patch_size());
  // Examples are independent, so ranges of them run on the kernels' pool: serial, these copies
  // ran on one core while the GEMMs around them used both (see docs/RESULTS.md#cnn-classifier).
  detail::for_row_ranges(
      images.rows(), T * g.patch_size(), [&](Eigen::Index first, Eigen::Index end) {
        p.middleRows(first * T, (end - first) * T).setZero(); // the padding stays zero
        for_each_window_pixel(first, end, g, [&](Eigen::Index r, int pc, Eigen::Index e, int ic) {
          const float *src = images.row(e).data() + ic;
          std::copy(src, src + g.channels, p.row(r).data() + pc);
        });
      });
  return p;
}

Matrix col2im(const Matrix &patches, const kernels::PatchGeometry &g) {
  g.validate("col2im");
  const Eigen::Index T = g.locations();
  if (patches.cols() != g.patch_size() || patches.rows() % T != 0) {
    throw Error("col2im: 'patches' is " + std::to_string(patches.rows()) + " x " +
                std::to_string(patches.cols()) + ", expected a multiple of " + std::to_string(T) +
                " rows (the locations) x " + std::to_string(g.patch_size()));
  }
  Matrix x(patches.rows() / T, g.image_size());
  // Each image gathers only from its own windows, so ranges of examples are independent.
  detail::for_row_ranges(x.rows(), T * g.patch_size(), [&](Eigen::Index first, Eigen::Index end) {
    x.middleRows(first, end - first).setZero();
    for_each_window_pixel(first, end, g, [&](Eigen::Index r, int pc, Eigen::Index e, int ic) {
      const float *src = patches.row(r).data() + pc;
      float *dst = x.row(e).data() + ic;
      for (int c = 0; c < g.channels; ++c)
        dst[c] += src[c];
    });
  });
  return x;
}

void validate_tag_geometry(const LayerTag &tag) {
  if (!tag.geometry)
    return;
  const std::string what = "tag '" + tag.name + "'";
  if (tag.kind != TagKind::conv2d) {
    throw Error(what + ": only conv2d tags have a patch geometry, this one is " +
                tag_kind_name(tag.kind));
  }
  const kernels::PatchGeometry &g = *tag.geometry;
  g.validate(what);
  if (tag.input_dim != g.patch_size() || tag.locations != g.locations()) {
    throw Error(what + ": input_dim " + std::to_string(tag.input_dim) + " and locations " +
                std::to_string(tag.locations) + " disagree with its geometry's patch size " +
                std::to_string(g.patch_size()) + " and locations " + std::to_string(g.locations()));
  }
}

const Matrix &tag_input_rows(const LayerTag &tag, const Matrix &recorded, Matrix &storage) {
  if (!tag.geometry)
    return recorded;
  validate_tag_geometry(tag);
  storage = im2col(recorded, *tag.geometry);
  return storage;
}

} // namespace hkfac::kfac
