// Patch covariance (Conv2D's input factor from the images) against a double-precision reference
// that forms the patches by brute force, on CPU and (when present) CUDA.
#include "hkfac/kernels/patch_covariance.h"

#include "hkfac/kernels/covariance.h"
#include "test_util.h"

namespace hkfac {
namespace {

using kernels::PatchGeometry;
using testing::exactly_symmetric;
using testing::random_matrix;
using testing::random_symmetric;
using testing::rel_error;
using testing::to_eigen_d;

PatchGeometry geometry(int h, int w, int c, int kh, int kw, int sh, int sw, int ph, int pw) {
  PatchGeometry g;
  g.height = h, g.width = w, g.channels = c;
  g.kernel_h = kh, g.kernel_w = kw;
  g.stride_h = sh, g.stride_w = sw;
  g.pad_h = ph, g.pad_w = pw;
  return g;
}

// The patch matrix written from the definition of a convolution, independently of the kernel's
// index arithmetic: output position (oh, ow) sees input pixel (oh·sh - ph + kh, ow·sw - pw + kw),
// zero outside the image. Rows example-major, then oh, then ow; columns (kh, kw, channel).
Eigen::MatrixXd brute_force_patches(const Eigen::MatrixXd &images, const PatchGeometry &g) {
  const int out_h = (g.height + 2 * g.pad_h - g.kernel_h) / g.stride_h + 1;
  const int out_w = (g.width + 2 * g.pad_w - g.kernel_w) / g.stride_w + 1;
  Eigen::MatrixXd p =
      Eigen::MatrixXd::Zero(images.rows() * out_h * out_w, g.kernel_h * g.kernel_w * g.channels);
  for (Eigen::Index e = 0; e < images.rows(); e++) {
    for (int oh = 0; oh < out_h; oh++) {
      for (int ow = 0; ow < out_w; ow++) {
        const Eigen::Index r = (e * out_h + oh) * out_w + ow;
        for (int kh = 0; kh < g.kernel_h; kh++) {
          for (int kw = 0; kw < g.kernel_w; kw++) {
            const int y = oh * g.stride_h - g.pad_h + kh, x = ow * g.stride_w - g.pad_w + kw;
            if (y < 0 || y >= g.height || x < 0 || x >= g.width)
              continue;
            for (int ch = 0; ch < g.channels; ch++) {
              p(r, (kh * g.kernel_w + kw) * g.channels + ch) =
                  images(e, (y * g.width + x) * g.channels + ch);
            }
          }
        }
      }
    }
  }
  return p;
}

Eigen::MatrixXd reference(const Eigen::MatrixXd &c0, const Eigen::MatrixXd &patches, double a,
                          double b, bool homogeneous) {
  Eigen::MatrixXd pbar(patches.rows(), patches.cols() + (homogeneous ? 1 : 0));
  pbar.leftCols(patches.cols()) = patches;
  if (homogeneous)
    pbar.rightCols(1).setOnes();
  return a * c0 + b * pbar.transpose() * pbar;
}

struct Case {
  const char *what;
  PatchGeometry g;
  int examples;
};

// Patch widths on both sides of the 32-column tile (1, 7, 27 untiled; 45, 96, 999 tiled, with and
// without an edge strip), strides and paddings that leave pixels unread or windows overhanging,
// non-square kernels and images, a window as large as the padded image, one example and seven.
std::vector<Case> cases() {
  return {
      {"1x1 kernel, 1 channel", geometry(5, 4, 1, 1, 1, 1, 1, 0, 0), 3},
      {"1x1 kernel, 7 channels, stride 2", geometry(7, 7, 7, 1, 1, 2, 2, 0, 0), 7},
      {"3x3x3 padded", geometry(8, 6, 3, 3, 3, 1, 1, 1, 1), 5},
      {"3x3x5 padded (one tile + strip)", geometry(7, 7, 5, 3, 3, 1, 1, 1, 1), 4},
      {"3x2x16 stride 2x3, no padding (three tiles)", geometry(9, 8, 16, 3, 2, 2, 3, 0, 0), 7},
      {"5x5x2 pad 2x1 stride 2 (window overhangs)", geometry(6, 5, 2, 5, 5, 2, 2, 2, 1), 3},
      {"3x4x4 pad 0x2 stride 1x2", geometry(5, 6, 4, 3, 4, 1, 2, 0, 2), 2},
      {"kernel = padded image (one location)", geometry(4, 3, 4, 6, 5, 1, 1, 1, 1), 7},
      {"3x3x111 (999 columns)", geometry(4, 4, 111, 3, 3, 1, 1, 1, 1), 1},
  };
}

class PatchCovarianceKernels : public ::testing::TestWithParam<Device> {};

TEST_P(PatchCovarianceKernels, MatchesBruteForcePatchesAndIsExactlySymmetric) {
  const Device dev = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  const float a = 0.9f, b = 0.3f;
  unsigned seed = 1;
  for (const Case &tc : cases()) {
    for (bool homogeneous : {false, true}) {
      const PatchGeometry &g = tc.g;
      const int d = g.patch_size() + (homogeneous ? 1 : 0);
      Buffer<float> images = random_matrix(tc.examples, g.image_size(), seed++);
      Buffer<float> c = random_symmetric(d, seed++);
      const Eigen::MatrixXd patches = brute_force_patches(to_eigen_d(images), g);
      ASSERT_EQ(patches.rows(), static_cast<Eigen::Index>(tc.examples) * g.locations()) << tc.what;
      const Eigen::MatrixXd ref = reference(to_eigen_d(c), patches, a, b, homogeneous);
      kernels::patch_covariance_update(c, images, g, a, b, homogeneous, dev);
      to_host(c);
      EXPECT_LT(rel_error(to_eigen_d(c), ref), 2e-6 * std::sqrt(double(patches.rows())))
          << tc.what << " homogeneous=" << homogeneous;
      EXPECT_TRUE(exactly_symmetric(c)) << tc.what << " homogeneous=" << homogeneous;
    }
  }
}

// Batches of more patch rows than one call reduces on the CPU: the dispatch blocks them by whole
// images, about 1024 rows at a time, and in blocks of 16 images when an image's size is not a
// multiple of 16 floats (to keep each block's first image aligned).
TEST_P(PatchCovarianceKernels, LongBatchesMatchBruteForce) {
  const Device dev = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  const std::vector<Case> long_cases = {
      {"8x8x3 images (192 floats), 64 locations", geometry(8, 8, 3, 3, 3, 1, 1, 1, 1), 41},
      {"5x5x3 images (75 floats), 25 locations", geometry(5, 5, 3, 3, 3, 1, 1, 1, 1), 90},
      {"6x6x8 images, tiled patches", geometry(6, 6, 8, 3, 3, 1, 1, 1, 1), 37},
  };
  unsigned seed = 200;
  for (const Case &tc : long_cases) {
    const PatchGeometry &g = tc.g;
    Buffer<float> images = random_matrix(tc.examples, g.image_size(), seed++);
    Buffer<float> c = random_symmetric(g.patch_size() + 1, seed++);
    const Eigen::MatrixXd patches = brute_force_patches(to_eigen_d(images), g);
    ASSERT_GT(patches.rows(), 1024) << tc.what;
    const Eigen::MatrixXd ref = reference(to_eigen_d(c), patches, 0.8, 0.02, true);
    kernels::patch_covariance_update(c, images, g, 0.8f, 0.02f, true, dev);
    to_host(c);
    EXPECT_LT(rel_error(to_eigen_d(c), ref), 2e-6 * std::sqrt(double(patches.rows()))) << tc.what;
    EXPECT_TRUE(exactly_symmetric(c)) << tc.what;
  }
}

// The kernel and the plain covariance update over materialised patches run the same tile
// algorithm: their results agree to rounding, step after step of an EMA.
TEST_P(PatchCovarianceKernels, AgreesWithTheCovarianceUpdateOverPatchesAcrossEmaSteps) {
  const Device dev = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  const PatchGeometry g = geometry(10, 10, 6, 3, 3, 1, 1, 1, 1);
  Buffer<float> c_images = random_symmetric(g.patch_size() + 1, 3);
  Buffer<float> c_patches = make_matrix<float>(g.patch_size() + 1, g.patch_size() + 1);
  as_eigen(c_patches) = as_eigen(c_images);
  for (int step = 0; step < 3; step++) {
    Buffer<float> images = random_matrix(8, g.image_size(), 50 + step);
    const Eigen::MatrixXf patches = brute_force_patches(to_eigen_d(images), g).cast<float>();
    Buffer<float> p = make_matrix<float>(static_cast<int>(patches.rows()), g.patch_size());
    as_eigen(p) = patches;
    kernels::patch_covariance_update(c_images, images, g, 0.5f, 0.25f, true, dev);
    kernels::covariance_update(c_patches, p, 0.5f, 0.25f, true, dev);
  }
  to_host(c_images);
  to_host(c_patches);
  EXPECT_LT(rel_error(to_eigen_d(c_images), to_eigen_d(c_patches)), 1e-6);
  EXPECT_TRUE(exactly_symmetric(c_images));
}

TEST(PatchCovarianceErrors, BadShapesAndGeometryAreNamed) {
  const PatchGeometry g = geometry(6, 6, 2, 3, 3, 1, 1, 1, 1);
  Buffer<float> c = make_matrix<float>(19, 19), images = make_matrix<float>(2, 72);
  using testing::expect_error_containing;
  Buffer<float> wrong_images = make_matrix<float>(2, 71);
  expect_error_containing("'images'", [&] {
    kernels::patch_covariance_update(c, wrong_images, g, 1, 1, true, Device::cpu);
  });
  expect_error_containing("'C'",
                          [&] { kernels::patch_covariance_update(c, images, g, 1, 1, false); });
  PatchGeometry bad = g;
  bad.stride_w = 0;
  expect_error_containing("stride_w",
                          [&] { kernels::patch_covariance_update(c, images, bad, 1, 1, true); });
  bad = g;
  bad.pad_h = -1;
  expect_error_containing("pad_h",
                          [&] { kernels::patch_covariance_update(c, images, bad, 1, 1, true); });
  bad = g;
  bad.kernel_h = 9; // the padded image is 8 high
  expect_error_containing("exceeds the padded image",
                          [&] { kernels::patch_covariance_update(c, images, bad, 1, 1, true); });
}

INSTANTIATE_TEST_SUITE_P(AllDevices, PatchCovarianceKernels,
                         ::testing::ValuesIn(testing::all_devices()), testing::device_param_name);

} // namespace
} // namespace hkfac
