// Measured selection's parts against what they promise: the faster of two candidates is chosen
// whatever the model says, a candidate that crashes, hangs or fails to compile costs itself
// alone, inputs are bound at their estimates, the host's CPU is read right, schedules and
// pipelines are identified exactly, and the tuning cache stays whole under parallel and killed
// writers.
#include <gtest/gtest.h>

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <random>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "Halide.h"
#include "beam_search.h"
#include "candidates.h"
#include "cost_model.h"
#include "apply_schedule.h"
#include "estimated_run.h"
#include "hkfac/cost_model/tuning_cache.h"
#include "hkfac/cost_model/weights.h"
#include "host_cpu.h"
#include "loop_nest_model.h"
#include "machine_refit.h"
#include "measured_selection.h"
#include "pipeline_analysis.h"
#include "pipeline_fingerprint.h"
#include "plugin_weights.h"
#include "register_tiles.h"
#include "schedule_features.h"
#include "state_codec.h"

namespace {

using namespace Halide;
using namespace hkfac::sched;
using hkfac::cost_model::TuningCache;
namespace kernels = hkfac::kernels;

// A blur, a costly pointwise Func over it (eight sines a point) and a five-point stencil of that:
// computed once per point it is cheap, inlined into the stencil it costs five times as much,
// whatever the machine's threads and vectors (which a loaded test machine may not give).
struct Blur {
  ImageParam in{Float(32), 2, "in"};
  Param<float> gain{"gain"};
  Func blur_x{"blur_x"}, heavy{"heavy"}, out{"out"};
  Var x{"x"}, y{"y"};
  explicit Blur(int w = 512, int h = 256, float weight = 1.0f / 3) {
    Func clamped = BoundaryConditions::repeat_edge(in);
    blur_x(x, y) = weight * (clamped(x - 1, y) + clamped(x, y) + clamped(x + 1, y));
    Expr e = 0.0f;
    for (int i = 0; i < 8; ++i)
      e += sin(blur_x(x, y) * (1 + i) + i * 0.1f);
    heavy(x, y) = e;
    out(x, y) = gain * (heavy(x, y) + heavy(x - 1, y) + heavy(x + 1, y) + heavy(x, y - 1) +
                        heavy(x, y + 1));
    in.set_estimates({{0, w}, {0, h}});
    gain.set_estimate(2.0f);
    out.set_estimates({{0, w}, {0, h}});
  }
  std::vector<Internal::Function> outputs() const { return {out.function()}; }
  // The reference value of out at (i, j), computed in plain C++ from `in`.
  static float expected(const Buffer<float> &in, int i, int j, float gain,
                        float weight = 1.0f / 3) {
    auto at = [&](int a, int b) {
      a = std::clamp(a, in.dim(0).min(), in.dim(0).max());
      b = std::clamp(b, in.dim(1).min(), in.dim(1).max());
      return in(a, b);
    };
    auto heavy = [&](int a, int b) {
      const float bx = weight * (at(a - 1, b) + at(a, b) + at(a + 1, b));
      float e = 0;
      for (int k = 0; k < 8; ++k)
        e += std::sin(bx * (1 + k) + k * 0.1f);
      return e;
    };
    return gain *
           (heavy(i, j) + heavy(i - 1, j) + heavy(i + 1, j) + heavy(i, j - 1) + heavy(i, j + 1));
  }
};

const MachineParams kMachine(2, 16 * 1024 * 1024, 40);

Parameters model_only_params(const Target &t) {
  setenv("HKFAC_TUNE_SECONDS", "0", 1);
  setenv("HKFAC_CACHE_DIR", "off", 1);
  setenv("HL_BEAM_SIZE", "4", 1);
  return Parameters::from(kMachine, t);
}

int func_named(const PipelineAnalysis &dag, const std::string &name) {
  for (const FuncNode &f : dag.funcs)
    if (f.name == name || f.name.rfind(name + "$", 0) == 0)
      return f.id;
  return -1;
}

// The output as the search tiles it with every other Func inlined, once with `heavy` computed at
// root (tiled as the output is) instead: legal both, and the inlined one does five times the work.
std::pair<StatePtr, StatePtr> fast_and_slow(const PipelineAnalysis &dag, const Parameters &params) {
  CostModel model(dag, params);
  StatePtr pick = beam_search(dag, model, params).best.front();
  const int heavy = func_named(dag, "heavy"), out = func_named(dag, "out");
  auto slow = std::make_shared<State>(*pick);
  for (const FuncNode &f : dag.funcs)
    if (f.id != out) {
      EXPECT_TRUE(f.can_inline) << f.name;
      slow->choices[f.id] = FuncChoice{};
      slow->choices[f.id].placement = Placement::Inline;
    }
  auto fast = std::make_shared<State>(*slow);
  fast->choices[heavy] = pick->choices[out];
  return {fast, slow};
}

MeasureSettings quick_settings() {
  MeasureSettings m;
  m.budget_s = 20;
  m.jit = host_run(get_host_target()).jit;
  m.rounds = 2;
  m.min_round_s = 0.02;
  m.lock_path.clear(); // a test must not wait on the host's other timings
  m.max_foreign_share = 1.0;
  return m;
}

TEST(MeasuredSelection, PicksTheFasterOfTwoCandidatesTheModelOrdersWrong) {
  Blur p;
  const Target t = get_host_target();
  const Parameters params = model_only_params(t);
  PipelineAnalysis dag(p.outputs(), t);
  auto [fast, slow] = fast_and_slow(dag, params);
  // The model is told the wrong order: the slow schedule is its pick, predicted cheaper.
  auto slow_pick = std::make_shared<State>(*slow);
  slow_pick->cost = 1;
  auto fast_other = std::make_shared<State>(*fast);
  fast_other->cost = 2;
  MeasuredSelection sel =
      choose_by_measurement(dag, p.outputs(), {{slow_pick, "wrong pick"}, {fast_other, "other"}},
                            quick_settings(), params);
  ASSERT_TRUE(sel.measured) << sel.summary;
  ASSERT_TRUE(sel.timings[0].ok) << sel.timings[0].failure;
  ASSERT_TRUE(sel.timings[1].ok) << sel.timings[1].failure;
  EXPECT_LT(sel.timings[1].ms, sel.timings[0].ms);
  EXPECT_EQ(sel.chosen, 1) << sel.summary;
  // The caller's Funcs were never scheduled: every candidate lived in its own process.
  LoopLevel level = p.blur_x.function().schedule().compute_level();
  level.lock();
  EXPECT_TRUE(level.is_inlined());
}

// Measured selection times the pick of a search without the allocation bound only where the bound
// left a placement out: a bound of one byte leaves out every compute_at of this pipeline and says
// so, and a bound nothing reaches reports nothing and takes the unbounded search's very path.
TEST(MeasuredSelection, TheAllocationBoundCountsWhatItLeavesOut) {
  Blur p;
  const Target t = get_host_target();
  PipelineAnalysis dag(p.outputs(), t);
  Parameters tight = model_only_params(t);
  tight.iteration_bytes = 1;
  tight.iteration_bytes_per_point = 0;
  CostModel model(dag, tight);
  EXPECT_GT(beam_search(dag, model, tight).oversized_dropped, 0);
  Parameters loose = tight, unbounded = tight;
  loose.iteration_bytes = 1e15;
  unbounded.iteration_bytes = std::numeric_limits<double>::infinity();
  const SearchResult l = beam_search(dag, model, loose);
  const SearchResult u = beam_search(dag, model, unbounded);
  EXPECT_EQ(l.oversized_dropped, 0);
  EXPECT_EQ(u.oversized_dropped, 0);
  EXPECT_TRUE(l.best.front()->choices == u.best.front()->choices);
}

// A multichannel FIR filter over a long signal: a reduction over the taps whose buffer, computed
// per parallel task, is a whole channel (256 KiB here) unless the schedule cuts it into pieces.
struct Fir {
  ImageParam signal{Float(32), 2, "signal"};
  ImageParam taps{Float(32), 1, "taps"};
  Func filtered{"filtered"}, out{"out"};
  Var t{"t"}, c{"c"};
  Fir() {
    Func padded = BoundaryConditions::constant_exterior(signal, 0.0f);
    RDom k(0, taps.dim(0).extent());
    filtered(t, c) = 0.0f;
    filtered(t, c) += taps(k) * padded(t + k - taps.dim(0).extent() / 2, c);
    out(t, c) = filtered(t, c);
    signal.set_estimates({{0, 1 << 16}, {0, 4}});
    taps.set_estimates({{0, 31}});
    out.set_estimates({{0, 1 << 16}, {0, 4}});
  }
  std::vector<Internal::Function> outputs() const { return {out.function()}; }
};

// The bytes of the largest buffer a Func computed inside another's loops allocates; 0 where
// every computed Func is at root.
double largest_piece(const PipelineAnalysis &dag, const State &s) {
  LoopNestModel m(dag, s);
  double largest = 0;
  for (const FuncNode &f : dag.funcs) {
    if (s.choices[f.id].placement != Placement::At)
      continue;
    double points = 1;
    for (const auto &d : m.func(f.id).storage)
      points *= std::max(1.0, d.extent());
    largest = std::max(largest, points * f.bytes_per_point);
  }
  return largest;
}

// The cache-sized candidate computes the reduction in pieces within the bound (not at root, where
// the bound would hold trivially), and measured selection times it even where it places the
// Funcs as the model's pick does and only tiles them smaller.
TEST(MeasuredSelection, TheCacheSizedCandidateComputesInPiecesWithinTheBound) {
  Fir p;
  const Target t = get_host_target();
  const Parameters params = model_only_params(t);
  PipelineAnalysis dag(p.outputs(), t);
  CostModel model(dag, params);
  const double bound = 32 * 1024;
  StatePtr small = cache_sized_schedule(dag, model, params, bound);
  ASSERT_TRUE(small);
  ASSERT_TRUE(LoopNestModel(dag, *small).legal());
  const int filtered = func_named(dag, "filtered");
  ASSERT_GE(filtered, 0);
  EXPECT_EQ(small->choices[filtered].placement, Placement::At);
  EXPECT_GT(largest_piece(dag, *small), 0);
  EXPECT_LE(largest_piece(dag, *small), bound);

  StatePtr pick = beam_search(dag, model, params).best.front();
  // The plugin runs this search only where the pick's pieces outgrow the bound: this pick's do,
  // the cache-sized schedule's do not.
  EXPECT_GT(largest_iteration_bytes(dag, *pick), bound);
  EXPECT_LE(largest_iteration_bytes(dag, *small), bound);
  const int out = func_named(dag, "out");
  auto smaller = std::make_shared<State>(*pick);
  ASSERT_EQ(smaller->choices[out].placement, Placement::Root);
  smaller->choices[out].tile[0] = std::max(16.0, smaller->choices[out].tile[0] / 4);
  ASSERT_EQ(smaller->structure_hash(), pick->structure_hash());
  ASSERT_FALSE(smaller->choices == pick->choices);
  const std::vector<Candidate> chosen =
      diverse_candidates(dag, model, params, {pick}, 3, {{smaller, "cache-sized"}});
  ASSERT_GE(chosen.size(), 2u);
  EXPECT_EQ(chosen[1].origin, "cache-sized");
}

TEST(MeasuredSelection, ACrashingCandidateCostsOnlyItself) {
  Blur p;
  const Target t = get_host_target();
  const Parameters params = model_only_params(t);
  PipelineAnalysis dag(p.outputs(), t);
  auto [fast, slow] = fast_and_slow(dag, params);
  MeasureSettings m = quick_settings();
  m.inject_crash = 0;
  MeasuredSelection sel =
      choose_by_measurement(dag, p.outputs(), {{fast, "crashes"}, {slow, "runs"}}, m, params);
  EXPECT_FALSE(sel.timings[0].ok);
  EXPECT_NE(sel.timings[0].failure.find("crashed (SIGSEGV)"), std::string::npos)
      << sel.timings[0].failure;
  ASSERT_TRUE(sel.timings[1].ok) << sel.timings[1].failure;
  EXPECT_EQ(sel.chosen, 1);
  // The one line a user sees at the default log level says which candidate failed and why.
  EXPECT_NE(sel.summary.find("1 failed (#0: " + sel.timings[0].failure + ")"), std::string::npos)
      << sel.summary;
}

TEST(MeasuredSelection, AHangingCandidateIsStoppedWithinTheBudget) {
  Blur p;
  const Target t = get_host_target();
  const Parameters params = model_only_params(t);
  PipelineAnalysis dag(p.outputs(), t);
  auto [fast, slow] = fast_and_slow(dag, params);
  MeasureSettings m = quick_settings();
  m.budget_s = 6;
  m.inject_hang = 0;
  const auto start = std::chrono::steady_clock::now();
  MeasuredSelection sel =
      choose_by_measurement(dag, p.outputs(), {{fast, "hangs"}, {slow, "runs"}}, m, params);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(sel.timings[0].ok);
  EXPECT_NE(sel.timings[0].failure.find("did not finish within the budget"), std::string::npos)
      << sel.timings[0].failure;
  EXPECT_TRUE(sel.timings[1].ok) << sel.timings[1].failure;
  EXPECT_EQ(sel.chosen, 1);
  EXPECT_LT(took, m.budget_s + 3);
}

TEST(MeasuredSelection, ACandidateHalideRefusesCostsOnlyItself) {
  Blur p;
  const Target t = get_host_target();
  const Parameters params = model_only_params(t);
  PipelineAnalysis dag(p.outputs(), t);
  auto [fast, slow] = fast_and_slow(dag, params);
  // blur_x at root, and the boundary condition it reads computed inside the output's tiles,
  // outside blur_x's loops: Halide refuses to compile it.
  auto bad = std::make_shared<State>(*fast);
  const int blur_x = func_named(dag, "blur_x"), out = func_named(dag, "out");
  int clamped = -1;
  for (const FuncNode &f : dag.funcs)
    if (f.name.rfind("repeat_edge", 0) == 0)
      clamped = f.id;
  ASSERT_GE(blur_x, 0);
  ASSERT_GE(clamped, 0);
  ASSERT_EQ(bad->choices[out].placement, Placement::Root);
  bad->choices[blur_x] = bad->choices[out];
  bad->choices[clamped] = FuncChoice{};
  bad->choices[clamped].placement = Placement::At;
  bad->choices[clamped].at_func = out;
  bad->choices[clamped].at_level = kPerTile;
  MeasuredSelection sel = choose_by_measurement(
      dag, p.outputs(), {{bad, "refused"}, {slow, "runs"}}, quick_settings(), params);
  EXPECT_FALSE(sel.timings[0].ok);
  EXPECT_FALSE(sel.timings[0].failure.empty());
  EXPECT_TRUE(sel.timings[1].ok) << sel.timings[1].failure;
  EXPECT_EQ(sel.chosen, 1);
}

TEST(EstimatedRun, BindsInputsAndOutputsAtTheirEstimates) {
  Blur p(300, 200);
  const Target t = get_host_target();
  model_only_params(t);
  PipelineAnalysis dag(p.outputs(), t);
  EstimatedRun run(dag, p.outputs());
  ASSERT_EQ(run.missing(), "");
  run.bind(7);
  Realization &r = run.outputs();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].width(), 300);
  EXPECT_EQ(r[0].height(), 200);
  EXPECT_EQ(r[0].type(), Float(32));
  // The input holds noise in [0, 1) over its estimated region, the scalar its estimate: the
  // pipeline runs, and its output is what the algorithm says of that input.
  Pipeline(p.out).realize(r, get_jit_target_from_environment());
  Buffer<float> in = p.in.get();
  ASSERT_EQ(in.width(), 300);
  ASSERT_EQ(in.height(), 200);
  Buffer<float> out = r[0];
  const float v = in(10, 11);
  EXPECT_GE(v, 0.0f);
  EXPECT_LT(v, 1.0f);
  EXPECT_NEAR(out(50, 60), Blur::expected(in, 50, 60, 2.0f), 1e-4f);
  EXPECT_NEAR(out(0, 199), Blur::expected(in, 0, 199, 2.0f), 1e-4f);
}

