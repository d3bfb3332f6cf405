// The Hkfac plugin loaded into Halide in-process: its schedules compute what the plain schedule
// computes, its errors name the input, its failures fall back, and its featurization holds the
// values one can count by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "Halide.h"
#include "scoped_env.h"

using namespace Halide;

namespace {

constexpr int kS = 39; // CPU schedule features
constexpr int kAlgo = 287;
const Target kTarget("x86-64-linux-avx-avx2-f16c-fma-sse41");

// The pipeline's lowered statement as text, for tests that assert on what Halide makes of a
// schedule (written to `path` on the way, as compile_to_lowered_stmt must).
std::string lowered_statement(Pipeline &pipe, const ImageParam &in, const std::string &path) {
  pipe.compile_to_lowered_stmt(path, {in}, StmtOutputFormat::Text, kTarget);
  std::ifstream f(path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

class HkfacPlugin : public ::testing::Test {
protected:
  static void SetUpTestSuite() { load_plugin(HKFAC_PLUGIN_PATH); }
  ScopedEnv beam_{"HL_BEAM_SIZE", "1"};
  // The model alone and no cache unless a test asks: schedules are then a function of the
  // pipeline, the weights and the seed (the measured tests below set both).
  ScopedEnv tune_{"HKFAC_TUNE_SECONDS", "0"};
  ScopedEnv cache_{"HKFAC_CACHE_DIR", "off"};
};

// A small pipeline with a stencil, a reduction and a boundary condition: in -> clamped -> blur_x
// -> blur_y -> out, plus a histogram-like reduction feeding the output.
struct SmallPipeline {
  ImageParam in{Float(32), 2, "in"};
  Func clamped{"clamped"}, blur_x{"blur_x"}, blur_y{"blur_y"}, total{"total"}, out{"out"};
  Var x{"x"}, y{"y"};
  RDom r{0, 5, "r"};
  SmallPipeline(int w, int h, bool estimates = true) {
    clamped = BoundaryConditions::repeat_edge(in);
    blur_x(x, y) = (clamped(x - 1, y) + clamped(x, y) + clamped(x + 1, y)) / 3;
    blur_y(x, y) = (blur_x(x, y - 1) + blur_x(x, y) + blur_x(x, y + 1)) / 3;
    total(y) = 0.0f;
    total(y) += blur_y(r, y);
    out(x, y) = blur_y(x, y) * 2 + total(y);
    in.set_estimates({{0, w}, {0, h}});
    if (estimates)
      out.set_estimates({{0, w}, {0, h}});
  }
  Buffer<float> input(int w, int h) const {
    Buffer<float> b(w, h);
    for (int j = 0; j < h; ++j)
      for (int i = 0; i < w; ++i)
        b(i, j) = std::sin(0.1f * i + 0.37f * j);
    return b;
  }
};

MachineParams machine(uint64_t cache = 16 * 1024 * 1024) { return MachineParams(2, cache, 40); }

Buffer<float> run_root_reference(int w, int h) {
  SmallPipeline p(w, h);
  p.clamped.compute_root();
  p.blur_x.compute_root();
  p.blur_y.compute_root();
  p.total.compute_root();
  p.in.set(p.input(w, h));
  return p.out.realize({w, h}, kTarget);
}

void expect_equal(const Buffer<float> &a, const Buffer<float> &b) {
  ASSERT_EQ(a.width(), b.width());
  for (int j = 0; j < a.height(); ++j)
    for (int i = 0; i < a.width(); ++i)
      ASSERT_NEAR(a(i, j), b(i, j), 1e-5f * (1 + std::fabs(b(i, j)))) << i << "," << j;
}

// A stage's algorithm features (algorithm_features.h): the op histogram's count of op `kind` at
// `type`, and the count of access `pattern` of access `kind` at `type`.
float op(const float *algo, int kind, int type) { return algo[7 + kind * 7 + type]; }
float access(const float *algo, int pattern, int kind, int type) {
  return algo[7 + (24 + pattern * 4 + kind) * 7 + type];
}

std::vector<float> floats(const std::vector<uint8_t> &bytes) {
  std::vector<float> f(bytes.size() / 4);
  std::memcpy(f.data(), bytes.data(), f.size() * 4);
  return f;
}

TEST_F(HkfacPlugin, ScheduleComputesWhatThePlainScheduleComputes) {
  for (const char *beam : {"1", "3"}) {
    ScopedEnv b("HL_BEAM_SIZE", beam);
    for (const char *seed : {"0", "7"}) {
      ScopedEnv w("HL_RANDOMIZE_WEIGHTS", seed[0] == '0' ? nullptr : seed);
      SmallPipeline p(97, 53);
      Pipeline pipe(p.out);
      AutoSchedulerResults r = pipe.auto_schedule("Hkfac", kTarget, machine());
      EXPECT_FALSE(r.schedule_source.empty());
      EXPECT_EQ(r.scheduler_name, "Hkfac");
      p.in.set(p.input(97, 53));
      Buffer<float> got = pipe.realize({97, 53}, kTarget);
      expect_equal(got, run_root_reference(97, 53));
    }
  }
}

// prod(x, y) = Σ_r a(r, y) b(x, r): n rows, m columns, depth k, with estimates.
Func matrix_product(ImageParam &pa, ImageParam &pb, int n, int m, int k) {
  Func prod("prod");
  Var x("x"), y("y");
  RDom r(0, k, "r");
  prod(x, y) = 0.0f;
  prod(x, y) += pa(r, y) * pb(x, r);
  pa.set_estimates({{0, k}, {0, n}});
  pb.set_estimates({{0, m}, {0, k}});
  prod.set_estimates({{0, m}, {0, n}});
  return prod;
}

// A matrix product whose update the search may block by rows (FuncChoice::update_rows) and by
// vectors side by side (update_vectors): with rows, columns and depth that no block, vector or
// unroll divides, a schedule blocked either way must compute the product a plain loop computes.
TEST_F(HkfacPlugin, RowBlockedReductionComputesThePlainProduct) {
  const int n = 45, m = 70, k = 37;
  Buffer<float> a(k, n), b(m, k);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < k; ++j)
      a(j, i) = std::sin(0.3f * i + 0.7f * j);
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < m; ++j)
      b(j, i) = std::cos(0.2f * i - 0.5f * j);
  bool rows = false, columns = false;
  for (int seed = 1; seed <= 60 && !(rows && columns); ++seed) {
    ImageParam pa(Float(32), 2, "a"), pb(Float(32), 2, "b");
    Func prod = matrix_product(pa, pb, n, m, k);
    const std::string s = std::to_string(seed);
    ScopedEnv w("HL_RANDOMIZE_WEIGHTS", s.c_str());
    Pipeline pipe(prod);
    AutoSchedulerResults res = pipe.auto_schedule("Hkfac", kTarget, machine());
    const bool by_rows = res.schedule_source.find("prod.update(0).unroll(y_") != std::string::npos;
    const bool by_columns =
        res.schedule_source.find("prod.update(0).unroll(x_u)") != std::string::npos;
    if ((!by_rows || rows) && (!by_columns || columns))
      continue;
    rows = rows || by_rows;
    columns = columns || by_columns;
    pa.set(a);
    pb.set(b);
    Buffer<float> got = pipe.realize({m, n}, kTarget);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < m; ++j) {
        float want = 0;
        for (int t = 0; t < k; ++t)
          want += a(t, i) * b(j, t);
        ASSERT_NEAR(got(j, i), want, 1e-4f * (1 + std::fabs(want))) << j << "," << i << "\n"
                                                                    << res.schedule_source;
      }
  }
  EXPECT_TRUE(rows) << "no random model of 60 blocked the product's rows";
  EXPECT_TRUE(columns) << "no random model of 60 blocked the product's columns";
}

// A chain of 3 x 3 box filters over a clamped input: too many calls to inline it all, so the
// search computes its stages at one another's loops.
struct StencilChain {
  ImageParam in{Float(32), 2, "in"};
  Func out{"out"};
  Var x{"x"}, y{"y"};
  explicit StencilChain(int w, int h, int stages = 3) {
    Func f = BoundaryConditions::repeat_edge(in);
    for (int s = 0; s < stages; ++s) {
      Func g("box" + std::to_string(s));
      Expr sum = 0.0f;
      for (int dy = -1; dy <= 1; ++dy)
        for (int dx = -1; dx <= 1; ++dx)
          sum += f(x + dx, y + dy) * (1.0f + 0.1f * (dx + 3 * dy + s));
      g(x, y) = sum / 9;
      f = g;
    }
    out(x, y) = f(x, y);
    in.set_estimates({{0, w}, {0, h}});
    out.set_estimates({{0, w}, {0, h}});
  }
};

// Schedules whose producers are stored one tile loop further out than they are computed (Halide
// slides them along that loop and folds their storage), and schedules that nest a producer in an
// At Func's row loop: random models find both; each must compute what the plain schedule
// computes, on a size no tile or vector divides.
TEST_F(HkfacPlugin, SlidingWindowsAndNestsComputeWhatThePlainScheduleComputes) {
  const int w = 389, h = 211;
  Buffer<float> input(w, h);
  for (int j = 0; j < h; ++j)
    for (int i = 0; i < w; ++i)
      input(i, j) = std::sin(0.1f * i + 0.37f * j);
  StencilChain plain(w, h);
  plain.in.set(input);
  const Buffer<float> want = plain.out.realize({w, h}, kTarget);
  const std::regex stored("\\.store_(at|root)\\(");
  const std::regex nested("\\.compute_at\\([A-Za-z_0-9]+, (x|y|_1)\\)");
  int slid = 0, nests = 0;
  ScopedEnv b("HL_BEAM_SIZE", "2");
  for (int seed = 1; seed <= 20 && (slid < 3 || nests < 3); ++seed) {
    const std::string s = std::to_string(seed);
    ScopedEnv rw("HL_RANDOMIZE_WEIGHTS", s.c_str());
    // Only the placements under test (compute_root where none applies), since random models
    // prefer compute_root: sliding windows, or nests in Funcs computed per tile.
    ScopedEnv kinds("HKFAC_PLACEMENTS", seed % 2 ? "slide" : "tile,nest");
    StencilChain p(w, h);
    Pipeline pipe(p.out);
    AutoSchedulerResults r = pipe.auto_schedule("Hkfac", kTarget, machine());
    const bool is_slid = std::regex_search(r.schedule_source, stored);
    const bool is_nested = std::regex_search(r.schedule_source, nested);
    if (!is_slid && !is_nested)
      continue;
    slid += is_slid;
    nests += is_nested;
    p.in.set(input);
    Buffer<float> got = pipe.realize({w, h}, kTarget);
    SCOPED_TRACE(r.schedule_source);
    expect_equal(got, want);
  }
  EXPECT_GE(slid, 3) << "random models of 20 stored a producer outside its compute loop " << slid
                     << " times";
  EXPECT_GE(nests, 3) << "random models of 20 nested a producer in an At Func " << nests
                      << " times";
}

