// Every evaluation app, as scheduled by each CPU autoscheduler, and every pipeline of the
// generalization set, as scheduled by Hkfac, agrees with its plain reference.
#include <gtest/gtest.h>

#include <HalideBuffer.h>
#include <HalideRuntime.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "hkfac/buffer_values.h"
#include "pipeline_variants.h" // generated: the variant libraries' headers and their lists

namespace {

using Halide::Runtime::Buffer;

// One compiled variant of an app (reference, or an autoscheduler's build). A known failure
// (tests/pipelines/known_failures.cmake) carries its reason; one that does not compile has no
// function.
struct Variant {
  std::string app;
  std::string scheduler;
  int (*run)(void **) = nullptr;
  const halide_filter_metadata_t *(*metadata)() = nullptr;
  std::string known_failure;
};

#define HKFAC_VARIANT(app, scheduler, fn, reason)                                                  \
  Variant{#app, #scheduler, fn##_argv, fn##_metadata, reason},
#define HKFAC_UNBUILT(app, scheduler, reason) Variant{#app, #scheduler, nullptr, nullptr, reason},

const std::vector<Variant> &all_variants() {
  static const std::vector<Variant> variants = {HKFAC_PIPELINE_VARIANTS(HKFAC_VARIANT)
                                                    HKFAC_PIPELINE_UNBUILT(HKFAC_UNBUILT)};
  return variants;
}

// Halide's default handler aborts the process; keeping the message lets a failing pipeline be
// reported (or a known failure be recognised) as a test result instead.
std::string last_halide_error;
void record_halide_error(void *, const char *msg) { last_halide_error = msg; }

const Variant &reference_of(const std::string &app) {
  for (const Variant &v : all_variants()) {
    if (v.app == app && v.scheduler == "reference") {
      return v;
    }
  }
  throw std::runtime_error("no reference build for app " + app);
}

std::vector<Variant> scheduled_variants() {
  std::vector<Variant> out;
  for (const Variant &v : all_variants()) {
    if (v.scheduler != "reference") {
      out.push_back(v);
    }
  }
  return out;
}

// Inputs whose meaning limits their range; everything else is uniform over its type (floats in
// [0, 1)). The camera delivers 10-bit data, so full-range samples would all saturate.
double input_upper_bound(const std::string &app, const std::string &arg) {
  if (app == "camera_pipe" && arg == "raw") {
    return 1023;
  }
  return -1;
}

template <typename T> void fill_random(Buffer<T> buf, uint64_t seed, double upper) {
  std::mt19937_64 rng(seed);
  hkfac::for_each_value(buf, [&](T &v) {
    if constexpr (std::is_floating_point_v<T>) {
      v = std::uniform_real_distribution<T>(0, 1)(rng);
    } else {
      const double hi = upper >= 0 ? upper : double(std::numeric_limits<T>::max());
      v = T(std::uniform_int_distribution<int64_t>(int64_t(std::numeric_limits<T>::min()),
                                                   int64_t(hi))(rng));
    }
  });
}

// Calls f with the buffer viewed as its element type.
template <typename F> void with_typed(const Buffer<> &buf, F &&f) {
  const halide_type_t t = buf.type();
  if (t == halide_type_of<float>()) {
    f(Buffer<float>(buf));
  } else if (t == halide_type_of<double>()) {
    f(Buffer<double>(buf));
  } else if (t == halide_type_of<uint8_t>()) {
    f(Buffer<uint8_t>(buf));
  } else if (t == halide_type_of<uint16_t>()) {
    f(Buffer<uint16_t>(buf));
  } else if (t == halide_type_of<int16_t>()) {
    f(Buffer<int16_t>(buf));
  } else if (t == halide_type_of<int32_t>()) {
    f(Buffer<int32_t>(buf));
  } else if (t == halide_type_of<uint32_t>()) {
    f(Buffer<uint32_t>(buf));
  } else {
    FAIL() << "unsupported buffer type (code " << int(t.code) << ", " << int(t.bits) << " bits)";
  }
}

// The arguments of one call: buffers at the estimated shapes, scalars at their estimates. Inputs
// are shared between calls; each call gets fresh outputs.
struct Arguments {
  const halide_filter_metadata_t *md = nullptr;
  std::vector<Buffer<>> buffers;
  std::vector<halide_scalar_value_t> scalars;

  Arguments(const std::string &app, const halide_filter_metadata_t *metadata) : md(metadata) {
    buffers.resize(md->num_arguments);
    scalars.resize(md->num_arguments);
    for (int i = 0; i < md->num_arguments; i++) {
      const halide_filter_argument_t &arg = md->arguments[i];
      if (arg.kind == halide_argument_kind_input_scalar) {
        if (arg.scalar_estimate == nullptr) {
          throw std::runtime_error(std::string("scalar input without estimate: ") + arg.name);
        }
        scalars[i] = *arg.scalar_estimate;
        continue;
      }
      buffers[i] = allocate(arg);
      if (arg.kind == halide_argument_kind_input_buffer) {
        const uint64_t seed = std::hash<std::string>()(app + "/" + arg.name);
        const double upper = input_upper_bound(app, arg.name);
        with_typed(buffers[i], [&](auto typed) { fill_random(typed, seed, upper); });
      }
    }
  }

  static Buffer<> allocate(const halide_filter_argument_t &arg) {
    std::vector<int> mins, extents;
    for (int d = 0; d < arg.dimensions; d++) {
      if (arg.buffer_estimates == nullptr || arg.buffer_estimates[2 * d] == nullptr ||
          arg.buffer_estimates[2 * d + 1] == nullptr) {
        throw std::runtime_error(std::string("buffer without estimates: ") + arg.name);
      }
      mins.push_back(int(*arg.buffer_estimates[2 * d]));
      extents.push_back(int(*arg.buffer_estimates[2 * d + 1]));
    }
    Buffer<> buf(arg.type, extents);
    buf.set_min(mins);
    return buf;
  }

  // Runs fn on these inputs and returns its outputs, in argument order.
  std::vector<Buffer<>> run(int (*fn)(void **)) const {
    std::vector<Buffer<>> outputs;
    std::vector<void *> argv(md->num_arguments);
    std::vector<halide_scalar_value_t> scalar_copies = scalars;
    std::vector<Buffer<>> call_buffers = buffers;
    for (int i = 0; i < md->num_arguments; i++) {
      const halide_filter_argument_t &arg = md->arguments[i];
      if (arg.kind == halide_argument_kind_input_scalar) {
        argv[i] = &scalar_copies[i];
      } else {
        if (arg.kind == halide_argument_kind_output_buffer) {
          call_buffers[i] = allocate(arg);
          outputs.push_back(call_buffers[i]);
        }
        argv[i] = call_buffers[i].raw_buffer();
      }
    }
    last_halide_error.clear();
    halide_set_error_handler(record_halide_error);
    const int err = fn(argv.data());
    if (err != 0) {
      throw std::runtime_error("pipeline returned error " + std::to_string(err) + ": " +
                               last_halide_error);
    }
    return outputs;
  }
};

// Floats may differ by reassociation and FMA contraction, which schedules change: they must agree
// within kTol relative to max(1, |expected|), i.e. absolutely for image values in [0, 1] (a 40th
// of an 8-bit step). Integers must match exactly, except as integer_tolerance says.
constexpr double kTol = 1e-4;

// Integer outputs computed through float stages can differ by one where a float rounding
// difference crosses a .5 boundary: local_laplacian (float pyramids, uint16 out) and
// rgb_yuv_roundtrip (float YUV, uint8 out) do that.
int integer_tolerance(const std::string &app) {
  return app == "local_laplacian" || app == "rgb_yuv_roundtrip" ? 1 : 0;
}

// Both buffers come from Arguments::allocate, so they are dense with identical layouts and can be
// compared element by element in memory order.
template <typename T> std::string compare(Buffer<T> expected, Buffer<T> actual, int int_tol) {
  const size_t count = expected.number_of_elements();
  int64_t mismatches = 0;
  double worst = 0;
  size_t first = 0;
  for (size_t i = 0; i < count; i++) {
    const double e = double(expected.data()[i]), a = double(actual.data()[i]);
    bool same;
    if constexpr (std::is_floating_point_v<T>) {
      same =
          (std::isnan(e) && std::isnan(a)) || std::abs(e - a) <= kTol * std::max(1.0, std::abs(e));
    } else {
      same = std::abs(e - a) <= int_tol;
    }
    if (!same) {
      first = mismatches++ == 0 ? i : first;
      worst = std::max(worst, std::abs(e - a));
    }
  }
  if (mismatches == 0) {
    return "";
  }
  std::ostringstream os;
  os << mismatches << " of " << count << " elements differ (largest difference " << worst
     << "); first at (";
  size_t rest = first;
  for (int d = 0; d < expected.dimensions(); d++) {
    os << (d ? ", " : "") << expected.dim(d).min() + int(rest % expected.dim(d).extent());
    rest /= expected.dim(d).extent();
  }
  os << "): expected " << double(expected.data()[first]) << ", got "
     << double(actual.data()[first]);
  return os.str();
}

// Readable test parameters in gtest's output.
void PrintTo(const Variant &v, std::ostream *os) { *os << v.app << " under " << v.scheduler; }

class SchedulerAgreement : public ::testing::TestWithParam<Variant> {};

// What is wrong with v's outputs against the reference's on the same inputs ("" if nothing).
std::string disagreement(const Variant &v) {
  const Variant &ref = reference_of(v.app);
  const Arguments args(v.app, ref.metadata());
  const std::vector<Buffer<>> expected = args.run(ref.run);
  std::vector<Buffer<>> actual;
  try {
    actual = args.run(v.run);
  } catch (const std::runtime_error &e) {
    return e.what();
  }
  if (expected.size() != actual.size()) {
    return "output count differs";
  }
  std::string report;
  for (size_t i = 0; i < expected.size(); i++) {
    if (expected[i].type() != actual[i].type()) {
      report += "output " + std::to_string(i) + ": type differs; ";
      continue;
    }
    with_typed(expected[i], [&](auto typed_expected) {
      using Typed = decltype(typed_expected);
      const std::string diff = compare(typed_expected, Typed(actual[i]), integer_tolerance(v.app));
      if (!diff.empty()) {
        report += "output " + std::to_string(i) + ": " + diff + "; ";
      }
    });
  }
  return report;
}

TEST_P(SchedulerAgreement, OutputsMatchPlainReference) {
  const Variant &v = GetParam();
  if (v.run == nullptr) {
    GTEST_SKIP() << "known failure of " << v.scheduler << " on " << v.app
                 << " (not built): " << v.known_failure;
  }
  const std::string wrong = disagreement(v);
  if (!v.known_failure.empty()) {
    ASSERT_FALSE(wrong.empty()) << "known failure of " << v.scheduler << " on " << v.app
                                << " no longer reproduces; remove it from "
                                   "tests/pipelines/known_failures.cmake: "
                                << v.known_failure;
    GTEST_SKIP() << "known failure of " << v.scheduler << " on " << v.app << ": " << v.known_failure
                 << " (" << wrong << ")";
  }
  EXPECT_TRUE(wrong.empty()) << v.app << " under " << v.scheduler << ": " << wrong;
}

std::string variant_name(const ::testing::TestParamInfo<Variant> &info) {
  return info.param.app + "_" + info.param.scheduler;
}

INSTANTIATE_TEST_SUITE_P(Apps, SchedulerAgreement, ::testing::ValuesIn(scheduled_variants()),
                         variant_name);

} // namespace
