// Dispatch for the covariance (K-FAC factor) update kernel.
#include "hkfac/kernels/covariance.h"

#include <HalideRuntime.h>

#include <cstdint>

#include "dispatch.h"
#include "hkfac_k_covariance_update_cpu.h"
#include "hkfac_k_covariance_update_narrow_cpu.h"
#include "hkfac_k_covariance_update_small_cpu.h"
#include "hkfac_k_covariance_update_upper_cpu.h"
#include "hkfac_k_covariance_update_wide_cpu.h"
#include "hkfac_k_covariance_update_wide_upper_cpu.h"
#if HKFAC_HAVE_CUDA
#include "hkfac_k_covariance_update_cuda.h"
#include "hkfac_k_covariance_update_small_cuda.h"
#include "hkfac_k_covariance_update_upper_cuda.h"
#endif

namespace hkfac::kernels {

namespace {

// The narrow kernel's vector width in floats: X narrower than this takes it.
int narrow_lanes() {
  static const int lanes = detail::float_lanes(hkfac_k_covariance_update_narrow_cpu_metadata());
  return lanes;
}

// X (a block of its rows) as its values back to back, for the narrow kernel, when X is narrower
// than a vector, its rows are dense and there are at least a vector of values: the kernel reads
// each row as a whole vector from the row's start, so it needs that many values in X.
bool flat_narrow_rows(const halide_buffer_t *x, halide_dimension_t *dim, halide_buffer_t *flat) {
  const int cols = detail::cols_of(x), rows = detail::rows_of(x);
  if (cols >= narrow_lanes() || x->dim[0].stride != 1 || (rows > 1 && x->dim[1].stride != cols))
    return false;
  const long values = long(rows) * cols;
  if (values < narrow_lanes() || values > INT32_MAX)
    return false;
  *flat = *x;
  *dim = halide_dimension_t{0, static_cast<int32_t>(values), 1, 0};
  flat->dimensions = 1;
  flat->dim = dim;
  return true;
}

} // namespace

namespace {

// Both public functions: the tiled forms differ (upper: one triangle), the small ones do not.
void update(Buffer<float> &C, const Buffer<float> &X, float a, float b, bool homogeneous,
            Device dev, bool upper, const char *k) {
  detail::expect_dims(C.raw_buffer(), 2, k, "C");
  detail::expect_dims(X.raw_buffer(), 2, k, "X");
  const int d = detail::cols_of(X.raw_buffer()) + (homogeneous ? 1 : 0);
  detail::expect_extent(C.raw_buffer(), 0, d, k, "C");
  detail::expect_extent(C.raw_buffer(), 1, d, k, "C");
  detail::expect_disjoint(k, {{C.raw_buffer(), "C"}}, {{X.raw_buffer(), "X"}});
  // The kernel reads homogeneity from the shapes: C one wider than X means a ones column.
  detail::AlignedArgs args(dev);
  halide_buffer_t *c = args.out(C), *x = args.in(X);
  const int cols = detail::cols_of(X.raw_buffer());
  auto run = [&](halide_buffer_t *rows, float a_part) {
    halide_dimension_t flat_dim;
    halide_buffer_t flat;
    if (dev == Device::cpu && flat_narrow_rows(rows, &flat_dim, &flat)) {
      detail::check_halide_result(
          hkfac_k_covariance_update_narrow_cpu(c, &flat, cols, a_part, b, c),
          "covariance_update_narrow", dev);
    } else if (dev == Device::cpu && cols >= detail::kCovarianceWideFrom) {
      detail::check_halide_result(
          upper ? hkfac_k_covariance_update_wide_upper_cpu(c, rows, a_part, b, c)
                : hkfac_k_covariance_update_wide_cpu(c, rows, a_part, b, c),
          upper ? "covariance_update_wide_upper" : "covariance_update_wide", dev);
    } else if (cols >=
               (dev == Device::cpu ? detail::kCovarianceCpuTiledFrom : detail::kCovarianceTile)) {
      if (upper) {
        HKFAC_RUN(covariance_update_upper, dev, c, rows, a_part, b, c);
      } else {
        HKFAC_RUN(covariance_update, dev, c, rows, a_part, b, c);
      }
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

} // namespace

void covariance_update(Buffer<float> &C, const Buffer<float> &X, float a, float b, bool homogeneous,
                       Device dev) {
  update(C, X, a, b, homogeneous, dev, false, "covariance_update");
}

void covariance_update_upper(Buffer<float> &C, const Buffer<float> &X, float a, float b,
                             bool homogeneous, Device dev) {
  update(C, X, a, b, homogeneous, dev, true, "covariance_update_upper");
}

} // namespace hkfac::kernels