// Heap traffic of one realization, counted through the JIT's handlers: every halide_malloc, and
// every parallel task (run one after another, so the count is exact).
struct HeapCount {
  static inline int mallocs = 0, tasks = 0;
  static void *malloc_fn(JITUserContext *, size_t n) {
    ++mallocs;
    return std::aligned_alloc(128, (n + 127) / 128 * 128);
  }
  static void free_fn(JITUserContext *, void *p) { std::free(p); }
  static int par_for(JITUserContext *ctx, int (*f)(JITUserContext *, int, uint8_t *), int min,
                     int extent, uint8_t *closure) {
    for (int i = min; i < min + extent; ++i) {
      ++tasks;
      if (int r = f(ctx, i, closure))
        return r;
    }
    return 0;
  }
  static void install(Pipeline &p) {
    p.jit_handlers().custom_malloc = malloc_fn;
    p.jit_handlers().custom_free = free_fn;
    p.jit_handlers().custom_do_par_for = par_for;
  }
};

// Two channel-wise stencils on a (channels, x, y) image with a boundary condition, estimated
// at the given size; as the apps' channel-major layouts, dimension 0 is short.
struct ChannelChain {
  ImageParam in{Float(32), 3, "in"};
  Func out{"out"};
  ChannelChain(int channels, int w, int h) {
    Var c("c"), x("x"), y("y");
    Func f = BoundaryConditions::repeat_edge(in);
    for (int s = 0; s < 2; ++s) {
      Func g("chan" + std::to_string(s));
      g(c, x, y) = (f(c, x - 1, y) + 2 * f(c, x, y) + f(c, x + 1, y + s)) * 0.25f;
      f = g;
    }
    out(c, x, y) = f(c, x, y) * 2;
    in.set_estimates({{0, channels}, {0, w}, {0, h}});
    out.set_estimates({{0, channels}, {0, w}, {0, h}});
  }
  static Buffer<float> input(int channels, int w, int h) {
    Buffer<float> b(channels, w, h);
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        for (int c = 0; c < channels; ++c)
          b(c, x, y) = std::sin(0.1f * x + 0.37f * y + 0.5f * c);
    return b;
  }
};

// A producer computed per tile is allocated inside the tile loops. Where the output's channel
// dimension is not split, its region per tile has a size known only at run time, and an
// allocation of Halide's default kind then calls halide_malloc once per tile. Whatever the
// model, each Func must allocate at most a couple of times per parallel task (once at root), and
// compute what the plain schedule computes.
TEST_F(HkfacPlugin, ProducersPerTileAllocateOncePerTaskNotPerTile) {
  const int channels = 20, w = 389, h = 23;
  const Buffer<float> input = ChannelChain::input(channels, w, h);
  // A fresh pipeline each time: a schedule stays with the Funcs it was applied to.
  auto pipeline = [&]() {
    ChannelChain p(channels, w, h);
    p.in.set(input);
    return p.out;
  };
  const Buffer<float> want = pipeline().realize({channels, w, h}, kTarget);
  const std::regex per_tile("\\.compute_at\\(");
  int checked = 0;
  ScopedEnv b("HL_BEAM_SIZE", "2");
  ScopedEnv kinds("HKFAC_PLACEMENTS", "tile");
  for (int seed = 1; seed <= 16 && checked < 6; ++seed) {
    const std::string s = std::to_string(seed);
    ScopedEnv rw("HL_RANDOMIZE_WEIGHTS", s.c_str());
    Pipeline pipe(pipeline());
    const std::string src = pipe.auto_schedule("Hkfac", kTarget, machine()).schedule_source;
    const auto at = std::distance(std::sregex_iterator(src.begin(), src.end(), per_tile),
                                  std::sregex_iterator());
    if (at == 0)
      continue;
    ++checked;
    HeapCount::install(pipe);
    HeapCount::mallocs = HeapCount::tasks = 0;
    Buffer<float> got(channels, w, h);
    pipe.realize(got, kTarget);
    SCOPED_TRACE(src);
    const std::string fetch = "pipeline.get_func(";
    long funcs = 0;
    for (size_t i = src.find(fetch); i != std::string::npos; i = src.find(fetch, i + 1))
      ++funcs;
    EXPECT_LE(HeapCount::mallocs, (funcs - at) + 2 * at * std::max(1, HeapCount::tasks))
        << HeapCount::tasks << " tasks, " << funcs - at << " Funcs at root, " << at
        << " computed per tile";
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        for (int c = 0; c < channels; ++c)
          ASSERT_NEAR(got(c, x, y), want(c, x, y), 1e-5f) << c << "," << x << "," << y;
  }
  EXPECT_GE(checked, 6) << "random models of 16 computed a producer per tile " << checked
                        << " times";
}

// A 1x1 convolution mixing 16 input channels into `channels` output channels, then a ReLU:
// the reduction that depthwise_separable_conv's pointwise stage is.
struct ChannelMix {
  ImageParam in{Float(32), 3, "in"};
  Func out{"out"};
  ChannelMix(int channels, int w, int h) {
    Var c("c"), x("x"), y("y");
    Func weight("weight"), mix("mix");
    RDom r(0, 16, "r");
    weight(c, x) = Halide::sin(0.3f * cast<float>(c) + 0.7f * cast<float>(x));
    mix(c, x, y) = 0.0f;
    mix(c, x, y) += weight(c, r) * in(r, x, y);
    out(c, x, y) = max(mix(c, x, y), 0.0f);
    in.set_estimates({{0, 16}, {0, w}, {0, h}});
    out.set_estimates({{0, channels}, {0, w}, {0, h}});
  }
};

// An output that hosts a reduction per tile but leaves a dimension whole (here its channels) is
// also split by that dimension's estimate, in a specialization for extents that are multiples of
// it: there the reduction's allocation has a constant size in the lowered statement (on the
// stack, where LLVM may keep its accumulators in registers across the reduction). At 32 x 64
// every update split divides that region; at 24 x 67 some leave tails, which Halide 14 miscompiles
// over constant extents (points accumulated twice), so there the schedule must stay as it was.
// Whatever the model, multiples of the estimate and other extents all compute what the plain
// schedule computes.
TEST_F(HkfacPlugin, ReductionsPerTileOfAWholeOutputDimensionHaveConstantAllocations) {
  const int h = 29;
  const std::string stmt = ::testing::TempDir() + "/hkfac_whole_dims.stmt";
  const std::regex per_tile("\\n *mix\\.compute_at\\(");
  const std::regex constant("allocate mix(\\$[0-9]+)?\\[[a-z0-9]+( \\* [0-9]+)+\\]");
  ScopedEnv b("HL_BEAM_SIZE", "2");
  ScopedEnv kinds("HKFAC_PLACEMENTS", "tile");
  for (auto [channels, w, divides] : {std::tuple{32, 64, true}, std::tuple{24, 67, false}}) {
    Buffer<float> input(16, w, h);
    input.for_each_element(
        [&](int c, int x, int y) { input(c, x, y) = std::cos(0.2f * x + 0.1f * y + c); });
    int checked = 0;
    for (int seed = 1; seed <= 24 && checked < 5; ++seed) {
      const std::string s = std::to_string(seed);
      ScopedEnv rw("HL_RANDOMIZE_WEIGHTS", s.c_str());
      ChannelMix p(channels, w, h);
      Pipeline pipe(p.out);
      const std::string src = pipe.auto_schedule("Hkfac", kTarget, machine()).schedule_source;
      if (!std::regex_search(src, per_tile))
        continue;
      ++checked;
      SCOPED_TRACE(src);
      if (divides) {
        EXPECT_TRUE(std::regex_search(lowered_statement(pipe, p.in, stmt), constant))
            << "mix has no allocation of constant size";
      }
      p.in.set(input);
      for (int n : {channels, 2 * channels, channels + 7}) {
        ChannelMix plain(channels, w, h);
        plain.in.set(input);
        const Buffer<float> want = plain.out.realize({n, w, h}, kTarget);
        Buffer<float> got = pipe.realize({n, w, h}, kTarget);
        for (int y = 0; y < h; ++y)
          for (int x = 0; x < w; ++x)
            for (int c = 0; c < n; ++c)
              ASSERT_NEAR(got(c, x, y), want(c, x, y), 1e-4f)
                  << channels << " x " << w << ", " << n << " channels: " << c << "," << x << ","
                  << y;
      }
    }
    EXPECT_GE(checked, 5) << "random models of 24 computed the reduction per tile " << checked
                          << " times";
  }
}

// A reduction over a downsample: acc sums three points of pre at stride 2 along x.
struct Downsampled {
  ImageParam in{UInt(8), 2, "in"};
  Func out{"out"};
  Downsampled(int w, int h) {
    Var x("x"), y("y");
    Func pre("pre"), acc("acc");
    RDom r(0, 3, "r");
    pre(x, y) = in(x, y) / 2 + in(x, y + 1) / 2;
    acc(x, y) = cast<uint16_t>(0);
    acc(x, y) += cast<uint16_t>(pre(2 * x + r, y));
    out(x, y) = cast<uint8_t>((acc(x, y) + acc(x + 1, y)) / 6);
    in.set_estimates({{0, 2 * w + 4}, {0, h + 1}});
    out.set_estimates({{0, w}, {0, h}});
  }
};

// Vector loads at stride 2 to 4 whose index is a constant not a multiple of the stride, from an
// allocation of the pipeline, where the dense load they become starts off the native vector
// (32 bytes): Halide 14 marks that dense load aligned (tests/halide_findings), so it may fault.
// Predicated loads (`... if t`, a guarded tail's) are left out: Halide 14 scalarizes a strided
// load under a per-lane predicate, one aligned scalar load per lane.
int misaligned_strided_loads(const std::string &lowered) {
  std::map<std::string, int> bits;
  const std::regex alloc("allocate ([A-Za-z0-9_.$]+)\\[[a-z]+([0-9]+) \\*");
  for (std::sregex_iterator i(lowered.begin(), lowered.end(), alloc), e; i != e; ++i)
    bits[(*i)[1]] = std::stoi((*i)[2]);
  const std::regex load("([A-Za-z0-9_.$]+)\\[ramp\\((-?[0-9]+), ([234]), [0-9]+\\)( "
                        "aligned\\([0-9, ]+\\))?\\]( if)?");
  int found = 0;
  for (std::sregex_iterator i(lowered.begin(), lowered.end(), load), e; i != e; ++i) {
    if ((*i)[5].matched)
      continue;
    auto b = bits.find((*i)[1]);
    const long base = std::stol((*i)[2]), stride = std::stol((*i)[3]);
    const long offset = ((base % stride) + stride) % stride;
    found += b != bits.end() && offset != 0 && (base - offset) % (256 / b->second) != 0;
  }
  return found;
}