TEST(EstimatedRun, NamesAnInputWithoutAnEstimate) {
  ImageParam in(UInt(8), 2, "no_estimate");
  Func f("f");
  Var x, y;
  f(x, y) = in(x, y) + 1;
  f.set_estimates({{0, 64}, {0, 64}});
  in.dim(0).set_estimate(0, 64); // dimension 1 left out
  const Target t = get_host_target();
  model_only_params(t);
  // The analysis needs only what the output reads; the run needs every dimension.
  try {
    PipelineAnalysis dag({f.function()}, t);
    EstimatedRun run(dag, {f.function()});
    EXPECT_NE(run.missing().find("no_estimate"), std::string::npos) << run.missing();
    EXPECT_NE(run.missing().find("dimension 1"), std::string::npos) << run.missing();
  } catch (const Halide::CompileError &e) {
    // The analysis refusing it first names it as well.
    EXPECT_NE(std::string(e.what()).find("no_estimate"), std::string::npos) << e.what();
  }
}

TEST(HostCpu, ACrossTargetDoesNotRunHere) {
  const HostRun r = host_run(Target("arm-64-linux"));
  EXPECT_FALSE(r.runs);
  EXPECT_NE(r.why_not.find("cross target"), std::string::npos) << r.why_not;
  const HostRun gpu = host_run(get_host_target().with_feature(Target::CUDA));
  EXPECT_FALSE(gpu.runs);
}

