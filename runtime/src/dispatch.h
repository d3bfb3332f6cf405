// Private helpers for the per-kernel dispatch functions in runtime/src/kernels/.
#pragma once

#include <HalideRuntime.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <initializer_list>
#include <list>
#include <string>
#include <vector>

#include "hkfac/buffer.h"
#include "hkfac/device.h"
#include "hkfac/error.h"

#include "generators/covariance_tile.h"

namespace hkfac::detail {

// The message of the last halide_error raised on this thread (captured by our error handler).
std::string take_last_halide_error();

// Throws hkfac::Error naming the kernel, device and Halide's own message when `code` != 0.
void check_halide_result(int code, const char *kernel, Device d);

// Generated functions take non-const halide_buffer_t*; inputs are never written, but a CUDA call
// records its device allocation in the buffer so later calls reuse it instead of re-uploading.
template <typename T> halide_buffer_t *raw(const Buffer<T> &b) {
  return const_cast<halide_buffer_t *>(b.raw_buffer());
}

// Halide 14 emits the masked loads/stores of vector tails with the alignment their index implies,
// ignoring the base pointer, so a kernel can fault on a host pointer that is not vector-aligned
// (e.g. a wrapped Eigen matrix, 16-byte aligned). hkfac's own buffers are 128-byte aligned; for
// others, AlignedArgs stages an aligned copy on the CPU, and copies outputs back once the kernel
// succeeded (commit()). Aliased arguments (in-place kernels) share one copy. The copies live in
// blocks each thread keeps for reuse: a fresh multi-megabyte allocation per call costs more in
// page faults than the kernel itself.
class AlignedArgs {
public:
  // Throws hkfac::Error when `d` is not a Device value (every kernel constructs one first).
  explicit AlignedArgs(Device d);
  AlignedArgs(const AlignedArgs &) = delete;
  AlignedArgs &operator=(const AlignedArgs &) = delete;
  ~AlignedArgs();

  halide_buffer_t *in(const Buffer<float> &b) { return stage(raw(b), false); }
  halide_buffer_t *out(Buffer<float> &b) { return stage(b.raw_buffer(), true); }
  void commit() { committed_ = true; }

private:
  struct Staged {
    halide_buffer_t *original;
    Buffer<float> copy; // a view of `block`
    bool written;
    int block;
  };
  halide_buffer_t *stage(halide_buffer_t *b, bool written);