// An output that hosts a reduction per tile and leaves x whole would take a constant split of x
// (fixed_dims), but with pre also per tile that turns the downsample's shifted-in last vector
// into a load at a constant index. Whatever the random model, the lowered statement must hold no
// strided load Halide 14 would mark aligned off its alignment, and the schedule must compute
// what the plain schedule computes at the estimate (1000 is a multiple of no tile) and at 1024.
TEST_F(HkfacPlugin, DownsamplesInsideConstantRegionsLeaveNoMisalignedStridedLoad) {
  const std::string stmt = ::testing::TempDir() + "/hkfac_downsampled.stmt";
  ScopedEnv b("HL_BEAM_SIZE", "2");
  ScopedEnv kinds("HKFAC_PLACEMENTS", "tile");
  const int h = 9;
  int hosted = 0;
  for (int seed = 1; seed <= 24; ++seed) {
    const std::string s = std::to_string(seed);
    ScopedEnv rw("HL_RANDOMIZE_WEIGHTS", s.c_str());
    Downsampled p(1024, h);
    Pipeline pipe(p.out);
    const std::string src = pipe.auto_schedule("Hkfac", kTarget, machine()).schedule_source;
    SCOPED_TRACE(src);
    hosted += src.find("pre.compute_at(") != std::string::npos &&
              src.find("acc.compute_at(") != std::string::npos;
    EXPECT_EQ(misaligned_strided_loads(lowered_statement(pipe, p.in, stmt)), 0) << "seed " << seed;
    for (int w : {1000, 1024}) {
      Buffer<uint8_t> input(2 * w + 4, h + 1);
      input.for_each_element(
          [&](int x, int y) { input(x, y) = static_cast<uint8_t>(x * 7 + y * 3); });
      p.in.set(input);
      Downsampled plain(w, h);
      plain.in.set(input);
      const Buffer<uint8_t> want = plain.out.realize({w, h}, kTarget);
      const Buffer<uint8_t> got = pipe.realize({w, h}, kTarget);
      int wrong = 0;
      want.for_each_element([&](int x, int y) { wrong += got(x, y) != want(x, y); });
      EXPECT_EQ(wrong, 0) << "seed " << seed << ", width " << w;
    }
  }
  EXPECT_GE(hosted, 3) << "random models computed pre and acc per tile " << hosted << " times";
}

// A downsample read over a fixed range by a product: out(x, y) = Σ_k down(k, y) · in(x + k, y)
// for k in [0, K). down's region is K columns whatever the output's size, a constant that no
// tile makes (random seed 1811 of the third generation crashed this way, its downsample read by
// a matrix product): a shifted-in last vector, or a loop of one vector, reads pre at a constant
// odd index.
struct ProductOfDownsample {
  ImageParam in{UInt(8), 2, "in"};
  Func pre{"pre"}, down{"down"}, out{"out"};
  ProductOfDownsample(int K, int w, int h) {
    Var x("x"), y("y");
    RDom k(0, K, "k");
    // An update, so that pre is always stored and down's reads are loads from an allocation.
    pre(x, y) = in(x, y) / 2;
    pre(x, y) += in(x + 1, y) / 2;
    down(x, y) = cast<uint16_t>(pre(2 * x, y)) + cast<uint16_t>(pre(2 * x + 3, y));
    out(x, y) = cast<uint16_t>(0);
    out(x, y) += down(k, y) * cast<uint16_t>(in(x + k, y) & 3);
    in.set_estimates({{0, std::max(2 * K + 4, w + K)}, {0, h}});
    out.set_estimates({{0, w}, {0, h}});
  }
};

// Whatever the random model, the lowered statement holds no strided load Halide 14 would mark
// aligned off its alignment, over two vectors and a half (K = 40) and one and a quarter (20), and
// the schedule computes what the plain schedule computes.
TEST_F(HkfacPlugin, DownsamplesOverConstantRegionsGuardTheirVectorsAndComputeThePlainResult) {
  const std::string stmt = ::testing::TempDir() + "/hkfac_product_of_downsample.stmt";
  ScopedEnv b("HL_BEAM_SIZE", "2");
  const int w = 300, h = 6;
  int vectorized = 0;
  for (int K : {40, 20}) {
    for (int seed = 1; seed <= 12; ++seed) {
      const std::string s = std::to_string(seed);
      ScopedEnv rw("HL_RANDOMIZE_WEIGHTS", s.c_str());
      ProductOfDownsample p(K, w, h);
      Pipeline pipe(p.out);
      const std::string src = pipe.auto_schedule("Hkfac", kTarget, machine()).schedule_source;
      SCOPED_TRACE(src);
      vectorized += src.find("down.vectorize(") != std::string::npos;
      const int hazards = misaligned_strided_loads(lowered_statement(pipe, p.in, stmt));
      EXPECT_EQ(hazards, 0) << "K " << K << ", seed " << seed;
      if (hazards)
        continue; // running it may fault
      Buffer<uint8_t> input(std::max(2 * K + 4, w + K), h);
      input.for_each_element(
          [&](int x, int y) { input(x, y) = static_cast<uint8_t>(x * 7 + y * 3); });
      p.in.set(input);
      ProductOfDownsample plain(K, w, h);
      plain.in.set(input);
      const Buffer<uint16_t> want = plain.out.realize({w, h}, kTarget);
      const Buffer<uint16_t> got = pipe.realize({w, h}, kTarget);
      int wrong = 0;
      want.for_each_element([&](int x, int y) { wrong += got(x, y) != want(x, y); });
      EXPECT_EQ(wrong, 0) << "K " << K << ", seed " << seed;
    }
  }
  EXPECT_GE(vectorized, 3) << "random models vectorized down " << vectorized << " times";
}

// A 1x1 convolution (33 channels by 16 inputs per column) read at two channels, one column
// apart: computed per tile of its consumer, its region is 33 channels by the tile's columns plus
// one, a constant where the tile is shifted in (ShiftInwards), and no register tile of rows and
// vectors divides it along either dimension.
struct ChannelPair {
  ImageParam in{Float(32), 2, "in"};
  Func out{"out"};
  explicit ChannelPair(int w) {
    Var c("c"), x("x");
    Func weight("weight"), mix("mix");
    RDom r(0, 16, "r");
    weight(c, x) = Halide::sin(0.3f * cast<float>(c) + 0.7f * cast<float>(x));
    mix(c, x) = 0.0f;
    mix(c, x) += weight(c, r) * in(r, x);
    out(x) = mix(0, x) + mix(32, x + 1);
    in.set_estimates({{0, 16}, {0, w + 1}});
    out.set_estimates({{0, w}});
  }
};

// Halide 14 miscompiles an update blocked by both rows and vectors side by side (unrolled,
// GuardWithIf) over a constant region that leaves a tail along both dimensions: ChannelPair's
// mix per tile of 8 columns, in 4 x 2 register tiles, overruns its stack allocation and crashes.
// So a register tile must divide one of the two dimensions. Whatever the random model, the
// schedule must compute what the plain schedule computes, and some must block mix per tile.
TEST_F(HkfacPlugin, RegisterTilesOverConstantRegionsComputeWhatThePlainScheduleComputes) {
  const int w = 256;
  const std::regex per_tile("\\n *mix\\.compute_at\\(");
  const std::regex blocked("\\n *mix\\.update\\(0\\)\\.unroll\\(");
  ScopedEnv b("HL_BEAM_SIZE", "2");
  ScopedEnv kinds("HKFAC_PLACEMENTS", "tile");
  Buffer<float> input(16, w + 1);
  input.for_each_element([&](int c, int x) { input(c, x) = std::cos(0.2f * x + c); });
  ChannelPair plain(w);
  plain.in.set(input);
  const Buffer<float> want = plain.out.realize({w}, kTarget);
  int checked = 0;
  for (int seed = 1; seed <= 40; ++seed) {
    const std::string s = std::to_string(seed);
    ScopedEnv rw("HL_RANDOMIZE_WEIGHTS", s.c_str());
    ChannelPair p(w);
    Pipeline pipe(p.out);
    const std::string src = pipe.auto_schedule("Hkfac", kTarget, machine()).schedule_source;
    SCOPED_TRACE(src);
    p.in.set(input);
    Buffer<float> got = pipe.realize({w}, kTarget);
    for (int x = 0; x < w; ++x)
      ASSERT_NEAR(got(x), want(x), 1e-4f) << "seed " << seed << ", column " << x;
    checked += std::regex_search(src, per_tile) && std::regex_search(src, blocked);
  }
  EXPECT_GE(checked, 5) << "random models of 40 blocked mix per tile " << checked << " times";
}

// Three reductions whose updates the search may reorder (the RVars outside a tile's pure
// loops) or split (the outermost RVar's outer half outside them): a matrix product, a scan down
// columns (each row reads the one before) and a convolution over a 3-D RDom. Sizes no tile,
// vector or split divides; every such schedule a random model picks must compute what plain
// loops compute, and random models of 12 must pick each kind at least once per reduction.
struct Reduction {
  std::string name;
  std::function<Func(ImageParam &, ImageParam &)> define; // the output, estimates set
  std::vector<int> a_size, b_size, out_size;
  std::function<float(const Buffer<float> &, const Buffer<float> &, const std::vector<int> &)> want;
};

Buffer<float> filled(const std::vector<int> &size, float phase) {
  Buffer<float> b(size);
  b.for_each_element([&](const int *pos) {
    float v = phase;
    for (int d = 0; d < b.dimensions(); ++d)
      v += (0.37f + 0.11f * d) * pos[d];
    b(pos) = std::sin(v);
  });
  return b;
}