TEST(HostCpu, FeaturesTheCpuLacksAreNamedAndLeftOut) {
  const std::vector<Target::Feature> have = host_isa_features();
  Target t = get_host_target();
  for (Target::Feature f : {Target::AVX2, Target::AVX512, Target::AVX512_Skylake,
                            Target::AVX512_Cannonlake, Target::AVX512_SapphireRapids})
    t = t.with_feature(f);
  const HostRun r = host_run(t);
  ASSERT_TRUE(r.runs);
  for (Target::Feature f : {Target::AVX2, Target::AVX512_Skylake, Target::AVX512_SapphireRapids}) {
    const bool has = std::find(have.begin(), have.end(), f) != have.end();
    EXPECT_EQ(r.jit.has_feature(f), has);
    const std::string name = Target().with_feature(f).to_string();
    bool named = false;
    for (const std::string &m : r.missing)
      named |= name.find(m) != std::string::npos;
    EXPECT_EQ(named, !has) << name;
  }
  // What the JIT target keeps, this CPU runs: a pipeline compiled for it runs here.
  Func f;
  Var x;
  f(x) = cast<float>(x) * 0.5f;
  f.vectorize(x, 16);
  Buffer<float> b = f.realize({64}, r.jit);
  EXPECT_EQ(b(10), 5.0f);
}

