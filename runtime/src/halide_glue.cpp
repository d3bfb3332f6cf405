// Glue between Halide's C runtime and hkfac's C++ errors: error capture, copies, shape checks.
#include <HalideRuntime.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dispatch.h"

namespace hkfac {
namespace detail {
namespace {

thread_local std::string t_last_error;

void capture_error(void *, const char *msg) {
  // Halide reports one failure per call; keep the first line so the thrown Error stays readable.
  t_last_error = msg ? msg : "";
  while (!t_last_error.empty() && t_last_error.back() == '\n')
    t_last_error.pop_back();
}

// Installed when the library loads: Halide's default handler would print to stderr and the
// caller could not see why a kernel failed.
struct InstallHandler {
  InstallHandler() { halide_set_error_handler(capture_error); }
} g_install;

std::string describe(const halide_buffer_t *b) {
  std::string s = std::to_string(b->dimensions) + "-D [";
  for (int i = 0; i < b->dimensions; i++) {
    s += (i ? " x " : "") + std::to_string(b->dim[i].extent);
  }
  return s + "]";
}

} // namespace

std::string take_last_halide_error() {
  std::string s;
  s.swap(t_last_error);
  return s;
}

void check_halide_result(int code, const char *kernel, Device d) {
  if (code == 0)
    return;
  std::string msg = take_last_halide_error();
  throw Error(std::string("kernel ") + kernel + " on " + device_name(d) + " failed (Halide error " +
              std::to_string(code) + ")" + (msg.empty() ? "" : ": " + msg));
}

void expect_dims(const halide_buffer_t *b, int dims, const char *kernel, const char *arg) {
  if (!b || (!b->host && !b->device)) {
    throw Error(std::string(kernel) + ": argument '" + arg + "' is an empty buffer");
  }
  if (b->dimensions != dims) {
    throw Error(std::string(kernel) + ": argument '" + arg + "' must be " + std::to_string(dims) +
                "-D, got " + describe(b));
  }
}

void expect_extent(const halide_buffer_t *b, int dim, int extent, const char *kernel,
                   const char *arg) {
  if (b->dim[dim].extent != extent) {
    throw Error(std::string(kernel) + ": argument '" + arg + "' has extent " +
                std::to_string(b->dim[dim].extent) + " in dimension " + std::to_string(dim) + " (" +
                (dim == 0 ? "columns" : "rows") + "), expected " + std::to_string(extent) +
                "; shape is " + describe(b));
  }
}

void expect_matrix(const halide_buffer_t *b, int rows, int cols, const char *kernel,
                   const char *arg) {
  expect_dims(b, 2, kernel, arg);
  expect_extent(b, 1, rows, kernel, arg);
  expect_extent(b, 0, cols, kernel, arg);
}

void expect_vector(const halide_buffer_t *b, int n, const char *kernel, const char *arg) {
  expect_dims(b, 1, kernel, arg);
  expect_extent(b, 0, n, kernel, arg);
}

namespace {

// Per-thread reusable staging storage (see AlignedArgs). Blocks are 128-byte aligned.
struct StagingBlock {
  std::unique_ptr<float, decltype(&std::free)> data{nullptr, &std::free};
  size_t capacity = 0; // floats
  bool in_use = false;
};
thread_local std::vector<StagingBlock> t_blocks;

// Index of a free block of at least n floats, growing or adding one when none fits.
int acquire_block(size_t n) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(t_blocks.size()); i++) {
    if (!t_blocks[i].in_use && (best < 0 || t_blocks[i].capacity > t_blocks[best].capacity)) {
      best = i;
    }
  }
  if (best < 0) {
    t_blocks.emplace_back();
    best = static_cast<int>(t_blocks.size()) - 1;
  }
  StagingBlock &b = t_blocks[best];
  if (b.capacity < n) {
    const size_t bytes = (n * sizeof(float) + 127) / 128 * 128;
    b.data.reset(static_cast<float *>(std::aligned_alloc(128, bytes)));
    if (!b.data)
      throw Error("out of memory staging an unaligned buffer of " + std::to_string(n) + " floats");
    b.capacity = n;
  }
  b.in_use = true;
  return best;
}

} // namespace

halide_buffer_t *AlignedArgs::stage(halide_buffer_t *b, bool written) {
  // The widest vector Halide uses on these targets (AVX-512) is 64 bytes.
  constexpr uintptr_t kAlign = 64;
  if (device_ != Device::cpu || !b->host || reinterpret_cast<uintptr_t>(b->host) % kAlign == 0) {
    return b;
  }
  for (Staged &s : staged_) {
    if (s.original == b) {
      s.written = s.written || written;
      return s.copy.raw_buffer();
    }
  }
  Buffer<float> view(*b);
  const int block = acquire_block(view.number_of_elements());
  // A dense buffer of the same shape over the block (kernels need only dimension 0 contiguous).
  std::vector<halide_dimension_t> dims(b->dim, b->dim + b->dimensions);
  int stride = 1;
  for (halide_dimension_t &d : dims) {
    d.stride = stride;
    stride *= d.extent;
  }
  Buffer<float> copy(t_blocks[block].data.get(), b->dimensions, dims.data());
  copy_values(copy, view);
  staged_.push_back({b, std::move(copy), written, block});
  return staged_.back().copy.raw_buffer();
}

AlignedArgs::~AlignedArgs() {
  for (Staged &s : staged_) {
    if (committed_ && s.written) {
      Buffer<float> original(*s.original);
      copy_values(original, s.copy);
    }
    t_blocks[s.block].in_use = false;
  }
}

int float_lanes(const halide_filter_metadata_t *metadata) {
  const char *target = metadata->target;
  auto has = [target](const char *feature) {
    const size_t len = std::strlen(feature);
    for (const char *p = std::strstr(target, feature); p; p = std::strstr(p + 1, feature)) {
      if ((p == target || p[-1] == '-') && (p[len] == '-' || p[len] == '\0'))
        return true;
    }
    return false;
  };
  return has("avx512") ? 16 : has("avx") || has("avx2") ? 8 : 4;
}

int rows_of(const halide_buffer_t *b) { return b->dimensions >= 2 ? b->dim[1].extent : 1; }
int cols_of(const halide_buffer_t *b) { return b->dim[0].extent; }

} // namespace detail

void sync_to_host(halide_buffer_t *buf, const char *what) {
  if (!buf->device_dirty())
    return;
  int rc = halide_copy_to_host(nullptr, buf);
  detail::check_halide_result(rc, what, Device::cuda);
}

void sync_to_device(halide_buffer_t *buf, Device d, const char *what) {
  if (d == Device::cpu)
    return;
  int rc = halide_copy_to_device(nullptr, buf, device_interface(d));
  detail::check_halide_result(rc, what, d);
}

} // namespace hkfac