  Device device_;
  bool committed_ = false;
  // A list: earlier copies must not move, and an empty list allocates nothing (a deque allocates
  // on construction, and every kernel call constructs one of these).
  std::list<Staged> staged_;
};

// The vector width in floats of the target a kernel was generated for (Halide's natural vector
// size there: 16 with AVX-512, 8 with AVX or AVX2, else 4), read from its metadata's target
// string. Kernels whose dispatch depends on the width (a narrow variant, padding a batch to whole
// vectors) ask their own kernel, so the choice follows whatever target the build used.
int float_lanes(const halide_filter_metadata_t *metadata);

// Shape checks with messages that name the argument. expect_dims (and so expect_matrix and
// expect_vector) also checks the layout every kernel assumes: each dimension indexed from 0 and
// dimension 0 dense (stride 1). Without that check a crop or a transposed view failed inside the
// kernel with Halide's assertion on its internal parameter name, or, staged through an aligned
// copy, ran anyway.
void expect_dims(const halide_buffer_t *b, int dims, const char *kernel, const char *arg);
void expect_layout(const halide_buffer_t *b, const char *kernel, const char *arg);
void expect_extent(const halide_buffer_t *b, int dim, int extent, const char *kernel,
                   const char *arg);
// A 2-D buffer of exactly rows x cols, and a 1-D buffer of n elements.
void expect_matrix(const halide_buffer_t *b, int rows, int cols, const char *kernel,
                   const char *arg);
void expect_vector(const halide_buffer_t *b, int n, const char *kernel, const char *arg);
// A kernel argument for expect_disjoint.
struct NamedBuffer {
  const halide_buffer_t *buffer;
  const char *name;
};
// Throws unless every output shares no element with any input or with another output. The
// kernels read their inputs while they write, in tiles and out of order, so an output over an
// input gave wrong values without any error (gemm with C = A, a dense layer's Y = X). Views of one
// allocation that interleave without sharing an element (column blocks of one matrix) pass.
// Arguments whose buffer is null are skipped. The lists are braced lists or arrays, never vectors:
// every kernel call checks its arguments, and the plugin calls the cost model thousands of times
// a second.
void expect_disjoint(const char *kernel, const NamedBuffer *outputs, std::size_t num_outputs,
                     const NamedBuffer *inputs, std::size_t num_inputs);
inline void expect_disjoint(const char *kernel, std::initializer_list<NamedBuffer> outputs,
                            std::initializer_list<NamedBuffer> inputs) {
  expect_disjoint(kernel, outputs.begin(), outputs.size(), inputs.begin(), inputs.size());
}
template <std::size_t N>
void expect_disjoint(const char *kernel, std::initializer_list<NamedBuffer> outputs,
                     const std::array<NamedBuffer, N> &inputs) {
  expect_disjoint(kernel, outputs.begin(), outputs.size(), inputs.data(), N);
}
// Whether two buffers view the same elements in the same layout (an elementwise kernel may write
// such an output over its input).
bool same_view(const halide_buffer_t *a, const halide_buffer_t *b);

// A matrix's (rows, cols) from its buffer.
int rows_of(const halide_buffer_t *b);
int cols_of(const halide_buffer_t *b);

// The covariance generators' tile width: their tiled variants need X (or the patches) at least
// one tile wide; narrower goes to the untiled variant.
using gen::kCovarianceTile;
// On the CPU, X (not the patches) narrower than this takes the untiled variant even when it is a
// tile wide or more: it has no tile pairs, edge strip or write-back to set up, and K-FAC's small
// layers' factors are this size (docs/RESULTS.md#covariance-small-factors).
constexpr int kCovarianceCpuTiledFrom = 160;
// X at least this wide takes the covariance kernel's wide-tile CPU variant (48 columns with
// AVX-512, 24 with AVX2); below it the wide tiles tie or lose, having fewer pairs for two cores
// (docs/RESULTS.md#covariance-wide-tiles).
constexpr int kCovarianceWideFrom = 480;
// A transposed-A product at least this deep, with at least kGemmPackedOutputsFrom outputs, takes
// the CPU variant that copies A into rows first; on small products the copy costs more than it
// saves (docs/RESULTS.md#transposed-operand-packing).
constexpr int kGemmPackedDepthFrom = 256;
constexpr long kGemmPackedOutputsFrom = 256L * 256;
// The same copy for dense_backward's dW = Xᵀ dZ, from this batch on (and at least
// kGemmPackedOutputsFrom weights): below it dW is too small a part of the backward pass
// (docs/RESULTS.md#transposed-operand-packing).
constexpr int kDenseBackwardPackedBatchFrom = 512;

// Products with at most this many output columns (dense layers' outputs, gemm's C) take the CPU
// variants with one-vector tiles (generators/matmul_schedule.h, `narrow`), where 3-vector tiles
// would be mostly padding (docs/RESULTS.md#narrow-shapes).
constexpr int kNarrowColumnsTo = 16;
// One output column of an untransposed A at least this deep takes the CPU variants that form each
// row's dot product along k (Tiles::one_column), which need a whole vector of depth (16 floats
// with AVX-512).
constexpr int kOneColumnDepthFrom = 16;

// Rows per call when a CPU covariance kernel's reduction is blocked (for_each_row_block): each
// call packs its rows into column panels, which must stay in cache while the tile pairs stream
// them (docs/RESULTS.md#patch-covariance). The K-FAC shapes of dense layers (n <= 1000) are one
// block.
constexpr int kCpuReductionBlockRows = 1024;

// Calls run(part, first) for consecutive row blocks of a host matrix buffer (rows = dimension 1),
// `rows` at a time (the last block shorter): views, not copies. A multiple of 16 rows keeps each
// view as aligned as the whole for AVX-512 (16 floats). For CPU kernels whose reduction runs over
// the rows, this blocks the reduction so that each call's working set stays in cache.
template <typename Run> void for_each_row_block(halide_buffer_t *b, int rows, Run &&run) {
  const int total = b->dim[1].extent;
  halide_dimension_t dims[2] = {b->dim[0], b->dim[1]};
  halide_buffer_t part = *b;
  part.dim = dims;
  for (int start = 0; start < total; start += rows) {
    dims[1].extent = std::min(rows, total - start);
    part.host = b->host + static_cast<std::ptrdiff_t>(start) * b->dim[1].stride * b->type.bytes();
    run(&part, start == 0);
  }
}

} // namespace hkfac::detail

// HKFAC_RUN(kernel_name, device, args...) calls hkfac_k_<kernel_name>_cpu or _cuda and turns a
// failure into hkfac::Error. The CUDA branch exists only when the build has CUDA variants.
#if HKFAC_HAVE_CUDA
#define HKFAC_CUDA_BRANCH(name, ...) hkfac_k_##name##_cuda(__VA_ARGS__)
#else
#define HKFAC_CUDA_BRANCH(name, ...) (::hkfac::require_device(::hkfac::Device::cuda), -1)
#endif
#define HKFAC_RUN(name, dev, ...)                                                                  \
  do {                                                                                             \
    const ::hkfac::Device hkfac_dev_ = (dev);                                                      \
    int hkfac_rc_;                                                                                 \
    if (hkfac_dev_ == ::hkfac::Device::cuda) {                                                     \
      ::hkfac::require_device(hkfac_dev_);                                                         \
      hkfac_rc_ = HKFAC_CUDA_BRANCH(name, __VA_ARGS__);                                            \
    } else {                                                                                       \
      hkfac_rc_ = hkfac_k_##name##_cpu(__VA_ARGS__);                                               \
    }                                                                                              \
    ::hkfac::detail::check_halide_result(hkfac_rc_, #name, hkfac_dev_);                            \
  } while (0)
