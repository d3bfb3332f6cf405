// The program measured selection times a candidate in: linked with the candidate's static
// library, started fresh for each candidate.
//
// A candidate timed inside the generator's own process inherits that process's heap, grown and
// fragmented by LLVM, where large per-task buffers are reused in place; a user's program, like
// Halide's RunGen, starts with a small heap that glibc grows and trims around every such buffer
// (brk, madvise and page faults), which made some schedules several times slower there than in
// the generator (docs/RESULTS.md#measured-selection). So each candidate is compiled ahead of time
// and run here, in a process as fresh as the user's.
//
// Usage: timing_runner SPEC_FILE SEED. The spec gives each argument of the filter
// (hkfac_candidate_argv / _metadata) its region or value, one line each:
//   buffer NAME DIMS MIN0 EXTENT0 MIN1 EXTENT1 ...   (inputs and outputs)
//   scalar NAME VALUE
// Input buffers are filled with seeded noise: floats in [0, 1), integers over their type's range.
// Protocol on stdin / stdout, one line each: the runner says "READY" (or "F reason" and exits);
// "T MIN_SECONDS STOP_MS" runs the filter (a first run to warm up, once), then again until
// MIN_SECONDS have passed and at least twice, or a run took over STOP_MS, and answers
// "R BEST_MS RUNS"; "Q" ends it. A failing run answers "F reason".
#include <HalideRuntime.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

extern "C" int hkfac_candidate_argv(void **args);
extern "C" const struct halide_filter_metadata_t *hkfac_candidate_metadata();