TEST_F(HkfacPlugin, ReorderedAndSplitReductionsComputeWhatPlainLoopsCompute) {
  const int n = 45, m = 70, k = 157, w = 61, h = 83, cw = 37, ch = 29, co = 6, ci = 40;
  std::vector<Reduction> cases;
  cases.push_back({"product",
                   [&](ImageParam &a, ImageParam &b) { return matrix_product(a, b, n, m, k); },
                   {k, n},
                   {m, k},
                   {m, n},
                   [&](const Buffer<float> &a, const Buffer<float> &b, const std::vector<int> &p) {
                     float sum = 0;
                     for (int t = 0; t < k; ++t)
                       sum += a(t, p[1]) * b(p[0], t);
                     return sum;
                   }});
  cases.push_back({"scan",
                   [&](ImageParam &a, ImageParam &) {
                     Func scan("scan");
                     Var x("x"), y("y");
                     RDom r(1, h - 1, "r");
                     scan(x, y) = a(x, y);
                     scan(x, r) = scan(x, r) + 0.5f * scan(x, r - 1);
                     scan.set_estimates({{0, w}, {0, h}});
                     return scan;
                   },
                   {w, h},
                   {1},
                   {w, h},
                   [&](const Buffer<float> &a, const Buffer<float> &, const std::vector<int> &p) {
                     float v = a(p[0], 0);
                     for (int t = 1; t <= p[1]; ++t)
                       v = a(p[0], t) + 0.5f * v;
                     return v;
                   }});
  cases.push_back({"conv",
                   [&](ImageParam &a, ImageParam &b) {
                     Func conv("conv");
                     Var x("x"), y("y"), c("c");
                     RDom r(0, 3, 0, 3, 0, ci, "r");
                     conv(x, y, c) = 0.0f;
                     conv(x, y, c) += b(r.x, r.y, r.z, c) * a(x + r.x, y + r.y, r.z);
                     conv.set_estimates({{0, cw}, {0, ch}, {0, co}});
                     return conv;
                   },
                   {cw + 2, ch + 2, ci},
                   {3, 3, ci, co},
                   {cw, ch, co},
                   [&](const Buffer<float> &a, const Buffer<float> &b, const std::vector<int> &p) {
                     float sum = 0;
                     for (int z = 0; z < ci; ++z)
                       for (int j = 0; j < 3; ++j)
                         for (int i = 0; i < 3; ++i)
                           sum += b(i, j, z, p[2]) * a(p[0] + i, p[1] + j, z);
                     return sum;
                   }});
  // Under kRVarsOuter a pure loop follows the lanes (and blocked vectors and rows) in the
  // update's reorder; under kRVarSplit the update splits an RVar.
  const std::regex reordered("\\.update\\(0\\)\\.reorder\\(x_v, (x_u, )?(y_r, )?x(_i)?[,)]");
  const std::regex split("\\.update\\(0\\)\\.split\\(r_[xyz], r_[xyz]_o, ");
  for (const Reduction &rc : cases) {
    SCOPED_TRACE(rc.name);
    const Buffer<float> a = filled(rc.a_size, 0.2f), b = filled(rc.b_size, 1.3f);
    int reorders = 0, splits = 0;
    for (int seed = 1; seed <= 24 && (reorders < 1 || splits < 1); ++seed) {
      const std::string s = std::to_string(seed);
      ScopedEnv rw("HL_RANDOMIZE_WEIGHTS", s.c_str());
      ScopedEnv kinds("HKFAC_PLACEMENTS", seed % 2 ? "root,reorder" : "root,rsplit");
      ImageParam pa(Float(32), static_cast<int>(rc.a_size.size()), "a");
      ImageParam pb(Float(32), static_cast<int>(rc.b_size.size()), "b");
      Region ra, rb;
      for (int e : rc.a_size)
        ra.push_back(Range(0, e));
      for (int e : rc.b_size)
        rb.push_back(Range(0, e));
      pa.set_estimates(ra);
      pb.set_estimates(rb);
      Func out = rc.define(pa, pb);
      Pipeline pipe(out);
      AutoSchedulerResults res = pipe.auto_schedule("Hkfac", kTarget, machine());
      const bool is_reordered = std::regex_search(res.schedule_source, reordered);
      const bool is_split = std::regex_search(res.schedule_source, split);
      if (!is_reordered && !is_split)
        continue;
      reorders += is_reordered;
      splits += is_split;
      pa.set(a);
      pb.set(b);
      Buffer<float> got = pipe.realize(rc.out_size, kTarget);
      SCOPED_TRACE(res.schedule_source);
      bool ok = true;
      got.for_each_element([&](const int *pos) {
        if (!ok)
          return;
        const std::vector<int> p(pos, pos + got.dimensions());
        const float want = rc.want(a, b, p);
        if (std::fabs(got(pos) - want) > 1e-4f * (1 + std::fabs(want))) {
          ok = false;
          ADD_FAILURE() << "at " << p[0] << "," << p[1] << ": " << got(pos) << " != " << want;
        }
      });
    }
    EXPECT_GE(reorders, 1) << "no random model of 24 reordered the update";
    EXPECT_GE(splits, 1) << "no random model of 24 split the update's RVar";
  }
}

// A histogram per channel (a scatter: its bin is data) under the update orders: tiling its
// channel loop by a split that does not divide the 3 channels (GuardWithIf) made Halide 14's
// constant folding overflow in lowering, so a scatter's update splits only by tiles that divide.
// Every schedule must lower and count what a plain loop counts.
TEST_F(HkfacPlugin, ScatterUpdatesSplitOnlyByDividingTilesAndCountWhatAPlainLoopCounts) {
  const int w = 53, h = 41, channels = 3, bins = 16;
  Buffer<float> in(w, h, channels);
  in.for_each_element([&](int x, int y, int c) {
    in(x, y, c) = 0.5f + 0.5f * std::sin(0.3f * x + 0.7f * y + 1.1f * c);
  });
  const std::regex channel_split(R"(hist\.update\(0\)\.split\(c, c_o, c_i, (\d+),)");
  int reorders = 0;
  for (int seed = 1; seed <= 24 && reorders < 2; ++seed) {
    const std::string sd = std::to_string(seed);
    ScopedEnv rw("HL_RANDOMIZE_WEIGHTS", sd.c_str());
    ScopedEnv kinds("HKFAC_PLACEMENTS", "root,reorder");
    ImageParam pin(Float(32), 3, "in");
    Func hist("hist"), out("out");
    Var b("b"), c("c");
    RDom r(0, w, 0, h, "r");
    hist(b, c) = 0;
    hist(clamp(cast<int>(pin(r.x, r.y, c) * bins), 0, bins - 1), c) += 1;
    pin.set_estimates({{0, w}, {0, h}, {0, channels}});
    out(b, c) = hist(b, c) * 2;
    out.set_estimates({{0, bins}, {0, channels}});
    Pipeline pipe(out);
    AutoSchedulerResults res = pipe.auto_schedule("Hkfac", kTarget, machine());
    SCOPED_TRACE(res.schedule_source);
    const std::string &src = res.schedule_source;
    reorders += src.find("hist.update(0).reorder(") != std::string::npos;
    for (std::sregex_iterator it(src.begin(), src.end(), channel_split), end; it != end; ++it)
      EXPECT_EQ(channels % std::stoi((*it)[1].str()), 0) << (*it)[0];
    pin.set(in);
    Buffer<int> got = pipe.realize({bins, channels}, kTarget);
    for (int ch = 0; ch < channels; ++ch) {
      std::vector<int> want(bins, 0);
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x)
          want[std::min(std::max(static_cast<int>(in(x, y, ch) * bins), 0), bins - 1)]++;
      for (int i = 0; i < bins; ++i)
        ASSERT_EQ(got(i, ch), 2 * want[i]) << "bin " << i << " channel " << ch;
    }
  }
  EXPECT_GE(reorders, 1) << "no random model of 24 reordered the histogram's update";
}

TEST_F(HkfacPlugin, SameSeedGivesSameSchedule) {
  ScopedEnv b("HL_BEAM_SIZE", "4");
  ScopedEnv d("HL_RANDOM_DROPOUT", "50");
  ScopedEnv s("HL_SEED", "12");
  // Each new pipeline's boundary condition is a new Func, which Halide names lambda_<n> with a
  // process-wide counter; the schedules are compared with that number taken out.
  const std::regex generated_name("lambda_[0-9]+");
  std::string first;
  for (int i = 0; i < 3; ++i) {
    SmallPipeline p(256, 128);
    AutoSchedulerResults r = Pipeline(p.out).auto_schedule("Hkfac", kTarget, machine());
    const std::string source = std::regex_replace(r.schedule_source, generated_name, "lambda");
    if (i == 0)
      first = source;
    EXPECT_EQ(source, first);
  }
}

// The best schedule's predicted cost, as HKFAC_TOPK=1 writes it into `dir`.
double predicted_best_cost(const std::string &dir) {
  std::ifstream table(dir + "/hkfac_topk.txt");
  std::string header;
  std::getline(table, header);
  int rank = -1;
  double cost = NAN;
  table >> rank >> cost;
  return rank == 0 ? cost : NAN;
}

// HKFAC_ROLLOUT=1 refines the beam search's best schedule by scoring candidates as it completes
// them, so under the same model its pick is never predicted slower than the plain search's, and
// it must compute what the plain schedule computes. Over random models of a stencil chain and
// the small pipeline, it must also find a cheaper schedule somewhere, or it did nothing.
TEST_F(HkfacPlugin, RolloutSearchNeverPredictsWorseThanBeamSearchAndComputesThePlainResult) {
  const std::string dir = ::testing::TempDir();
  ScopedEnv b("HL_BEAM_SIZE", "2");
  ScopedEnv k("HKFAC_TOPK", "1");
  ScopedEnv d("HKFAC_TOPK_DIR", dir.c_str());
  const int w = 389, h = 211;
  Buffer<float> input(w, h);
  for (int j = 0; j < h; ++j)
    for (int i = 0; i < w; ++i)
      input(i, j) = std::sin(0.1f * i + 0.37f * j);
  StencilChain plain(w, h, 4);
  plain.in.set(input);
  const Buffer<float> want_chain = plain.out.realize({w, h}, kTarget);
  const Buffer<float> want_small = run_root_reference(w, h);
  int cheaper = 0;
  for (int seed = 1; seed <= 6; ++seed) {
    const std::string s = std::to_string(seed);
    ScopedEnv rw("HL_RANDOMIZE_WEIGHTS", s.c_str());
    for (bool chain : {true, false}) {
      double cost[2];
      for (int rollout = 0; rollout < 2; ++rollout) {
        ScopedEnv r("HKFAC_ROLLOUT", rollout ? "1" : "0");
        StencilChain c(w, h, 4);
        SmallPipeline sp(w, h);
        Pipeline pipe(chain ? c.out : sp.out);
        const std::string src = pipe.auto_schedule("Hkfac", kTarget, machine()).schedule_source;
        cost[rollout] = predicted_best_cost(dir);
        ASSERT_TRUE(std::isfinite(cost[rollout])) << "seed " << seed;
        if (rollout) {
          (chain ? c.in : sp.in).set(input);
          SCOPED_TRACE("seed " + s + (chain ? ", stencil chain\n" : ", small pipeline\n") + src);
          expect_equal(pipe.realize({w, h}, kTarget), chain ? want_chain : want_small);
        }
      }
      EXPECT_LE(cost[1], cost[0]) << "seed " << seed << (chain ? ", stencil chain" : ", small");
      cheaper += cost[1] < cost[0];
    }
  }
  EXPECT_GT(cheaper, 0) << "no random model's rollout search found a cheaper schedule";
}