TEST(StateCodec, RoundTripsAndRefusesWhatDoesNotFit) {
  Blur p;
  const Target t = get_host_target();
  const Parameters params = model_only_params(t);
  PipelineAnalysis dag(p.outputs(), t);
  auto [fast, slow] = fast_and_slow(dag, params);
  StatePtr tiled = register_tiled(dag, *fast, 2);
  ASSERT_TRUE(tiled);
  for (const StatePtr &s : {fast, slow, tiled}) {
    const std::string text = encode_state(*s);
    std::shared_ptr<State> back = decode_state(text, dag);
    ASSERT_TRUE(back);
    EXPECT_EQ(back->choices, s->choices);
    EXPECT_EQ(state_hash(*back), state_hash(*s));
  }
  EXPECT_NE(state_hash(*fast), state_hash(*slow));
  EXPECT_NE(state_hash(*fast), state_hash(*tiled));
  std::string text = encode_state(*fast);
  EXPECT_FALSE(decode_state(text.substr(0, text.size() / 2), dag));        // cut short
  EXPECT_FALSE(decode_state("hkfac-schedule 99 " + text.substr(17), dag)); // another format
  Blur other;
  Func extra("extra");
  extra(other.x, other.y) = other.out(other.x, other.y) + 1;
  extra.set_estimates({{0, 512}, {0, 256}});
  PipelineAnalysis bigger({extra.function()}, t);
  EXPECT_FALSE(decode_state(text, bigger)); // another count of Funcs
}

