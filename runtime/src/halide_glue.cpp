// Glue between Halide's C runtime and hkfac's C++ errors: error capture, copies, shape checks.
#include <HalideRuntime.h>

#include <string>

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
  Buffer<float> copy = view.copy(); // dense, 128-byte aligned
  staged_.push_back({b, std::move(copy), written});
  return staged_.back().copy.raw_buffer();
}

AlignedArgs::~AlignedArgs() {
  if (!committed_)
    return;
  for (Staged &s : staged_) {
    if (s.written)
      Buffer<float>(*s.original).copy_from(s.copy);
  }
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