// HL_RANDOM_DROPOUT as Adams2019 means it: a greedy search under a low value takes other than
// the best-ranked decision now and then, so seeds give different schedules; at 100 it never
// drops one, and every seed gives the greedy schedule.
TEST_F(HkfacPlugin, DropoutVariesGreedySchedules) {
  const std::regex generated_name("lambda_[0-9]+");
  for (const char *dropout : {"100", "1"}) {
    ScopedEnv d("HL_RANDOM_DROPOUT", dropout);
    std::set<std::string> schedules;
    for (int seed = 1; seed <= 8; ++seed) {
      const std::string s = std::to_string(seed);
      ScopedEnv sd("HL_SEED", s.c_str());
      StencilChain p(389, 211);
      AutoSchedulerResults r = Pipeline(p.out).auto_schedule("Hkfac", kTarget, machine());
      schedules.insert(std::regex_replace(r.schedule_source, generated_name, "lambda"));
    }
    if (std::string(dropout) == "100")
      EXPECT_EQ(schedules.size(), 1u);
    else
      EXPECT_GE(schedules.size(), 4u) << "8 seeds at dropout 1 gave " << schedules.size();
  }
}

std::string error_of(const std::function<void()> &f) {
  try {
    f();
  } catch (const CompileError &e) {
    return e.what();
  }
  return "";
}