// A register-tiled schedule computes what the algorithm says, its tails included (the size is
// neither the estimate nor a multiple of the rows), and its source unrolls the rows of every Func
// that took the tile: a plain C++ reference checks every output point.
TEST(RegisterTiles, UnrollRowsAndComputeWhatThePlainScheduleDoes) {
  const Target t = get_host_target();
  for (int which = 0; which < 2; ++which) {
    Blur p;
    const Parameters params = model_only_params(t);
    PipelineAnalysis dag(p.outputs(), t);
    CostModel model(dag, params);
    // The model's pick, and the output with `heavy` at root tiled as it is.
    StatePtr base = which == 0 ? beam_search(dag, model, params).best.front()
                               : fast_and_slow(dag, params).first;
    EXPECT_FALSE(register_tiled(dag, *base, 1));
    StatePtr tiled = register_tiled(dag, *base, 4);
    ASSERT_TRUE(tiled);
    int rows = 0;
    for (const FuncChoice &c : tiled->choices)
      rows += c.pure_rows == 4;
    EXPECT_GE(rows, 1);
    const std::string src = apply_schedule(dag, *tiled, p.outputs(), true);
    size_t unrolled = 0;
    for (size_t at = src.find(".unroll("); at != std::string::npos; at = src.find(".unroll(", at + 1))
      unrolled += src.compare(src.find_first_of(")", at) - 2, 2, "_r") == 0;
    EXPECT_EQ(unrolled, static_cast<size_t>(rows)) << src;
    Buffer<float> in(203, 131);
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(0, 1);
    in.for_each_value([&](float &v) { v = u(rng); });
    p.in.set(in);
    p.gain.set(2.0f);
    Buffer<float> out = p.out.realize({203, 131}, get_jit_target_from_environment());
    int wrong = 0;
    for (int j = 0; j < out.height(); ++j)
      for (int i = 0; i < out.width(); ++i)
        wrong += std::abs(out(i, j) - Blur::expected(in, i, j, 2.0f)) > 1e-4f;
    EXPECT_EQ(wrong, 0) << src;
  }
}

// Halide names Funcs and Vars uniquely per process, so two builds of a pipeline in one process
// differ in names; a generator builds it once per run. Each fingerprint below is taken in a
// process of its own, forked at the same point, as separate generator runs would be.
std::string fingerprint_in_child(const std::function<std::string()> &make) {
  int fds[2];
  if (pipe(fds) != 0)
    return "pipe failed";
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    const std::string k = make();
    (void)!write(fds[1], k.data(), k.size());
    _exit(0);
  }
  close(fds[1]);
  char buf[64] = {};
  const ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
  close(fds[0]);
  waitpid(pid, nullptr, 0);
  return n > 0 ? std::string(buf, n) : "child failed";
}

