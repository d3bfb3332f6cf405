// Typed buffers shared by the kernels, and zero-copy Eigen views of them.
//
// Convention for every hkfac kernel: a matrix M with `rows` x `cols` is stored row-major and is a
// 2-D Halide buffer whose dimension 0 is the column (extent cols, stride 1) and dimension 1 the
// row (extent rows). In a generator this reads M(col, row). A vector is a 1-D buffer.
#pragma once

#include <Eigen/Core>
#include <HalideBuffer.h>

#include <cstdlib>
#include <new>
#include <string>

#include "hkfac/buffer_values.h"
#include "hkfac/device.h"
#include "hkfac/error.h"

namespace hkfac {

template <typename T> using Buffer = Halide::Runtime::Buffer<T>;

template <typename T>
using RowMajorMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using MatrixMap = Eigen::Map<RowMajorMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <typename T> using VectorMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>;

namespace detail {
// Halide's Buffer::allocate uses malloc's result without checking it, so a buffer too large for
// the machine crashed on first use. hkfac's buffers allocate through this instead.
inline void *malloc_or_throw(size_t bytes) {
  if (void *p = std::malloc(bytes))
    return p;
  throw std::bad_alloc();
}
template <typename T>
void allocate_or_throw(Buffer<T> &b, const char *what, const std::string &shape) {
  try {
    b.allocate(malloc_or_throw, std::free);
  } catch (const std::bad_alloc &) {
    throw Error(std::string(what) + ": cannot allocate " + shape + " (" +
                std::to_string(b.size_in_bytes()) + " bytes): out of memory");
  }
}
} // namespace detail

// A zero-initialised rows x cols matrix buffer (host memory).
template <typename T> Buffer<T> make_matrix(int rows, int cols) {
  if (rows < 1 || cols < 1) {
    throw Error("make_matrix: rows and cols must be >= 1, got " + std::to_string(rows) + " x " +
                std::to_string(cols));
  }
  Buffer<T> b(static_cast<T *>(nullptr), cols, rows);
  detail::allocate_or_throw(b, "make_matrix", std::to_string(rows) + " x " + std::to_string(cols));
  fill(b, T(0));
  return b;
}

template <typename T> Buffer<T> make_vector(int n) {
  if (n < 1)
    throw Error("make_vector: n must be >= 1, got " + std::to_string(n));
  Buffer<T> b(static_cast<T *>(nullptr), n);
  detail::allocate_or_throw(b, "make_vector", std::to_string(n) + " elements");
  fill(b, T(0));
  return b;
}

template <typename T> int rows(const Buffer<T> &b) {
  return b.dimensions() >= 2 ? b.dim(1).extent() : 1;
}
template <typename T> int cols(const Buffer<T> &b) { return b.dim(0).extent(); }

// Makes the host copy current (copies back from the device when the device copy is newer).
// Throws hkfac::Error when the copy fails.
void sync_to_host(halide_buffer_t *buf, const char *what);
// Makes a device copy current for `d` (no-op for cpu).
void sync_to_device(halide_buffer_t *buf, Device d, const char *what);

template <typename T> void to_host(Buffer<T> &b, const char *what = "buffer") {
  sync_to_host(b.raw_buffer(), what);
}
template <typename T> void to_device(Buffer<T> &b, Device d, const char *what = "buffer") {
  sync_to_device(b.raw_buffer(), d, what);
}

// A view of a matrix buffer as a row-major Eigen matrix, without copying. The host copy is made
// current first. After writing through the view of a buffer that also lives on a device, call
// b.set_host_dirty() so the next kernel uploads the change.
template <typename T> MatrixMap<T> as_eigen(Buffer<T> &b) {
  if (b.dimensions() != 1 && b.dimensions() != 2) {
    throw Error("as_eigen: expected a 1-D or 2-D buffer, got " + std::to_string(b.dimensions()) +
                " dimensions");
  }
  if (b.dim(0).stride() != 1)
    throw Error("as_eigen: dimension 0 must have stride 1");
  sync_to_host(b.raw_buffer(), "as_eigen");
  const int r = rows(b), c = cols(b);
  const int outer = b.dimensions() == 2 ? b.dim(1).stride() : c;
  return MatrixMap<T>(b.data(), r, c, Eigen::OuterStride<>(outer));
}

// A buffer that aliases an Eigen row-major matrix's storage (no copy); it must not outlive it.
template <typename T, typename Derived> Buffer<T> wrap(Eigen::PlainObjectBase<Derived> &m) {
  static_assert(Derived::IsRowMajor || Derived::ColsAtCompileTime == 1,
                "wrap() needs a row-major matrix or a column vector");
  if (Derived::ColsAtCompileTime == 1)
    return Buffer<T>(m.data(), static_cast<int>(m.size()));
  return Buffer<T>(m.data(), static_cast<int>(m.cols()), static_cast<int>(m.rows()));
}

} // namespace hkfac
