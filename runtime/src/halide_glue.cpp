// Glue between Halide's C runtime and hkfac's C++ errors: error capture, copies, shape checks.
#include <HalideRuntime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
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
  expect_layout(b, kernel, arg);
}

void expect_layout(const halide_buffer_t *b, const char *kernel, const char *arg) {
  for (int i = 0; i < b->dimensions; i++) {
    if (b->dim[i].min != 0) {
      throw Error(std::string(kernel) + ": argument '" + arg + "' starts at index " +
                  std::to_string(b->dim[i].min) + " in dimension " + std::to_string(i) +
                  "; kernels index their arguments from 0 (a cropped view needs its mins set "
                  "to 0, e.g. Buffer::translate)");
    }
  }
  if (b->dimensions > 0 && b->dim[0].stride != 1) {
    throw Error(std::string(kernel) + ": argument '" + arg + "' has stride " +
                std::to_string(b->dim[0].stride) +
                " in dimension 0 (columns); kernels need each row dense (a transposed view "
                "must be copied, or passed untransposed with the kernel's transpose flag)");
  }
}

namespace {

// The bytes [first, last) a buffer's host elements span (null for an empty buffer).
struct Span {
  const uint8_t *first = nullptr, *last = nullptr;
};
Span host_span(const halide_buffer_t *b) {
  Span s;
  if (!b->host)
    return s;
  std::ptrdiff_t lo = 0, hi = 0;
  for (int i = 0; i < b->dimensions; i++) {
    if (b->dim[i].extent <= 0)
      return s;
    const std::ptrdiff_t reach =
        static_cast<std::ptrdiff_t>(b->dim[i].extent - 1) * b->dim[i].stride;
    (reach < 0 ? lo : hi) += reach;
  }
  const int bytes = b->type.bytes();
  s.first = b->host + lo * bytes;
  s.last = b->host + (hi + 1) * bytes;
  return s;
}

// Two 2-D views of float rows with one row stride: whether an element lies in both. With
// offset q rows and r columns from a to b (0 <= r < stride), b's row k spans columns [r, r + wb)
// of a's row q + k, wrapping into columns [r - stride, r - stride + wb) of row q + k + 1.
bool rows_overlap(const halide_buffer_t *a, const halide_buffer_t *b) {
  const std::ptrdiff_t stride = a->dim[1].stride;
  const std::ptrdiff_t offset = (b->host - a->host) / static_cast<std::ptrdiff_t>(sizeof(float));
  std::ptrdiff_t q = offset / stride, r = offset % stride;
  if (r < 0) {
    r += stride;
    q -= 1;
  }
  const std::ptrdiff_t wa = a->dim[0].extent, ha = a->dim[1].extent;
  const std::ptrdiff_t wb = b->dim[0].extent, hb = b->dim[1].extent;
  auto intersect = [](std::ptrdiff_t lo1, std::ptrdiff_t hi1, std::ptrdiff_t lo2,
                      std::ptrdiff_t hi2) { return lo1 < hi2 && lo2 < hi1; };
  return (intersect(r, r + wb, 0, wa) && intersect(q, q + hb, 0, ha)) ||
         (intersect(r - stride, r - stride + wb, 0, wa) && intersect(q + 1, q + 1 + hb, 0, ha));
}

bool plain_rows(const halide_buffer_t *b, std::ptrdiff_t stride) {
  return b->dimensions == 2 && b->type.bytes() == sizeof(float) && b->dim[0].stride == 1 &&
         b->dim[1].stride == stride && b->dim[0].extent <= stride &&
         reinterpret_cast<uintptr_t>(b->host) % sizeof(float) == 0;
}

bool overlap(const halide_buffer_t *a, const halide_buffer_t *b) {
  if (!a->host || !b->host) // device-only: one allocation is one handle
    return !a->host && !b->host && a->device != 0 && a->device == b->device;
  const Span sa = host_span(a), sb = host_span(b);
  if (!sa.first || !sb.first || sa.first >= sb.last || sb.first >= sa.last)
    return false;
  // Spans that meet may still interleave without a shared element (column blocks of one
  // matrix): resolved exactly for rows of one stride, conservatively otherwise.
  const std::ptrdiff_t stride = a->dimensions == 2 ? a->dim[1].stride : 0;
  if (stride > 0 && plain_rows(a, stride) && plain_rows(b, stride))
    return rows_overlap(a, b);
  return true;
}

} // namespace

bool same_view(const halide_buffer_t *a, const halide_buffer_t *b) {
  if (a->host != b->host || a->device != b->device || a->dimensions != b->dimensions)
    return false;
  for (int i = 0; i < a->dimensions; i++) {
    if (a->dim[i].min != b->dim[i].min || a->dim[i].extent != b->dim[i].extent ||
        a->dim[i].stride != b->dim[i].stride)
      return false;
  }
  return true;
}

void expect_disjoint(const char *kernel, const NamedBuffer *outputs, std::size_t num_outputs,
                     const NamedBuffer *inputs, std::size_t num_inputs) {
  const NamedBuffer *outputs_end = outputs + num_outputs;
  for (const NamedBuffer *out = outputs; out != outputs_end; ++out) {
    auto check = [&](const NamedBuffer &other) {
      if (out->buffer && other.buffer && overlap(out->buffer, other.buffer)) {
        throw Error(std::string(kernel) + ": argument '" + out->name +
                    "' shares memory with argument '" + other.name +
                    "'; the kernel would overwrite what it still reads (pass a separate output)");
      }
    };
    for (const NamedBuffer *other = out + 1; other != outputs_end; ++other)
      check(*other);
    for (const NamedBuffer *in = inputs; in != inputs + num_inputs; ++in)
      check(*in);
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

AlignedArgs::AlignedArgs(Device d) : device_(d) {
  if (d != Device::cpu && d != Device::cuda) {
    throw Error("kernel called with an invalid hkfac::Device value " +
                std::to_string(static_cast<int>(d)));
  }
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