TEST(PipelineFingerprint, ChangesWithTheAlgorithmTheEstimatesAndTheTarget) {
  const Target t = get_host_target();
  model_only_params(t);
  auto key = [&](int w, float weight, float gain, const Target &target, const std::string &mp) {
    return fingerprint_in_child([=]() {
      Blur p(w, 256, weight);
      p.gain.set_estimate(gain);
      PipelineAnalysis dag(p.outputs(), target);
      return pipeline_fingerprint(dag, p.outputs(), target, mp);
    });
  };
  const std::string mp = "2,16777216,40";
  const std::string k = key(512, 1.0f / 3, 2.0f, t, mp);
  EXPECT_EQ(k.size(), 32u) << k;
  EXPECT_EQ(k, key(512, 1.0f / 3, 2.0f, t, mp));
  EXPECT_NE(k, key(500, 1.0f / 3, 2.0f, t, mp));                            // an estimate
  EXPECT_NE(k, key(512, 0.25f, 2.0f, t, mp));                               // the algorithm
  EXPECT_NE(k, key(512, 1.0f / 3, 3.0f, t, mp));                            // a scalar's estimate
  EXPECT_NE(k, key(512, 1.0f / 3, 2.0f, t, "4,16777216,40"));               // machine_params
  EXPECT_NE(k, key(512, 1.0f / 3, 2.0f, Target("x86-64-linux-sse41"), mp)); // the target
}

// A fresh cache directory per test.
std::string temp_cache_dir(const std::string &name) {
  const std::string dir = std::filesystem::temp_directory_path().string() +
                          "/hkfac_measured_test_" + name + "_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

TuningCache::Sample sample(const std::string &pipeline, int i, double ms) {
  TuningCache::Sample s;
  s.pipeline = pipeline;
  s.schedule = "s" + std::to_string(i);
  s.host = "test host";
  s.target = "x86-64-linux";
  s.features_version = 105;
  s.stages = 1;
  s.featurization.assign((39 + 287) * 4, static_cast<uint8_t>(i));
  s.ms = ms;
  return s;
}

TuningCache::PipelineInfo info(const std::string &key) {
  TuningCache::PipelineInfo p;
  p.key = key;
  p.name = "p";
  return p;
}

TEST(TuningCache, KeepsTheFastestScheduleAndEverySample) {
  const std::string dir = temp_cache_dir("fastest");
  TuningCache cache(dir);
  TuningCache::Schedule slow{"slow", "src slow", 5.0, 7.0, "beam", ""};
  TuningCache::Schedule fast{"fast", "src fast", 3.0, 7.0, "tile", ""};
  cache.record(info("k"), slow, {sample("k", 0, 5.0)});
  cache.record(info("k"), fast, {sample("k", 1, 3.0)});
  cache.record(info("k"), slow, {sample("k", 0, 6.0)}); // slower again: the best stays
  auto best = cache.best_schedule("k");
  ASSERT_TRUE(best);
  EXPECT_EQ(best->encoded, "fast");
  EXPECT_EQ(best->ms, 3.0);
  EXPECT_FALSE(cache.best_schedule("other"));
  const auto samples = cache.samples("test host", 105);
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[0].ms, 5.0); // a schedule timed twice keeps its faster time
  EXPECT_EQ(samples[0].featurization.size(), static_cast<size_t>((39 + 287) * 4));
  cache.clear();
  EXPECT_FALSE(cache.best_schedule("k"));
  EXPECT_EQ(cache.totals().samples, 0);
  std::filesystem::remove_all(dir);
}

// Rows and samples counted with SQLite itself, not through the class under test.
int64_t count_rows(const std::string &path, const std::string &sql) {
  sqlite3 *db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt *st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr), SQLITE_OK);
  int64_t n = -1;
  if (sqlite3_step(st) == SQLITE_ROW)
    n = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return n;
}

std::string integrity(const std::string &path) {
  sqlite3 *db = nullptr;
  sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_stmt *st = nullptr;
  sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, nullptr);
  std::string r = sqlite3_step(st) == SQLITE_ROW
                      ? reinterpret_cast<const char *>(sqlite3_column_text(st, 0))
                      : "no answer";
  sqlite3_finalize(st);
  sqlite3_close(db);
  return r;
}

