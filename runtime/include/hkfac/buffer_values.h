// Visiting, filling and copying a host buffer's elements without Halide 14's
// Buffer::for_each_value.
//
// for_each_value (and fill() and copy_from(), which use it) merges dense dimensions by shifting
// in one entry of its task array past those it set, then advances its pointers once more, by
// that entry's unset stride, after the last element. The pointer is never read, but forming it is
// undefined behaviour, and UBSan stops there on every dense matrix (README, "Build options":
// HKFAC_SANITIZE). These plain loops do the same work without it.
#pragma once

#include <HalideBuffer.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

#include "hkfac/error.h"

namespace hkfac {
namespace detail {

// Calls f(offset_a, offset_b) at the start of every dimension-0 run of two buffers of one shape,
// for dimensions d and below; offsets are in elements from each buffer's first element.
template <typename F>
void for_each_run(const halide_buffer_t &a, const halide_buffer_t &b, int d, std::ptrdiff_t oa,
                  std::ptrdiff_t ob, F &f) {
  if (d <= 0) {
    f(oa, ob);
    return;
  }
  for (int i = 0; i < a.dim[d].extent; ++i) {
    for_each_run(a, b, d - 1, oa + static_cast<std::ptrdiff_t>(i) * a.dim[d].stride,
                 ob + static_cast<std::ptrdiff_t>(i) * b.dim[d].stride, f);
  }
}

} // namespace detail

// f(element) for every element of `b`, in host memory (T& unless T is const).
template <typename T, typename F> void for_each_value(const Halide::Runtime::Buffer<T> &b, F &&f) {
  const halide_buffer_t &r = *b.raw_buffer();
  T *first = b.data(); // the element at the minimum coordinates
  if (r.dimensions == 0) {
    f(*first);
    return;
  }
  const int n = r.dim[0].extent;
  const std::ptrdiff_t s = r.dim[0].stride;
  auto run = [&](std::ptrdiff_t o, std::ptrdiff_t) {
    T *p = first + o;
    if (s == 1) { // the usual case, kept apart so that the compiler can vectorize it
      for (int i = 0; i < n; ++i)
        f(p[i]);
    } else {
      for (int i = 0; i < n; ++i)
        f(p[i * s]);
    }
  };
  detail::for_each_run(r, r, r.dimensions - 1, 0, 0, run);
}

template <typename T> void fill(Halide::Runtime::Buffer<T> &b, T value) {
  for_each_value(b, [value](T &v) { v = value; });
}

// dst = src, element by element; both in host memory, with the same dimensions and extents
// (their strides and mins may differ).
template <typename T, typename U>
void copy_values(Halide::Runtime::Buffer<T> &dst, const Halide::Runtime::Buffer<U> &src) {
  const halide_buffer_t &d = *dst.raw_buffer(), &s = *src.raw_buffer();
  bool same = d.dimensions == s.dimensions;
  for (int i = 0; same && i < d.dimensions; ++i)
    same = d.dim[i].extent == s.dim[i].extent;
  if (!same)
    throw Error("copy_values: the buffers' shapes differ");
  T *to = dst.data();
  const U *from = src.data();
  if (d.dimensions == 0) {
    *to = *from;
    return;
  }
  const int n = d.dim[0].extent;
  const std::ptrdiff_t sd = d.dim[0].stride, ss = s.dim[0].stride;
  auto run = [&](std::ptrdiff_t od, std::ptrdiff_t os) {
    if (sd == 1 && ss == 1) {
      std::copy(from + os, from + os + n, to + od);
    } else {
      for (int i = 0; i < n; ++i)
        to[od + i * sd] = from[os + i * ss];
    }
  };
  detail::for_each_run(d, s, d.dimensions - 1, 0, 0, run);
}

// A new dense host buffer with `src`'s shape (mins kept) and values: Buffer::copy() without
// Halide 14's for_each_value.
template <typename T>
Halide::Runtime::Buffer<std::remove_const_t<T>> copy_of(const Halide::Runtime::Buffer<T> &src) {
  std::vector<int> extents(src.dimensions());
  for (int i = 0; i < src.dimensions(); ++i)
    extents[i] = src.dim(i).extent();
  Halide::Runtime::Buffer<std::remove_const_t<T>> out(extents);
  for (int i = 0; i < src.dimensions(); ++i)
    out.raw_buffer()->dim[i].min = src.dim(i).min();
  copy_values(out, src);
  return out;
}

} // namespace hkfac