namespace {

std::string last_error;

extern "C" void record_error(void *, const char *msg) {
  last_error = msg;
  while (!last_error.empty() && (last_error.back() == '\n' || last_error.back() == ' '))
    last_error.pop_back();
}

struct Spec {
  std::vector<int64_t> region; // buffers: min, extent per dimension
  double value = 0;            // scalars
  bool buffer = false;
};

// A small, fast, seeded generator (splitmix64), as the plugin's in-process runs use.
struct Noise {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
};

uint16_t to_half(float f) {
  // float16 by truncation: noise in [0, 1) only needs to be some float16 value in that range.
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const int32_t e = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  if (e <= 0)
    return 0;
  return static_cast<uint16_t>((e << 10) | ((x >> 13) & 0x3ff));
}

void fill(halide_buffer_t &b, uint64_t seed) {
  Noise noise{seed};
  const size_t bytes = (b.type.bits + 7) / 8;
  size_t n = 1;
  for (int d = 0; d < b.dimensions; ++d)
    n *= static_cast<size_t>(b.dim[d].extent);
  uint8_t *p = b.host;
  for (size_t i = 0; i < n; ++i, p += bytes) {
    if (b.type.code == halide_type_float) {
      const double x = noise.unit();
      if (b.type.bits == 64) {
        std::memcpy(p, &x, 8);
      } else if (b.type.bits == 32) {
        const float f = static_cast<float>(x);
        std::memcpy(p, &f, 4);
      } else {
        const uint16_t h = to_half(static_cast<float>(x));
        std::memcpy(p, &h, 2);
      }
    } else if (b.type.code == halide_type_bfloat) {
      const float f = static_cast<float>(noise.unit());
      uint32_t x;
      std::memcpy(&x, &f, 4);
      const uint16_t h = static_cast<uint16_t>(x >> 16);
      std::memcpy(p, &h, 2);
    } else if (b.type.bits == 1) {
      *p = static_cast<uint8_t>(noise.next() & 1);
    } else {
      const uint64_t x = noise.next();
      std::memcpy(p, &x, bytes);
    }
  }
}

void set_scalar(halide_scalar_value_t &s, const halide_type_t &t, double v) {
  s.u.u64 = 0;
  if (t.code == halide_type_float) {
    if (t.bits == 64)
      s.u.f64 = v;
    else
      s.u.f32 = static_cast<float>(v);
  } else if (t.code == halide_type_int) {
    if (t.bits == 8)
      s.u.i8 = static_cast<int8_t>(v);
    else if (t.bits == 16)
      s.u.i16 = static_cast<int16_t>(v);
    else if (t.bits == 32)
      s.u.i32 = static_cast<int32_t>(v);
    else
      s.u.i64 = static_cast<int64_t>(v);
  } else {
    if (t.bits == 1)
      s.u.b = v != 0;
    else if (t.bits == 8)
      s.u.u8 = static_cast<uint8_t>(v);
    else if (t.bits == 16)
      s.u.u16 = static_cast<uint16_t>(v);
    else if (t.bits == 32)
      s.u.u32 = static_cast<uint32_t>(v);
    else
      s.u.u64 = static_cast<uint64_t>(v);
  }
}

int fail(const std::string &why) {
  std::printf("F %s\n", why.c_str());
  std::fflush(stdout);
  return 1;
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 3)
    return fail("usage: timing_runner SPEC_FILE SEED");
  halide_set_error_handler(record_error);
  std::map<std::string, Spec> specs;
  std::ifstream spec_file(argv[1]);
  std::string line;
  while (std::getline(spec_file, line)) {
    std::istringstream in(line);
    std::string kind, name;
    in >> kind >> name;
    Spec s;
    if (kind == "buffer") {
      int dims = 0;
      in >> dims;
      s.region.resize(2 * static_cast<size_t>(dims));
      for (int64_t &x : s.region)
        in >> x;
      s.buffer = true;
    } else if (kind == "scalar") {
      in >> s.value;
    } else {
      continue;
    }
    specs[name] = s;
  }
  const uint64_t seed = std::strtoull(argv[2], nullptr, 10);
  const halide_filter_metadata_t *md = hkfac_candidate_metadata();
  const int n = md->num_arguments;
  std::vector<halide_buffer_t> buffers(n);
  std::vector<std::vector<halide_dimension_t>> shapes(n);
  std::vector<halide_scalar_value_t> scalars(n);
  std::vector<void *> args(n);
  std::vector<void *> memory;
  for (int i = 0; i < n; ++i) {
    const halide_filter_argument_t &a = md->arguments[i];
    auto it = specs.find(a.name);
    if (it == specs.end())
      return fail(std::string("no size or value for the argument \"") + a.name + "\"");
    const Spec &s = it->second;
    if (a.kind == halide_argument_kind_input_scalar) {
      set_scalar(scalars[i], a.type, s.value);
      args[i] = &scalars[i];
      continue;
    }
    if (static_cast<int>(s.region.size()) != 2 * a.dimensions)
      return fail(std::string("the argument \"") + a.name + "\" has " +
                  std::to_string(a.dimensions) + " dimensions");
    halide_buffer_t &b = buffers[i];
    b = halide_buffer_t{};
    shapes[i].resize(a.dimensions);
    int64_t stride = 1;
    for (int d = 0; d < a.dimensions; ++d) {
      shapes[i][d].min = static_cast<int32_t>(s.region[2 * d]);
      shapes[i][d].extent = static_cast<int32_t>(s.region[2 * d + 1]);
      shapes[i][d].stride = static_cast<int32_t>(stride);
      stride *= s.region[2 * d + 1];
    }
    b.type = a.type;
    b.dimensions = a.dimensions;
    b.dim = shapes[i].data();
    const size_t bytes = static_cast<size_t>(stride) * ((a.type.bits + 7) / 8);
    void *host = nullptr;
    if (posix_memalign(&host, 128, bytes + 128) != 0)
      return fail(std::string("no memory for \"") + a.name + "\"");
    memory.push_back(host);
    b.host = static_cast<uint8_t *>(host);
    if (a.kind == halide_argument_kind_input_buffer)
      fill(b, seed * 1000003u + static_cast<uint64_t>(i) + 1);
    else
      std::memset(b.host, 0, bytes);
    args[i] = &b;
  }
  std::printf("READY\n");
  std::fflush(stdout);
  bool warm = false;
  while (std::getline(std::cin, line)) {
    if (line.empty() || line[0] != 'T')
      break;
    double min_s = 0, stop_ms = 0;
    std::istringstream(line.substr(1)) >> min_s >> stop_ms;
    if (!warm) {
      // The first run faults in the outputs' pages and starts Halide's thread pool.
      if (hkfac_candidate_argv(args.data()) != 0)
        return fail("run: " + last_error);
      warm = true;
    }
    double best = INFINITY;
    int runs = 0;
    const auto start = std::chrono::steady_clock::now();
    do {
      const auto t = std::chrono::steady_clock::now();
      if (hkfac_candidate_argv(args.data()) != 0)
        return fail("run: " + last_error);
      const double ms = ms_since(t);
      best = std::min(best, ms);
      ++runs;
      if (ms > stop_ms)
        break;
    } while (runs < 2 || ms_since(start) < min_s * 1e3);
    std::printf("R %.17g %d\n", best, runs);
    std::fflush(stdout);
  }
  for (void *p : memory)
    std::free(p);
  return 0;
}
