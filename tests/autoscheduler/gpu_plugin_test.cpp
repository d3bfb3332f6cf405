// The Hkfac plugin on GPU targets, in-process: its schedules put every device loop in blocks and
// threads within the device's limits and compile to CUDA, its GPU featurization holds the values
// one can count from the schedule, shared-memory staging keeps to its limit, and its fallback is
// a GPU schedule. (That the schedules compute what the CPU computes is checked by running them
// on OpenCL: the HkfacGpu.OpenCl* tests.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <unistd.h>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "Halide.h"
#include "scoped_env.h"

using namespace Halide;

namespace {

constexpr int kS = 73; // GPU schedule features
constexpr int kAlgo = 287;
const Target kCuda("x86-64-linux-avx-avx2-f16c-fma-sse41-cuda-cuda_capability_75");
MachineParams machine() { return MachineParams(4, 6 * 1024 * 1024, 40); }

class HkfacGpuPlugin : public ::testing::Test {
protected:
  static void SetUpTestSuite() { load_plugin(HKFAC_PLUGIN_PATH); }
  ScopedEnv beam_{"HL_BEAM_SIZE", "1"};
};

// A stencil chain with a boundary condition, a row reduction and a matrix-product-like update:
// producers to stage, an update with pure loops, and one without a pure loop over dimension 0.
struct Chain {
  ImageParam in{Float(32), 2, "in"};
  Func clamped, blur_x{"blur_x"}, blur_y{"blur_y"}, rows{"rows"}, prod{"prod"}, out{"out"};
  Var x{"x"}, y{"y"};
  RDom r{0, 16, "r"};
  Chain(int w, int h) {
    clamped = BoundaryConditions::repeat_edge(in);
    blur_x(x, y) = (clamped(x - 1, y) + clamped(x, y) + clamped(x + 1, y)) / 3;
    blur_y(x, y) = (blur_x(x, y - 1) + blur_x(x, y) + blur_x(x, y + 1)) / 3;
    rows(y) = 0.0f;
    rows(y) += blur_y(r, y);
    prod(x, y) = 0.0f;
    prod(x, y) += blur_y(r, y) * blur_x(x, r);
    out(x, y) = blur_y(x, y) * 2 + rows(y) + prod(x, y);
    in.set_estimates({{0, w}, {0, h}});
    out.set_estimates({{0, w}, {0, h}});
  }
};

// Compiles the scheduled pipeline for `target` all the way to an object (device code included).
void compile(Pipeline &p, const std::vector<Argument> &args, const Target &target) {
  char path[] = "/tmp/hkfac_gpu_testXXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  p.compile_to_object(path, args, "scheduled", target);
  std::remove(path);
}

std::vector<float> floats(const std::vector<uint8_t> &bytes) {
  std::vector<float> f(bytes.size() / 4);
  std::memcpy(f.data(), bytes.data(), f.size() * 4);
  return f;
}

// The kernel launches of a lowered CUDA statement: halide_cuda_run(state, "kernel", blocks x, y,
// z, threads x, y, z, shared bytes, ...), the thread counts as the statement states them.
std::map<std::string, std::vector<std::string>> launches(const std::string &stmt) {
  std::map<std::string, std::vector<std::string>> out;
  const std::string call = "halide_cuda_run(";
  for (size_t at = stmt.find(call); at != std::string::npos; at = stmt.find(call, at + 1)) {
    std::vector<std::string> args(1);
    int depth = 0;
    for (size_t i = at + call.size(); i < stmt.size() && args.size() < 10; ++i) {
      const char ch = stmt[i];
      if (depth == 0 && ch == ',') {
        args.emplace_back();
        continue;
      }
      depth += ch == '(' ? 1 : ch == ')' ? -1 : 0;
      if (depth < 0)
        break;
      args.back() += ch;
    }
    if (args.size() >= 9)
      out[args[1]] = {args[5], args[6], args[7]};
  }
  return out;
}

std::string lowered(Pipeline &p, const std::vector<Argument> &args, const Target &t) {
  char path[] = "/tmp/hkfac_gpu_stmtXXXXXX";
  const int fd = mkstemp(path);
  close(fd);
  p.compile_to_lowered_stmt(path, args, Text, t);
  std::ifstream f(path);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::remove(path);
  return s;
}

TEST_F(HkfacGpuPlugin, SchedulesUseBlocksAndThreadsWithinTheLimitAndCompileToCuda) {
  ScopedEnv limit("HKFAC_GPU_MAX_THREADS", "128");
  for (const char *beam : {"1", "3"}) {
    for (const char *seed : {"0", "5", "9"}) {
      ScopedEnv b("HL_BEAM_SIZE", beam);
      ScopedEnv w("HL_RANDOMIZE_WEIGHTS", seed[0] == '0' ? nullptr : seed);
      Chain c(300, 200);
      Pipeline p(c.out);
      const AutoSchedulerResults r = p.auto_schedule("Hkfac", kCuda, machine());
      const std::string &src = r.schedule_source;
      EXPECT_NE(src.find("gpu_blocks"), std::string::npos) << src;
      EXPECT_NE(src.find("gpu_threads"), std::string::npos) << src;
      EXPECT_EQ(src.find(".parallel("), std::string::npos) << src;
      EXPECT_EQ(src.find(".vectorize("), std::string::npos) << src;
      const std::string stmt = lowered(p, {c.in}, kCuda);
      const auto kernels = launches(stmt);
      EXPECT_GE(kernels.size(), 3u) << stmt;
      for (const auto &kv : kernels) {
        long long n = 1;
        for (const std::string &e : kv.second) {
          // Thread counts are constants (Halide requires it); trim the blank before them.
          const std::string t = e.substr(e.find_first_not_of(' '));
          ASSERT_TRUE(!t.empty() && t.find_first_not_of("0123456789") == std::string::npos)
              << kv.first << ": thread count " << t;
          n *= std::stoll(t);
        }
        EXPECT_LE(n, 128) << kv.first << " in\n" << src;
      }
      compile(p, {c.in}, kCuda);
    }
  }
}

// One pointwise stage over 256 x 64: its blocks, threads and memory traffic follow from the
// split factors the schedule prints.
TEST_F(HkfacGpuPlugin, FeaturizationOfAPointwiseKernelIsCountable) {
  for (const char *seed : {"1", "2", "3", "4", "5", "6"}) {
    ScopedEnv w("HL_RANDOMIZE_WEIGHTS", seed);
    ImageParam in(Float(32), 2, "in");
    Func g("g");
    Var x("x"), y("y");
    g(x, y) = in(x, y) * 2.0f;
    in.set_estimates({{0, 256}, {0, 64}});
    g.set_estimates({{0, 256}, {0, 64}});
    Pipeline p(g);
    const AutoSchedulerResults r = p.auto_schedule("Hkfac", kCuda, machine());
    // g.split(x, x_o, x_i, TILE, ...) and, with a register tile, g.split(x_i, x_r, x_t, THREADS).
    std::map<std::string, int> factor;
    std::regex split(R"(g\.split\((\w+), \w+, \w+, (\d+),)");
    for (auto it = std::sregex_iterator(r.schedule_source.begin(), r.schedule_source.end(), split);
         it != std::sregex_iterator(); ++it)
      factor[(*it)[1]] = std::stoi((*it)[2]);
    ASSERT_TRUE(factor.count("x") && factor.count("y")) << r.schedule_source;
    const int tile_x = factor["x"], tile_y = factor["y"];
    const int threads_x = factor.count("x_i") ? factor["x_i"] : tile_x;
    const int threads_y = factor.count("y_i") ? factor["y_i"] : tile_y;
    const double blocks = std::ceil(256.0 / tile_x) * std::ceil(64.0 / tile_y);
    const double per_thread = 256.0 * 64 / (blocks * threads_x * threads_y);

    const std::vector<float> v = floats(r.featurization);
    ASSERT_EQ(v.size(), 2u * (kS + kAlgo)); // in_im, g
    for (float e : v)
      ASSERT_TRUE(std::isfinite(e) && e >= 0);
    const float *gs = v.data() + kS + kAlgo;
    EXPECT_EQ(gs[4], 256 * 64);                       // points
    EXPECT_EQ(gs[30], 1) << r.schedule_source;        // one launch
    EXPECT_EQ(gs[31], blocks) << r.schedule_source;   // blocks
    EXPECT_EQ(gs[32], threads_x * threads_y);         // threads per block
    EXPECT_EQ(gs[33], std::ceil(threads_x * threads_y / 32.0)); // warps per block
    EXPECT_EQ(gs[38], 4);                             // SMs: machine_params parallelism
    EXPECT_FLOAT_EQ(gs[46], per_thread);              // points per thread
    EXPECT_EQ(gs[8], (tile_x / threads_x) * (tile_y / threads_y)); // unrolled register tile
    EXPECT_LE(gs[41], 1);                             // occupancy is a ratio
    EXPECT_GT(gs[41], 0);
    // One store per point; the load of in_im is either global (in_im a kernel of its own) or,
    // when in_im is inlined, a register value.
    EXPECT_FLOAT_EQ(gs[55], per_thread);
    EXPECT_EQ(gs[57], 1); // stores along x coalesce
    // Each load of in_im is counted once, by where in_im is: global (its own kernel), shared
    // (staged per block) or registers (inlined, or staged per thread).
    EXPECT_FLOAT_EQ(gs[50] + gs[60] + gs[68], per_thread);
    if (r.schedule_source.find("in_im.compute_root()") != std::string::npos) {
      EXPECT_FLOAT_EQ(gs[50], per_thread);
      EXPECT_EQ(gs[52], 1); // dense loads along the warp coalesce
    }
  }
}

// Producers staged per block in shared memory never exceed HKFAC_GPU_SHARED_BYTES; with none
// allowed, no schedule stages any.
TEST_F(HkfacGpuPlugin, SharedMemoryStagingKeepsToTheLimit) {
  ScopedEnv b("HL_BEAM_SIZE", "4");
  ScopedEnv passes("HL_NUM_PASSES", "1");
  int staged = 0;
  for (const char *limit : {"4096", "0"}) {
    ScopedEnv l("HKFAC_GPU_SHARED_BYTES", limit);
    for (int seed = 1; seed <= 8; ++seed) {
      ScopedEnv w("HL_RANDOMIZE_WEIGHTS", std::to_string(seed).c_str());
      Chain c(300, 200);
      Pipeline p(c.out);
      const AutoSchedulerResults r = p.auto_schedule("Hkfac", kCuda, machine());
      const bool shared = r.schedule_source.find("GPUShared") != std::string::npos;
      if (std::string(limit) == "0") {
        EXPECT_FALSE(shared) << r.schedule_source;
        continue;
      }
      staged += shared;
      const std::vector<float> v = floats(r.featurization);
      for (size_t s = 0; s + kS + kAlgo <= v.size(); s += kS + kAlgo)
        EXPECT_LE(v[s + 42], 4096) << r.schedule_source; // shared bytes per block
      if (shared)
        compile(p, {c.in}, kCuda);
    }
  }
  EXPECT_GT(staged, 0) << "no random model staged a producer in shared memory";
}

// A histogram (a scatter: an associative, commutative update with no pure loop) runs its RVars
// in atomic blocks and threads; a prefix scan over it (not commutative) stays on the host; a
// float max-reduction with a pure loop runs in threads over it. All compile to CUDA.
TEST_F(HkfacGpuPlugin, ScatterUpdatesAreAtomicAndScansStayOnTheHost) {
  ImageParam in(Float(32), 2, "in");
  Func hist("hist"), cdf("cdf"), colmax("colmax"), out("out");
  Var x("x"), b("b");
  RDom r(0, 300, 0, 200, "r");
  hist(b) = 0;
  hist(clamp(cast<int>(in(r.x, r.y) * 16.0f), 0, 15)) += 1;
  RDom s(1, 15, "s");
  cdf(b) = hist(b);
  cdf(s) = cdf(s - 1) + hist(s);
  RDom k(0, 200, "k");
  colmax(x) = -1e30f;
  colmax(x) = max(colmax(x), in(x, k));
  out(x) = colmax(x) + cast<float>(cdf(x % 16));
  in.set_estimates({{0, 300}, {0, 200}});
  out.set_estimates({{0, 300}});
  Pipeline p(out);
  const AutoSchedulerResults res = p.auto_schedule("Hkfac", kCuda, machine());
  const std::string &src = res.schedule_source;
  EXPECT_NE(src.find("hist.update(0).atomic();"), std::string::npos) << src;
  EXPECT_NE(src.find("hist.update(0).gpu_threads("), std::string::npos) << src;
  EXPECT_NE(src.find("cdf.update(0).unscheduled();"), std::string::npos) << src;
  EXPECT_EQ(src.find("cdf.update(0).atomic"), std::string::npos) << src;
  EXPECT_NE(src.find("colmax.update(0).gpu_threads("), std::string::npos) << src;
  compile(p, {in}, kCuda);
}

TEST_F(HkfacGpuPlugin, FallbackIsAGpuSchedule) {
  ScopedEnv f("HKFAC_INJECT_FAILURE", "search");
  Chain c(300, 200);
  Pipeline p(c.out);
  ::testing::internal::CaptureStderr();
  const AutoSchedulerResults r = p.auto_schedule("Hkfac", kCuda, machine());
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("fallback"), std::string::npos) << err;
  EXPECT_NE(r.schedule_source.find("gpu_blocks"), std::string::npos) << r.schedule_source;
  EXPECT_NE(r.schedule_source.find("gpu_threads"), std::string::npos) << r.schedule_source;
  compile(p, {c.in}, kCuda);
}

TEST_F(HkfacGpuPlugin, GpuWeightsMustHaveTheGpuFeatureCount) {
  // CPU weights cannot score GPU schedules: naming them is an error that says so, not a silent
  // switch.
  ScopedEnv wd("HL_WEIGHTS_DIR", HKFAC_CPU_WEIGHTS);
  Chain c(64, 64);
  Pipeline p(c.out);
  try {
    p.auto_schedule("Hkfac", kCuda, machine());
    ADD_FAILURE() << "CPU weights were accepted for a GPU target";
  } catch (const Halide::Error &e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("HL_WEIGHTS_DIR"), std::string::npos) << what;
    EXPECT_NE(what.find("expected 200"), std::string::npos) << what; // the GPU features' version
  }
}

} // namespace
