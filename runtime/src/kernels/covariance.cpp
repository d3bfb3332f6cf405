// Dispatch for the covariance (K-FAC factor) update kernel.
#include "hkfac/kernels/covariance.h"

#include "dispatch.h"
#include "hkfac_k_covariance_update_cpu.h"
#include "hkfac_k_covariance_update_small_cpu.h"
#include "hkfac_k_covariance_update_wide_cpu.h"
#if HKFAC_HAVE_CUDA
#include "hkfac_k_covariance_update_cuda.h"
#include "hkfac_k_covariance_update_small_cuda.h"
#endif

namespace hkfac::kernels {

void covariance_update(Buffer<float> &C, const Buffer<float> &X, float a, float b, bool homogeneous,
                       Device dev) {
  constexpr const char *k = "covariance_update";
  detail::expect_dims(C.raw_buffer(), 2, k, "C");
  detail::expect_dims(X.raw_buffer(), 2, k, "X");
  const int d = detail::cols_of(X.raw_buffer()) + (homogeneous ? 1 : 0);
  detail::expect_extent(C.raw_buffer(), 0, d, k, "C");
  detail::expect_extent(C.raw_buffer(), 1, d, k, "C");
  // The kernel reads homogeneity from the shapes: C one wider than X means a ones column.
  detail::AlignedArgs args(dev);
  halide_buffer_t *c = args.out(C), *x = args.in(X);
  const int cols = detail::cols_of(X.raw_buffer());
  auto run = [&](halide_buffer_t *rows, float a_part) {
    if (dev == Device::cpu && cols >= detail::kCovarianceWideFrom) {
      detail::check_halide_result(hkfac_k_covariance_update_wide_cpu(c, rows, a_part, b, c),
                                  "covariance_update_wide", dev);
    } else if (cols >=
               (dev == Device::cpu ? detail::kCovarianceCpuTiledFrom : detail::kCovarianceTile)) {
      HKFAC_RUN(covariance_update, dev, c, rows, a_part, b, c);
    } else {
      HKFAC_RUN(covariance_update_small, dev, c, rows, a_part, b, c);
    }
  };
  if (dev == Device::cpu && detail::rows_of(x) > detail::kCpuReductionBlockRows) {
    detail::for_each_row_block(
        x, detail::kCpuReductionBlockRows,
        [&](halide_buffer_t *rows, bool first) { run(rows, first ? a : 1.0f); });
  } else {
    run(x, a);
  }
  args.commit();
}

} // namespace hkfac::kernels