TEST_F(HkfacPlugin, MissingOutputEstimateNamesFuncAndDimension) {
  SmallPipeline p(64, 64, /*estimates=*/false);
  p.out.set_estimate(p.x, 0, 64);
  const std::string msg =
      error_of([&] { Pipeline(p.out).auto_schedule("Hkfac", kTarget, machine()); });
  EXPECT_NE(msg.find("\"out\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("dimension 1"), std::string::npos) << msg;
}

TEST_F(HkfacPlugin, MissingInputEstimateNamesInput) {
  ImageParam in(Float(32), 1, "lonely");
  Func f("f");
  Var x("x");
  RDom r(0, in.width());
  f(x) = 0.0f;
  f(x) += in(r)*x;
  f.set_estimate(x, 0, 16);
  const std::string msg = error_of([&] { Pipeline(f).auto_schedule("Hkfac", kTarget, machine()); });
  EXPECT_NE(msg.find("\"lonely\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("extent of dimension 0"), std::string::npos) << msg;
}

TEST_F(HkfacPlugin, BadWeightsFailWithTheReadersError) {
  const std::string path = ::testing::TempDir() + "hkfac_bad.weights";
  {
    std::ofstream f(path, std::ios::binary);
    f << "not weights at all";
  }
  ScopedEnv w("HL_WEIGHTS_DIR", path.c_str());
  SmallPipeline p(64, 64);
  const std::string msg =
      error_of([&] { Pipeline(p.out).auto_schedule("Hkfac", kTarget, machine()); });
  EXPECT_NE(msg.find("HL_WEIGHTS_DIR"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  // A file that is not weights at all is no version mismatch: no advice to allow one.
  EXPECT_EQ(msg.find("HKFAC_ALLOW_VERSION_MISMATCH"), std::string::npos) << msg;
  ScopedEnv missing("HL_WEIGHTS_DIR", (::testing::TempDir() + "hkfac_no_such.weights").c_str());
  SmallPipeline q(64, 64);
  const std::string gone =
      error_of([&] { Pipeline(q.out).auto_schedule("Hkfac", kTarget, machine()); });
  EXPECT_NE(gone.find("hkfac_no_such.weights"), std::string::npos) << gone;
  EXPECT_EQ(gone.find("HKFAC_ALLOW_VERSION_MISMATCH"), std::string::npos) << gone;
}

TEST_F(HkfacPlugin, AdamsFeatureWeightsAreRefusedUnlessAllowed) {
  // Halide's own files carry feature versions 3/3: another featurization than ours.
  ScopedEnv w("HL_WEIGHTS_DIR", HKFAC_ADAMS2019_WEIGHTS);
  SmallPipeline p(64, 64);
  const std::string msg =
      error_of([&] { Pipeline(p.out).auto_schedule("Hkfac", kTarget, machine()); });
  EXPECT_NE(msg.find("version"), std::string::npos) << msg;
  EXPECT_NE(msg.find("HKFAC_ALLOW_VERSION_MISMATCH"), std::string::npos) << msg;
  ScopedEnv allow("HKFAC_ALLOW_VERSION_MISMATCH", "1");
  SmallPipeline q(64, 64);
  EXPECT_EQ(error_of([&] { Pipeline(q.out).auto_schedule("Hkfac", kTarget, machine()); }), "");
}

TEST_F(HkfacPlugin, BadParameterValuesNameTheVariable) {
  for (auto [name, value] :
       std::vector<std::pair<const char *, const char *>>{{"HL_BEAM_SIZE", "0"},
                                                          {"HL_BEAM_SIZE", "abc"},
                                                          {"HL_RANDOM_DROPOUT", "101"},
                                                          {"HKFAC_TIME_LIMIT_S", "-1"},
                                                          {"HL_SEED", "1x"},
                                                          {"HKFAC_PLACEMENTS", "root,slid"},
                                                          {"HKFAC_PLACEMENTS", "tile,,nest"},
                                                          {"HKFAC_PLACEMENTS", ""},
                                                          {"HKFAC_TUNE_SECONDS", "-2"},
                                                          {"HKFAC_TUNE_CANDIDATES", "0"},
                                                          {"HKFAC_ITERATION_BYTES", "x"}}) {
    ScopedEnv e(name, value);
    SmallPipeline p(64, 64);
    const std::string msg =
        error_of([&] { Pipeline(p.out).auto_schedule("Hkfac", kTarget, machine()); });
    EXPECT_NE(msg.find(name), std::string::npos) << name << "=" << value << ": " << msg;
  }
  SmallPipeline p(64, 64);
  const std::string msg = error_of(
      [&] { Pipeline(p.out).auto_schedule("Hkfac", kTarget, MachineParams(0, 1 << 20, 40)); });
  EXPECT_NE(msg.find("parallelism"), std::string::npos) << msg;
}

TEST_F(HkfacPlugin, InternalFailuresFallBackToAValidSchedule) {
  for (const char *where : {"analysis", "search", "apply"}) {
    ScopedEnv f("HKFAC_INJECT_FAILURE", where);
    SmallPipeline p(97, 53);
    Pipeline pipe(p.out);
    ::testing::internal::CaptureStderr();
    AutoSchedulerResults r = pipe.auto_schedule("Hkfac", kTarget, machine());
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("fallback"), std::string::npos) << where << ": " << err;
    EXPECT_NE(err.find(where), std::string::npos) << err;
    EXPECT_NE(r.schedule_source.find("compute_root"), std::string::npos);
    p.in.set(p.input(97, 53));
    expect_equal(pipe.realize({97, 53}, kTarget), run_root_reference(97, 53));
  }
}

// A fresh directory for a test's tuning cache.
std::string fresh_dir(const std::string &name) {
  const std::string dir = "/tmp/hkfac_plugin_test_" + name + "_" + std::to_string(getpid());
  std::system(("rm -rf '" + dir + "'").c_str());
  return dir;
}

// One value of the cache's database, read with the sqlite3 shell (independent of the plugin's
// own reader); "" when there is none.
std::string cache_query(const std::string &dir, const std::string &sql) {
  const std::string cmd = "sqlite3 '" + dir + "/hkfac-cache.sqlite' \"" + sql + "\" 2>&1";
  std::string out;
  if (FILE *f = popen(cmd.c_str(), "r")) {
    char buf[256];
    while (fgets(buf, sizeof(buf), f))
      out += buf;
    pclose(f);
  }
  while (!out.empty() && out.back() == '\n')
    out.pop_back();
  return out;
}

TEST_F(HkfacPlugin, ModelOnlyWithAnEmptyCacheGivesTheSameScheduleForTheSameSeed) {
  ScopedEnv beam("HL_BEAM_SIZE", "4");
  ScopedEnv seed("HL_SEED", "5");
  const std::string dir = fresh_dir("model_only");
  ScopedEnv cache("HKFAC_CACHE_DIR", dir.c_str());
  std::string first;
  for (int run = 0; run < 2; ++run) {
    SmallPipeline p(97, 53);
    AutoSchedulerResults r = Pipeline(p.out).auto_schedule("Hkfac", kTarget, machine());
    if (run == 0)
      first = r.schedule_source;
    else
      EXPECT_EQ(r.schedule_source, first);
  }
  // The model alone times nothing, so it records nothing.
  EXPECT_EQ(cache_query(dir, "SELECT count(*) FROM pipelines"), "0");
}

// On the host, measured selection is the default: the first run times candidates and keeps the
// fastest; a rerun applies it without searching; any change to the pipeline searches again.
TEST_F(HkfacPlugin, MeasuredScheduleIsReusedAndNotAppliedToAChangedPipeline) {
  const std::string dir = fresh_dir("reuse");
  ScopedEnv cache("HKFAC_CACHE_DIR", dir.c_str());
  // A budget that a loaded host (other tests beside it) still compiles three candidates in.
  ScopedEnv tune("HKFAC_TUNE_SECONDS", "30");
  ScopedEnv beam("HL_BEAM_SIZE", "2");
  const Target host = get_host_target().without_feature(Target::AVX512_SapphireRapids);
  auto schedule = [&](int w, int h, std::string *err) {
    SmallPipeline p(w, h);
    Pipeline pipe(p.out);
    ::testing::internal::CaptureStderr();
    AutoSchedulerResults r = pipe.auto_schedule("Hkfac", host, machine());
    *err = ::testing::internal::GetCapturedStderr();
    p.in.set(p.input(w, h));
    expect_equal(pipe.realize({w, h}, host), run_root_reference(w, h));
    // Halide numbers unnamed Funcs per process (lambda_0, then lambda_2 for the next copy).
    return std::regex_replace(r.schedule_source, std::regex("lambda_[0-9]+"), "lambda");
  };
  std::string err;
  const std::string first = schedule(397, 253, &err);
  EXPECT_NE(err.find("candidates"), std::string::npos) << err;
  ASSERT_EQ(cache_query(dir, "SELECT count(*) FROM pipelines"), "1") << err;
  const std::string samples = cache_query(dir, "SELECT count(*) FROM samples");
  const std::string again = schedule(397, 253, &err);
  EXPECT_EQ(again, first);
  EXPECT_NE(err.find("applied the schedule measured fastest on this machine"), std::string::npos)
      << err;
  EXPECT_EQ(err.find("candidates"), std::string::npos) << err; // nothing timed
  EXPECT_EQ(cache_query(dir, "SELECT count(*) FROM samples"), samples);
  // Another size is another pipeline to the cache: searched and measured, a second row.
  schedule(401, 253, &err);
  EXPECT_EQ(err.find("measured fastest on this machine"), std::string::npos) << err;
  EXPECT_EQ(cache_query(dir, "SELECT count(*) FROM pipelines"), "2");
  std::system(("rm -rf '" + dir + "'").c_str());
}

TEST_F(HkfacPlugin, MeasuredSelectionSurvivesACandidateThatCrashes) {
  ScopedEnv tune("HKFAC_TUNE_SECONDS", "30");
  ScopedEnv beam("HL_BEAM_SIZE", "2");
  ScopedEnv f("HKFAC_INJECT_FAILURE", "candidate-crash");
  const Target host = get_host_target().without_feature(Target::AVX512_SapphireRapids);
  SmallPipeline p(397, 253);
  Pipeline pipe(p.out);
  ::testing::internal::CaptureStderr();
  AutoSchedulerResults r = pipe.auto_schedule("Hkfac", host, machine());
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("failed"), std::string::npos) << err;
  EXPECT_EQ(err.find("fallback"), std::string::npos) << err;
  EXPECT_NE(err.find("applied the"), std::string::npos) << err; // another candidate
  p.in.set(p.input(397, 253));
  expect_equal(pipe.realize({397, 253}, host), run_root_reference(397, 253));
}

TEST_F(HkfacPlugin, MeasuredSelectionIsOffForACrossTargetAndSaysSo) {
  ScopedEnv tune("HKFAC_TUNE_SECONDS", nullptr);
  SmallPipeline p(97, 53);
  ::testing::internal::CaptureStderr();
  Pipeline(p.out).auto_schedule("Hkfac", Target("arm-64-linux"), machine());
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("measured selection is off for a cross target"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

// A lookup table read at an index computed from scalar Funcs of the parameters (per-channel gains
// and their maximum): its region is known only through those Funcs' value bounds, which carry the
// parameters. Halide's three schedule it; Hkfac must too, with its estimates applied there, and
// compute what the plain schedule computes.
TEST_F(HkfacPlugin, LookupIndexedByFuncsOfParametersIsScheduled) {
  ImageParam in(Float(32), 3, "in");
  Param<float> gain_r("gain_r"), gain_g("gain_g"), gain_b("gain_b");
  Var x("x"), y("y"), c("c"), i("i");
  Func lut("lut"), gr("gr"), gg("gg"), gb("gb"), out("out");
  lut(i) = pow(cast<float>(i) / 1023.0f, 0.45f);
  gr() = gain_r * 1.0f;
  gg() = gain_g * 1.2f;
  gb() = gain_b * 1.5f;
  Expr index = clamp(cast<int>(max(max(gb(), gg()), gr()) * 255.0f), 0, 1023);
  out(x, y, c) = in(x, y, c) * lut(index);
  in.set_estimates({{0, 160}, {0, 90}, {0, 3}});
  for (Param<float> *g : {&gain_r, &gain_g, &gain_b})
    g->set_estimate(1.0f);
  out.set_estimates({{0, 160}, {0, 90}, {0, 3}});
  Buffer<float> input(160, 90, 3);
  input.for_each_element(
      [&](int a, int b, int k) { input(a, b, k) = ((a * 7 + b * 3 + k) % 97) / 97.0f; });
  in.set(input);
  gain_r.set(0.9f);
  gain_g.set(1.1f);
  gain_b.set(1.3f);
  Buffer<float> reference = out.realize({160, 90, 3}, kTarget);
  ScopedEnv beam("HL_BEAM_SIZE", "4");
  ::testing::internal::CaptureStderr();
  Pipeline pipe(out);
  pipe.auto_schedule("Hkfac", kTarget, machine());
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find("fallback"), std::string::npos) << err;
  EXPECT_EQ(err.find("not a constant"), std::string::npos) << err;
  Buffer<float> got = pipe.realize({160, 90, 3}, kTarget);
  got.for_each_element([&](int a, int b, int k) {
    ASSERT_NEAR(got(a, b, k), reference(a, b, k), 1e-5f) << a << "," << b << "," << k;
  });
}

// A lookup whose index is one point by the value bounds of what it reads (a clamp to a single
// value): Halide 14's flatten-nested-ramps divides by zero on such a gather once it is a vector
// load, so the Func that gathers must be computed, unvectorized, whatever the model prefers.
TEST_F(HkfacPlugin, GatherOfOnePointIsNeitherVectorizedNorInlined) {
  ImageParam in(Float(32), 2, "in");
  Var x("x"), y("y"), i("i");
  Func flat("flat"), lut("lut"), curve("curve"), out("out");
  flat(x, y) = clamp(in(x, y) + in(x + 1, y), 4.0f, 4.0f);
  lut(i) = cast<float>(i) * 0.5f;
  lut(i) += 1.0f;
  curve(x, y) = lut(clamp(cast<int>(clamp((flat(x, y) - 2.0f) * 512.0f, 0.0f, 1023.0f)), 0, 1023));
  out(x, y) = cast<uint8_t>(curve(x, y) * 0.25f + in(x, y));
  in.set_estimates({{0, 257}, {0, 128}});
  out.set_estimates({{0, 256}, {0, 128}});
  Buffer<float> input(257, 128);
  for (int j = 0; j < 128; ++j)
    for (int k = 0; k < 257; ++k)
      input(k, j) = static_cast<float>((k * 7 + j * 3) % 50);
  in.set(input);
  for (const char *placements : {"inline", "all"}) {
    ScopedEnv p("HKFAC_PLACEMENTS", placements);
    for (const char *seed : {"0", "3"}) {
      ScopedEnv w("HL_RANDOMIZE_WEIGHTS", seed[0] == '0' ? nullptr : seed);
      Pipeline pipe(out);
      const std::string src = pipe.auto_schedule("Hkfac", kTarget, machine()).schedule_source;
      EXPECT_TRUE(std::regex_search(src, std::regex("curve\\.compute_(root|at)"))) << src;
      EXPECT_FALSE(std::regex_search(src, std::regex("curve\\.[^\\n]*vectorize"))) << src;
      Buffer<uint8_t> got = pipe.realize({256, 128}, kTarget);
      for (int j = 0; j < 128; ++j)
        for (int k = 0; k < 256; ++k)
          ASSERT_EQ(got(k, j), static_cast<uint8_t>(512.5f * 0.25f + input(k, j))) << k << "," << j;
    }
  }
}

TEST_F(HkfacPlugin, TimeLimitStillGivesACompleteSchedule) {
  ScopedEnv b("HL_BEAM_SIZE", "64");
  ScopedEnv t("HKFAC_TIME_LIMIT_S", "0.000001");
  SmallPipeline p(97, 53);
  Pipeline pipe(p.out);
  AutoSchedulerResults r = pipe.auto_schedule("Hkfac", kTarget, machine());
  EXPECT_FALSE(r.featurization.empty());
  p.in.set(p.input(97, 53));
  expect_equal(pipe.realize({97, 53}, kTarget), run_root_reference(97, 53));
}

TEST_F(HkfacPlugin, TopKWritesRankedSchedules) {
  const std::string dir = ::testing::TempDir();
  ScopedEnv b("HL_BEAM_SIZE", "8");
  ScopedEnv k("HKFAC_TOPK", "3");
  ScopedEnv d("HKFAC_TOPK_DIR", dir.c_str());
  SmallPipeline p(128, 64);
  Pipeline(p.out).auto_schedule("Hkfac", kTarget, machine());
  std::ifstream table(dir + "/hkfac_topk.txt");
  ASSERT_TRUE(table.good());
  std::string line;
  std::getline(table, line); // header
  double previous = -1;
  int rows = 0;
  for (int rank; table >> rank;) {
    double cost;
    std::string file;
    table >> cost >> file;
    EXPECT_GE(cost, previous) << "ranked cheapest first";
    previous = cost;
    EXPECT_TRUE(std::ifstream(dir + "/" + file).good()) << file;
    ++rows;
  }
  EXPECT_EQ(rows, 3);
}

// Halide takes any string as a Func's name; the printed schedule must still compile where a
// Func is called like a C++ keyword, a Var, or a name of the apply function. Every Func at root,
// so that each is named in the source; the compiler is the judge.
TEST_F(HkfacPlugin, PrintedScheduleCompilesWhateverItsFuncsAreCalled) {
  ScopedEnv kinds("HKFAC_PLACEMENTS", "root");
  ImageParam in(Float(32), 2, "in");
  Var x("x"), y("y");
  Func twice("new"), pair("int"), product("x"), shifted("class"), out("pipeline");
  twice(x, y) = in(x, y) * 2;
  pair(x, y) = twice(x, y) + twice(x + 1, y);
  product(x, y) = pair(x, y) * pair(x, y + 1);
  shifted(x, y) = product(x, y) - product(x + 1, y + 1);
  out(x, y) = shifted(x, y) + 1;
  in.set_estimates({{0, 130}, {0, 66}});
  out.set_estimates({{0, 128}, {0, 64}});
  const std::string src = Pipeline(out).auto_schedule("Hkfac", kTarget, machine()).schedule_source;
  for (const char *name : {"new", "int", "class"})
    EXPECT_TRUE(std::regex_search(src, std::regex(std::string("Func ") + name + "_1 = "))) << src;
  const std::string path = ::testing::TempDir() + "/keyword_names.schedule.h";
  // Wrapped as Halide's generator wraps it (-e schedule).
  std::ofstream(path)
      << "#include \"Halide.h\"\n"
      << "inline void apply(::Halide::Pipeline pipeline, ::Halide::Target target) {\n"
      << "using ::Halide::Func; using ::Halide::MemoryType; using ::Halide::RVar;\n"
      << "using ::Halide::TailStrategy; using ::Halide::Var;\n"
      << src << "}\n";
  std::string includes;
  for (std::string dirs = HKFAC_HALIDE_INCLUDES; !dirs.empty();) {
    const size_t colon = dirs.find(':');
    includes += " -I'" + dirs.substr(0, colon) + "'";
    dirs = colon == std::string::npos ? "" : dirs.substr(colon + 1);
  }
  const std::string command = std::string("'") + HKFAC_CXX + "' -std=c++17 -fsyntax-only -x c++" +
                              includes + " '" + path + "'";
  EXPECT_EQ(std::system(command.c_str()), 0) << command << "\n" << src;
}

// A register tile whose loops cannot hold it is not applied, so that choice is the unblocked
// schedule again; the beam and the top k must not spend places on such copies. A product of
// computed operands (one Func, so every ranked schedule differs only in its choice), 6 rows:
// 8-row tiles never fit. Under random models, every ranked schedule's source differs.
TEST_F(HkfacPlugin, TopKSchedulesAreDistinct) {
  const std::string dir = ::testing::TempDir();
  ScopedEnv b("HL_BEAM_SIZE", "8");
  ScopedEnv k("HKFAC_TOPK", "8");
  ScopedEnv d("HKFAC_TOPK_DIR", dir.c_str());
  for (const char *seed : {"1", "2", "3", "4", "5", "6"}) {
    ScopedEnv w("HL_RANDOMIZE_WEIGHTS", seed);
    Func prod("prod");
    Var x("x"), y("y");
    RDom r(0, 64, "r");
    prod(x, y) = 0.0f;
    prod(x, y) += cast<float>(r + 2 * y) * cast<float>(x - r);
    prod.set_estimates({{0, 256}, {0, 6}});
    Pipeline(prod).auto_schedule("Hkfac", kTarget, machine());
    std::set<std::string> sources;
    int ranked = 0;
    for (; ranked < 8; ++ranked) {
      const std::string path = dir + "/hkfac_topk_" + std::to_string(ranked) + ".schedule.h";
      std::ifstream f(path);
      if (!f.good())
        break;
      std::string header, body((std::istreambuf_iterator<char>(std::getline(f, header))),
                               std::istreambuf_iterator<char>());
      EXPECT_TRUE(sources.insert(body).second)
          << "seed " << seed << ": schedule ranked " << ranked << " repeats one ranked above\n"
          << body;
      std::remove(path.c_str());
    }
    EXPECT_GT(ranked, 1) << "seed " << seed;
  }
}

// The cache size reaches the choice: one pipeline and one cost model at a time, two caches. Over
// the shipped weights and a few random models, some choice must change.
TEST_F(HkfacPlugin, CacheSizeChangesTheSchedule) {
  ScopedEnv b("HL_BEAM_SIZE", "4");
  int differ = 0;
  for (const char *seed : {"0", "1", "2", "3", "4"}) {
    ScopedEnv w("HL_RANDOMIZE_WEIGHTS", seed[0] == '0' ? nullptr : seed);
    SmallPipeline small(2048, 1024), large(2048, 1024);
    const std::string a =
        Pipeline(small.out).auto_schedule("Hkfac", kTarget, machine(256 * 1024)).schedule_source;
    const std::string c =
        Pipeline(large.out).auto_schedule("Hkfac", kTarget, machine(64 << 20)).schedule_source;
    differ += a != c;
  }
  EXPECT_GT(differ, 0);
}

// Features one can count on paper. g(x, y) = f(x, y) + f(x + 1, y), f(x, y) = in(x, y) * 2 + 1,
// g estimated at 64 x 32, so f is needed over 65 x 32.
TEST_F(HkfacPlugin, FeaturizationOfATinyPipelineIsCountable) {
  for (const char *seed : {"1", "2", "3", "4"}) {
    ImageParam in(Float(32), 2, "in");
    Func f("f"), g("g");
    Var x("x"), y("y");
    f(x, y) = in(x, y) * 2.0f + 1.0f;
    g(x, y) = f(x, y) + f(x + 1, y);
    in.set_estimates({{0, 65}, {0, 32}});
    g.set_estimates({{0, 64}, {0, 32}});
    ScopedEnv w("HL_RANDOMIZE_WEIGHTS", seed);
    Pipeline pipe(g);
    AutoSchedulerResults r = pipe.auto_schedule("Hkfac", kTarget, machine());
    const std::vector<float> v = floats(r.featurization);
    // Three stages in realization order: in_im (Halide's wrapper that every call of an
    // ImageParam goes through), f, g.
    ASSERT_EQ(v.size(), 3u * (kS + kAlgo));
    for (float e : v)
      ASSERT_TRUE(std::isfinite(e) && e >= 0);
    const float *ia = v.data() + kS;
    const float *fs = v.data() + kS + kAlgo, *fa = fs + kS, *gs = fa + kAlgo, *ga = gs + kS;
    enum { kConst = 0, kVariable = 2, kAdd = 4, kMul = 7, kImage = 19, kFunc = 20 };
    enum { kInt32 = 3, kFloat = 5 };
    // in_im: in(x, y), a pointwise load of the buffer and a pointwise store.
    EXPECT_EQ(op(ia, kImage, kFloat), 1);
    EXPECT_EQ(access(ia, 0, 2, kFloat), 1);
    EXPECT_EQ(access(ia, 0, 3, kFloat), 1);
    // f: in_im(x, y) * 2 + 1.
    EXPECT_EQ(op(fa, kFunc, kFloat), 1);
    EXPECT_EQ(op(fa, kImage, kFloat), 0);
    EXPECT_EQ(op(fa, kMul, kFloat), 1);
    EXPECT_EQ(op(fa, kAdd, kFloat), 1);
    EXPECT_EQ(op(fa, kConst, kFloat), 2);
    EXPECT_EQ(op(fa, kVariable, kInt32), 2 + 2); // in(x, y) and the store's f(x, y)
    EXPECT_EQ(access(fa, 0, 0, kFloat), 1);      // pointwise load of in_im
    EXPECT_EQ(access(fa, 0, 3, kFloat), 1);      // pointwise store
    EXPECT_EQ(fa[kFloat], 1);                    // types in use
    // g: two pointwise calls of f, one float add, one int add and its constant.
    EXPECT_EQ(op(ga, kFunc, kFloat), 2);
    EXPECT_EQ(op(ga, kAdd, kFloat), 1);
    EXPECT_EQ(op(ga, kAdd, kInt32), 1);
    EXPECT_EQ(op(ga, kConst, kInt32), 1);
    EXPECT_EQ(access(ga, 0, 0, kFloat), 2);
    // Schedule features of g, the output: computed once over 64 x 32 floats.
    EXPECT_EQ(gs[0], 1);            // realizations
    EXPECT_EQ(gs[5], 64 * 32);      // minimum points
    EXPECT_EQ(gs[4], 64 * 32);      // points computed (64 is a multiple of every split)
    EXPECT_EQ(gs[13], 64 * 32 * 4); // bytes at root
    EXPECT_EQ(gs[23], 8);           // AVX2: 8 float lanes
    // f is either inlined (two calls per point of g) or computed over at least 65 x 32.
    if (fs[4] == 0) {
      EXPECT_EQ(fs[17], 2 * 64 * 32);
    } else {
      EXPECT_EQ(fs[5], 65 * 32);
      EXPECT_GE(fs[4], 65 * 32);
      EXPECT_EQ(fs[17], 0);
    }
  }
}

// A transpose and a reduction with an RDom, four stages: in_im, t, s's pure definition and
// s's update.
TEST_F(HkfacPlugin, FeaturizationOfATinyReductionIsCountable) {
  for (const char *seed : {"1", "2", "3", "4"}) {
    ImageParam in(Float(32), 2, "in");
    Func t("t"), s("s");
    Var x("x"), y("y");
    RDom r(0, 8, "r");
    t(x, y) = in(y, x);
    s(x) = 0.0f;
    s(x) += t(x, r);
    in.set_estimates({{0, 8}, {0, 32}});
    s.set_estimates({{0, 32}});
    ScopedEnv w("HL_RANDOMIZE_WEIGHTS", seed);
    Pipeline pipe(s);
    AutoSchedulerResults res = pipe.auto_schedule("Hkfac", kTarget, machine());
    const std::vector<float> v = floats(res.featurization);
    ASSERT_EQ(v.size(), 4u * (kS + kAlgo));
    for (float e : v)
      ASSERT_TRUE(std::isfinite(e) && e >= 0);
    const float *ts = v.data() + (kS + kAlgo), *ta = ts + kS;
    const float *s0s = ta + kAlgo, *s0a = s0s + kS;
    const float *s1s = s0a + kAlgo, *s1a = s1s + kS;
    enum { kConst = 0, kVariable = 2, kAdd = 4, kFunc = 20, kSelf = 21 };
    enum { kPointwise = 0, kTranspose = 1, kSlice = 3 };
    enum { kLoadFunc = 0, kLoadSelf = 1, kStore = 3 };
    enum { kInt32 = 3, kFloat = 5 };
    // t: in_im(y, x), one transposed load; x and y twice each (the call and the store).
    EXPECT_EQ(op(ta, kFunc, kFloat), 1);
    EXPECT_EQ(access(ta, kTranspose, kLoadFunc, kFloat), 1);
    EXPECT_EQ(access(ta, kPointwise, kLoadFunc, kFloat), 0);
    EXPECT_EQ(access(ta, kPointwise, kStore, kFloat), 1);
    EXPECT_EQ(op(ta, kVariable, kInt32), 4);
    // s = 0: one float constant, x in the store.
    EXPECT_EQ(op(s0a, kConst, kFloat), 1);
    EXPECT_EQ(op(s0a, kVariable, kInt32), 1);
    EXPECT_EQ(access(s0a, kPointwise, kStore, kFloat), 1);
    EXPECT_EQ(op(s0a, kAdd, kFloat), 0);
    // s += t(x, r): one add, a pointwise load of itself, and t(x, r) whose second argument uses
    // no pure variable (a slice); x, x, r and the store's x.
    EXPECT_EQ(op(s1a, kAdd, kFloat), 1);
    EXPECT_EQ(op(s1a, kSelf, kFloat), 1);
    EXPECT_EQ(op(s1a, kFunc, kFloat), 1);
    EXPECT_EQ(access(s1a, kPointwise, kLoadSelf, kFloat), 1);
    EXPECT_EQ(access(s1a, kSlice, kLoadFunc, kFloat), 1);
    EXPECT_EQ(access(s1a, kPointwise, kStore, kFloat), 1);
    EXPECT_EQ(op(s1a, kVariable, kInt32), 4);
    EXPECT_EQ(s1a[kFloat], 1);
    EXPECT_EQ(s1a[kInt32], 1);
    // s, the output, is computed once over its 32 points; t over 32 x 8 points unless inlined,
    // then called once per iteration of the update (32 x 8).
    EXPECT_EQ(s0s[0], 1);
    EXPECT_EQ(s0s[5], 32);
    if (ts[4] == 0) {
      EXPECT_EQ(ts[17], 32 * 8);
    } else {
      EXPECT_EQ(ts[5], 32 * 8);
      EXPECT_GE(ts[4], 32 * 8);
    }
    (void)s1s;
  }
}

// The per-vector loads of a matrix product's update, counted by hand: prod(x, y) += a(r, y) *
// b(x, r) vectorized along x reads b densely (one vector load) and a once per row (one
// broadcast). Blocked by R rows, the R rows share b's load, so it counts 1 / R per vector; blocked
// by V vectors side by side, the V vectors share a's broadcast, 1 / V per vector. Seeds give
// unblocked, row-blocked and row-and-column-blocked schedules alike.
TEST_F(HkfacPlugin, FeaturizationCountsABlockedProductsSharedLoadsOncePerBlock) {
  const int n = 64, m = 96, k = 40;
  const std::regex split(R"(prod\.update\(0\)\.split\(y\w*, \w+, (y\w*_[ir]), (\d+),)");
  const std::regex columns(R"(prod\.update\(0\)\.split\(x\w*, \w+, x_w, (\d+),)");
  std::set<std::pair<int, int>> seen;
  const std::set<std::pair<int, int>> wanted{{0, 0}, {1, 0}, {1, 1}};
  auto all_seen = [&] {
    return std::includes(seen.begin(), seen.end(), wanted.begin(), wanted.end());
  };
  for (int seed = 1; seed <= 60 && !all_seen(); ++seed) {
    ImageParam pa(Float(32), 2, "a"), pb(Float(32), 2, "b");
    Func prod = matrix_product(pa, pb, n, m, k);
    const std::string sd = std::to_string(seed);
    ScopedEnv w("HL_RANDOMIZE_WEIGHTS", sd.c_str());
    AutoSchedulerResults res = Pipeline(prod).auto_schedule("Hkfac", kTarget, machine());
    const std::string &src = res.schedule_source;
    if (src.find("prod.update(0).vectorize(x_v)") == std::string::npos)
      continue;
    // The rows R: the factor of the split whose inner y loop is unrolled, else 1.
    int rows = 1;
    for (std::sregex_iterator it(src.begin(), src.end(), split), end; it != end; ++it)
      if (src.find("prod.update(0).unroll(" + (*it)[1].str() + ")") != std::string::npos)
        rows = std::stoi((*it)[2].str());
    // The vectors V: the x_w split's factor over the 8 lanes, where x_u is unrolled, else 1.
    int vectors = 1;
    std::smatch cm;
    if (std::regex_search(src, cm, columns) &&
        src.find("prod.update(0).unroll(x_u)") != std::string::npos)
      vectors = std::stoi(cm[1].str()) / 8;
    seen.insert({rows > 1, vectors > 1});
    const std::vector<float> v = floats(res.featurization);
    ASSERT_EQ(v.size(), 4u * (kS + kAlgo)); // a_im, b_im, prod, prod's update
    const float *u = v.data() + 3 * (kS + kAlgo);
    const float r = static_cast<float>(rows), c = static_cast<float>(vectors);
    EXPECT_EQ(u[8], rows * vectors) << src;              // unrolled extent
    EXPECT_EQ(u[22], 8) << src;                          // vector width
    EXPECT_FLOAT_EQ(u[26], 1.0f / c) << src;             // a's broadcast, per row and block
    EXPECT_FLOAT_EQ(u[27], 1.0f / r) << src;             // b's vector, per block of rows
    EXPECT_FLOAT_EQ(u[31], 4.0f / c + 32.0f / r) << src; // bytes: 4 of a, 8 lanes x 4 of b
    EXPECT_FLOAT_EQ(u[32], 1.0f / c + 1.0f / r) << src;  // lines: a's one, b's one
  }
  EXPECT_TRUE(all_seen()) << "60 random models did not give an unblocked, a row-blocked and a "
                             "row-and-column-blocked vectorized update";
}

// A histogram of cells over intensity bins (bgu's moments): cell (x, y) gathers 4 pixels of its
// row, and bin z weighs each by a tent around it. Vectorized along x its update gathers the input
// at a stride of 4; along z (FuncChoice::update_lanes) every lane reads the same pixel.
struct BinnedCells {
  ImageParam in{Float(32), 2, "in"};
  Func h{"h"};
  explicit BinnedCells(int cells) {
    Var x("x"), y("y"), z("z");
    RDom r(0, 4, "r");
    Expr v = in(x * 4 + r, y);
    h(x, y, z) = 0.0f;
    h(x, y, z) += max(0.0f, 1.0f - abs(v * 8 - cast<float>(z))) * v;
    in.set_estimates({{0, 4 * cells}, {0, 40}});
    h.set_estimates({{0, cells}, {0, 40}, {0, 16}});
  }
};

// An update vectorized along a higher dimension computes what the plain schedule computes, at
// the estimated size and at sizes no vector divides, and its per-vector loads are counted against
// that loop, as by hand: along z the input is one broadcast per vector (4 bytes, one line), along
// x a gather of 8 lanes (8 scalar loads, 32 bytes, 8 lines). Random models of 40 must vectorize
// the update along z and along x, and along z also where the cells are too few for a vector
// along x (3).
TEST_F(HkfacPlugin,
       UpdatesVectorizedAlongAHigherDimensionComputeThePlainScheduleAndCountTheirLoads) {
  ScopedEnv b("HL_BEAM_SIZE", "2");
  ScopedEnv kinds("HKFAC_PLACEMENTS", "root,lanes");
  std::set<std::string> seen;
  for (int seed = 1; seed <= 40 && seen.size() < 3; ++seed) {
    const std::string sd = std::to_string(seed);
    ScopedEnv w("HL_RANDOMIZE_WEIGHTS", sd.c_str());
    const int cells = seed % 2 ? 24 : 3;
    BinnedCells p(cells);
    Pipeline pipe(p.h);
    const AutoSchedulerResults res = pipe.auto_schedule("Hkfac", kTarget, machine());
    const std::string &src = res.schedule_source;
    SCOPED_TRACE(src);
    const bool along_z = src.find("h.update(0).vectorize(z_v)") != std::string::npos;
    const bool along_x = src.find("h.update(0).vectorize(x_v)") != std::string::npos;
    if (!along_z && !along_x)
      continue;
    seen.insert(std::string(along_z ? "z" : "x") + std::to_string(cells));
    const std::vector<float> v = floats(res.featurization);
    ASSERT_EQ(v.size(), 3u * (kS + kAlgo)); // in_im, h, h's update
    const float *u = v.data() + 2 * (kS + kAlgo);
    EXPECT_EQ(u[22], 8);                            // vector width
    EXPECT_FLOAT_EQ(u[26], along_z ? 1.0f : 8.0f);  // scalar loads per vector
    EXPECT_FLOAT_EQ(u[27], 0.0f);                   // vector loads per vector
    EXPECT_FLOAT_EQ(u[31], along_z ? 4.0f : 32.0f); // bytes
    EXPECT_FLOAT_EQ(u[32], along_z ? 1.0f : 8.0f);  // lines
    for (auto [w, h, bins] : {std::tuple{cells, 40, 16}, std::tuple{13, 7, 11}}) {
      Buffer<float> input(4 * w, h);
      input.for_each_element(
          [&](int i, int j) { input(i, j) = 0.5f + 0.5f * std::sin(0.3f * i + j); });
      p.in.set(input);
      Buffer<float> got = pipe.realize({w, h, bins}, kTarget);
      got.for_each_element([&](int x, int y, int z) {
        float want = 0;
        for (int r = 0; r < 4; ++r) {
          const float val = input(4 * x + r, y);
          want += std::max(0.0f, 1.0f - std::fabs(val * 8 - z)) * val;
        }
        ASSERT_NEAR(got(x, y, z), want, 1e-5f)
            << w << " x " << h << " x " << bins << ": " << x << "," << y << "," << z;
      });
    }
  }
  EXPECT_EQ(seen, (std::set<std::string>{"x24", "z24", "z3"}))
      << "40 random models did not vectorize the update along z and x of 24 cells and along z of 3";
}


// A 1-D reduction at root (a row sum: its one pure loop holds the vector lanes) runs its update
// parallel in the tasks its pure stage has, as its features count it, and computes the sums a
// plain loop computes, at the estimated size and at one no vector or task divides. Random models
// must give it tasks (a tile that splits the rows).
TEST_F(HkfacPlugin, ARowSumAtRootRunsItsUpdateInParallelTasks) {
  ScopedEnv b("HL_BEAM_SIZE", "2");
  ScopedEnv kinds("HKFAC_PLACEMENTS", "root");
  int parallel = 0;
  for (int seed = 1; seed <= 20 && parallel < 2; ++seed) {
    const std::string sd = std::to_string(seed);
    ScopedEnv w("HL_RANDOMIZE_WEIGHTS", sd.c_str());
    ImageParam in(Float(32), 2, "in");
    Func row_sum("row_sum"), out("out");
    Var x("x"), y("y");
    RDom r(0, in.dim(0).extent(), "r");
    row_sum(y) = 0.0f;
    row_sum(y) += in(r, y);
    out(x, y) = in(x, y) - row_sum(y);
    in.set_estimates({{0, 768}, {0, 1024}});
    out.set_estimates({{0, 768}, {0, 1024}});
    Pipeline pipe(out);
    const std::string src = pipe.auto_schedule("Hkfac", kTarget, machine()).schedule_source;
    SCOPED_TRACE(src);
    const bool vectorized = src.find("row_sum.update(0).vectorize(y_v)") != std::string::npos;
    const bool pure_parallel = std::regex_search(src, std::regex("row_sum\\.parallel\\("));
    if (!vectorized || !pure_parallel)
      continue;
    EXPECT_NE(src.find("row_sum.update(0).parallel(y_t)"), std::string::npos)
        << "a parallel row sum's update runs serial";
    ++parallel;
    for (auto [width, height] : {std::pair{768, 1024}, std::pair{801, 1043}}) {
      Buffer<float> input(width, height);
      input.for_each_element([&](int i, int j) { input(i, j) = std::sin(0.37f * i + 0.11f * j); });
      in.set(input);
      Buffer<float> got = pipe.realize({width, height}, kTarget);
      for (int j = 0; j < height; ++j) {
        double sum = 0;
        for (int i = 0; i < width; ++i)
          sum += input(i, j);
        for (int i = 0; i < width; i += 7)
          ASSERT_NEAR(got(i, j), input(i, j) - sum, 1e-3) << width << " x " << height << ": " << j;
      }
    }
  }
  EXPECT_EQ(parallel, 2) << "20 random models did not put a vectorized, parallel row sum at root";
}

} // namespace

// An inlined Func's work is counted once per copy that survives Halide's common-subexpression
// elimination, counted by hand: g(x, c) = (t * 2 + 1) * (t - 3) + c with t = in(x) costs 6
// (a load, four operations, the add of c; the constant c costs nothing). In f = g(x, 0) + g(x, 1)
// the five before the add of c are shared: 5 + 2 = 7 of the 12 two copies would cost, 7 / 6
// copies per point. In f = g(x, 0) + g(x + 1, 1) the calls share nothing: 2 copies.
TEST_F(HkfacPlugin, FeaturizationCountsInlinedCallsThatShareWorkOnce) {
  const int w = 64;
  for (bool shared : {true, false}) {
    ImageParam in(Float(32), 1, "in");
    Func f("f"), g("g");
    Var x("x"), c("c");
    g(x, c) = (in(x)*2.0f + 1.0f) * (in(x)-3.0f) + cast<float>(c);
    f(x) = g(x, 0) + g(shared ? x : x + 1, 1);
    in.set_estimates({{0, w + 1}});
    f.set_estimates({{0, w}});
    ScopedEnv inline_only("HKFAC_PLACEMENTS", "inline");
    AutoSchedulerResults r = Pipeline(f).auto_schedule("Hkfac", kTarget, machine());
    const std::vector<float> v = floats(r.featurization);
    // in_im, g, f.
    ASSERT_EQ(v.size(), 3u * (kS + kAlgo));
    const float *gs = v.data() + (kS + kAlgo);
    EXPECT_EQ(gs[4], 0) << "g is inlined";
    EXPECT_FLOAT_EQ(gs[17], (shared ? 7.0f / 6.0f : 2.0f) * w) << r.schedule_source;
  }
}