TEST(TuningCache, ParallelWritersLoseNothing) {
  const std::string dir = temp_cache_dir("parallel");
  { TuningCache create(dir); }
  constexpr int kWriters = 4, kRecords = 25;
  std::vector<pid_t> pids;
  for (int w = 0; w < kWriters; ++w) {
    const pid_t pid = fork();
    if (pid == 0) {
      int status = 0;
      try {
        TuningCache cache(dir);
        for (int r = 0; r < kRecords; ++r) {
          const std::string key = "w" + std::to_string(w) + "r" + std::to_string(r);
          cache.record(info(key), {"e", "s", 1.0 + r, 0, "beam", ""},
                       {sample(key, 0, 1.0), sample(key, 1, 2.0), sample(key, 2, 3.0)});
        }
      } catch (...) {
        status = 1;
      }
      _exit(status);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  const std::string path = dir + "/hkfac-cache.sqlite";
  EXPECT_EQ(count_rows(path, "SELECT count(*) FROM pipelines"), kWriters * kRecords);
  EXPECT_EQ(count_rows(path, "SELECT count(*) FROM samples"), 3 * kWriters * kRecords);
  EXPECT_EQ(integrity(path), "ok");
  std::filesystem::remove_all(dir);
}

TEST(TuningCache, AWriterKilledMidRecordLeavesItWhole) {
  const std::string dir = temp_cache_dir("killed");
  { TuningCache create(dir); }
  // Records of 50 samples each, as fast as they go, until SIGKILL; each is one transaction, so
  // every pipeline row has all 50 samples or the row and its samples are absent.
  for (int trial = 0; trial < 3; ++trial) {
    const pid_t pid = fork();
    if (pid == 0) {
      TuningCache cache(dir);
      for (int r = 0;; ++r) {
        const std::string key = "t" + std::to_string(trial) + "r" + std::to_string(r);
        std::vector<TuningCache::Sample> s;
        for (int i = 0; i < 50; ++i)
          s.push_back(sample(key, i, 1.0 + i));
        cache.record(info(key), {"e", "s", 1.0, 0, "beam", ""}, s);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(150 + 70 * trial));
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  const std::string path = dir + "/hkfac-cache.sqlite";
  EXPECT_EQ(integrity(path), "ok");
  const int64_t rows = count_rows(path, "SELECT count(*) FROM pipelines");
  EXPECT_GT(rows, 0);
  EXPECT_EQ(count_rows(path, "SELECT count(*) FROM samples"), 50 * rows);
  EXPECT_EQ(count_rows(path, "SELECT count(*) FROM (SELECT pipeline FROM samples GROUP BY "
                             "pipeline HAVING count(*) != 50)"),
            0);
  // And it opens and takes records again.
  TuningCache cache(dir);
  cache.record(info("after"), {"e", "s", 1.0, 0, "beam", ""}, {sample("after", 0, 1.0)});
  EXPECT_TRUE(cache.best_schedule("after"));
  std::filesystem::remove_all(dir);
}

// Machine refit: timings this machine "measured" that a different last layer explains (the
// file's conv1 biases shifted, which changes how the cost terms weigh against each other) are
// learned from pipelines and carried to pipelines the refit never saw; timings that are noise
// teach nothing, and the refit is not used.
struct RefitCase {
  std::string dir;
  Parameters params;
  kernels::CostModelWeights base, truth;
};

kernels::CostModelWeights shifted(const kernels::CostModelWeights &w, uint64_t seed) {
  kernels::CostModelWeights t{w.head1_filter.copy(), w.head1_bias.copy(),   w.head2_filter.copy(),
                              w.head2_bias.copy(),   w.conv1_filter.copy(), w.conv1_bias.copy()};
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (int i = 0; i < t.conv1_bias.dim(0).extent(); ++i)
    t.conv1_bias(i) += u(rng) * (1.0f + std::fabs(t.conv1_bias(i)));
  return t;
}

// Pipeline p of a family of blurs (sizes and weights differ), its best `count` schedules under
// the model, featurized, with runtimes from `truth` (or noise when truth is null).
void record_pipeline(TuningCache &cache, int p, const RefitCase &rc,
                     const kernels::CostModelWeights *truth, std::mt19937_64 &rng) {
  Blur b(128 + 64 * p, 96 + 32 * (p % 3), 0.2f + 0.05f * p);
  const Target t = get_host_target();
  PipelineAnalysis dag(b.outputs(), t);
  Parameters search = rc.params;
  search.top_k = 8;
  CostModel model(dag, search);
  const std::vector<StatePtr> states = beam_search(dag, model, search).best;
  ASSERT_GE(states.size(), 4u);
  std::vector<TuningCache::Sample> samples;
  for (size_t i = 0; i < states.size(); ++i) {
    TuningCache::Sample s;
    s.pipeline = "pipeline" + std::to_string(p);
    s.schedule = state_hash(*states[i]);
    s.host = TuningCache::host_id();
    s.target = t.to_string();
    s.features_version = static_cast<int>(hkfac::cost_model::kCpuScheduleFeaturesVersion);
    s.stages = dag.num_stages;
    s.featurization = featurization_bytes(dag, *states[i], rc.params);
    samples.push_back(std::move(s));
  }
  // The "measured" runtimes: truth's predictions of exactly these featurizations.
  const int S = 39, n = static_cast<int>(samples.size()), stages = dag.num_stages;
  hkfac::Buffer<float> pf(40, 7, stages), sf(n, S, stages), pred(n);
  for (int i = 0; i < n; ++i) {
    const float *f = reinterpret_cast<const float *>(samples[i].featurization.data());
    for (int st = 0; st < stages; ++st) {
      const float *row = f + st * (S + 287);
      for (int k = 0; k < S; ++k)
        sf(i, k, st) = row[k];
      for (int a = 0; a < 40; ++a)
        for (int c = 0; c < 7; ++c)
          pf(a, c, st) = row[S + 7 + a * 7 + c];
    }
  }
  if (truth)
    kernels::cost_model_predict(pf, sf, *truth, rc.params.parallelism, pred, hkfac::Device::cpu);
  std::uniform_real_distribution<double> noise(1.0, 10.0);
  for (int i = 0; i < n; ++i)
    samples[i].ms = truth ? pred(i) : noise(rng);
  TuningCache::PipelineInfo info;
  info.key = samples[0].pipeline;
  cache.record(info, {"e", "s", samples[0].ms, 0, "beam", ""}, samples);
}

RefitCase refit_case(const std::string &name) {
  RefitCase rc;
  rc.dir = temp_cache_dir(name);
  rc.params = model_only_params(get_host_target());
  std::string source;
  rc.base = load_plugin_weights(rc.params, 39, source)[0];
  rc.truth = shifted(rc.base, 7);
  return rc;
}

TEST(MachineRefit, LearnsThisMachinesWeighingOfCostsAndCarriesItToUnseenPipelines) {
  RefitCase rc = refit_case("refit_learns");
  TuningCache cache(rc.dir);
  std::mt19937_64 rng(1);
  for (int p = 0; p < 8; ++p)
    record_pipeline(cache, p, rc, &rc.truth, rng);
  std::string note;
  const auto start = std::chrono::steady_clock::now();
  std::optional<MachineRefit> refit = machine_refit(cache, rc.base, rc.params, note);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(refit) << note;
  EXPECT_NE(note.find("(used)"), std::string::npos) << note;
  EXPECT_LT(took, 30) << note;
  // A pipeline it never saw, timed by the same machine: the refit orders it better.
  TuningCache unseen_cache(rc.dir + "_unseen");
  record_pipeline(unseen_cache, 11, rc, &rc.truth, rng);
  auto samples = unseen_cache.samples(TuningCache::host_id(), 105);
  int right_base = 0, right_refit = 0, pairs = 0;
  const int stages = samples[0].stages, n = static_cast<int>(samples.size());
  hkfac::Buffer<float> pf(40, 7, stages), sf(n, 39, stages), pb(n), pr(n);
  for (int i = 0; i < n; ++i) {
    const float *f = reinterpret_cast<const float *>(samples[i].featurization.data());
    for (int st = 0; st < stages; ++st)
      for (int k = 0; k < 39; ++k)
        sf(i, k, st) = f[st * (39 + 287) + k];
    for (int st = 0; st < stages; ++st)
      for (int a = 0; a < 40; ++a)
        for (int c = 0; c < 7; ++c)
          pf(a, c, st) = f[st * (39 + 287) + 39 + 7 + a * 7 + c];
  }
  kernels::cost_model_predict(pf, sf, rc.base, rc.params.parallelism, pb, hkfac::Device::cpu);
  kernels::cost_model_predict(pf, sf, refit->weights, rc.params.parallelism, pr,
                              hkfac::Device::cpu);
  for (int i = 0; i < n; ++i)
    for (int k = i + 1; k < n; ++k) {
      if (samples[i].ms == samples[k].ms)
        continue;
      ++pairs;
      const bool faster = samples[i].ms < samples[k].ms;
      right_base += (pb(i) < pb(k)) == faster;
      right_refit += (pr(i) < pr(k)) == faster;
    }
  ASSERT_GT(pairs, 0);
  EXPECT_GE(right_refit, right_base) << note;
  // Kept with its sample count: a second search uses it without fitting again.
  std::string again;
  const auto start2 = std::chrono::steady_clock::now();
  EXPECT_TRUE(machine_refit(cache, rc.base, rc.params, again));
  EXPECT_EQ(again, note);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start2).count(), 1.0);
  std::filesystem::remove_all(rc.dir);
  std::filesystem::remove_all(rc.dir + "_unseen");
}

TEST(MachineRefit, NoiseTeachesNothingAndTooFewPipelinesAreNotFitted) {
  RefitCase rc = refit_case("refit_noise");
  TuningCache cache(rc.dir);
  std::mt19937_64 rng(2);
  for (int p = 0; p < kMinPipelines - 1; ++p)
    record_pipeline(cache, p, rc, nullptr, rng);
  std::string note;
  EXPECT_FALSE(machine_refit(cache, rc.base, rc.params, note));
  EXPECT_EQ(note, ""); // too few: nothing to say
  for (int p = kMinPipelines - 1; p < 8; ++p)
    record_pipeline(cache, p, rc, nullptr, rng);
  EXPECT_FALSE(machine_refit(cache, rc.base, rc.params, note)) << note;
  EXPECT_NE(note.find("not used"), std::string::npos) << note;
  std::filesystem::remove_all(rc.dir);
}

} // namespace
