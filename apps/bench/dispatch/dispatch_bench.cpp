// What the runtime's dispatch adds to a kernel call, for the small calls a search or a small
// model makes thousands of times a second: each case times the public hkfac::kernels function
// (argument and overlap checks, alignment staging, device choice, the variant choice) against the
// generated function it ends in, called directly on the same buffers. Google Benchmark runs the
// repetitions of all cases in random order (interleaved, BENCHMARKS.md), and a reporter pairs
// repetition i of "dispatch" with repetition i of "direct" to print the median per-pair ratio.
//
// Before timing, each pair's outputs are compared bit for bit, so the direct call is the one the
// dispatch makes at that shape (a different variant or padding would show as a mismatch).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "hkfac/buffer.h"
#include "hkfac/buffer_values.h"
#include "hkfac/kernels/cost_model.h"
#include "hkfac/kernels/covariance.h"
#include "hkfac_k_cost_model_predict_s39_cpu.h"
#include "hkfac_k_cost_model_train_s39_cpu.h"
#include "hkfac_k_covariance_update_small_cpu.h"

namespace {

using hkfac::Buffer;
using hkfac::kernels::CostModelWeights;

Buffer<float> random_buffer(const std::vector<int> &extents, unsigned seed, float lo, float hi) {
  Buffer<float> b(extents); // Halide's allocation: aligned, so the direct calls need no staging
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  hkfac::for_each_value(b, [&](float &v) { v = u(rng); });
  return b;
}

// The values of buffers, back to back (a deep copy: Halide buffers share storage when copied).
std::vector<float> values(std::initializer_list<const Buffer<float> *> buffers) {
  std::vector<float> v;
  for (const Buffer<float> *b : buffers)
    v.insert(v.end(), b->data(), b->data() + b->number_of_elements());
  return v;
}

void check(int rc, const char *what) {
  if (rc != 0)
    throw std::runtime_error(std::string(what) + ": the generated function returned " +
                             std::to_string(rc));
}

// The cost model at a search's sizes: S = 39 (CPU features), 10 stages, weights in [0, 1] as the
// kernel tests use, schedule features as positive counts.
struct CostModelCase {
  Buffer<float> pipeline, schedules, predictions, runtimes, cotangent;
  CostModelWeights w;
  hkfac::kernels::CostModelTrainOutputs out;
  explicit CostModelCase(int batch) {
    constexpr int kStages = 10;
    pipeline = random_buffer({40, 7, kStages}, 1, 0.0f, 4.0f);
    schedules = random_buffer({batch, 39, kStages}, 2, 0.0f, 1000.0f);
    predictions = Buffer<float>(batch);
    runtimes = random_buffer({batch}, 3, 0.5f, 2.0f);
    cotangent = Buffer<float>(batch);
    hkfac::fill(cotangent, 0.0f);
    w = {random_buffer({8, 40, 7}, 4, 0.0f, 1.0f), random_buffer({8}, 5, 0.0f, 1.0f),
         random_buffer({24, 39}, 6, 0.0f, 1.0f),   random_buffer({24}, 7, 0.0f, 1.0f),
         random_buffer({32, 32}, 8, 0.0f, 1.0f),   random_buffer({32}, 9, 0.0f, 1.0f)};
    // Let the dispatch shape the training outputs once; the direct call writes into the same.
    hkfac::kernels::cost_model_train(pipeline, schedules, w, 2, runtimes, cotangent, 1.0f, 1.0f,
                                     out, hkfac::Device::cpu);
  }
  void predict_dispatch() {
    hkfac::kernels::cost_model_predict(pipeline, schedules, w, 2, predictions, hkfac::Device::cpu);
  }
  void predict_direct() {
    check(hkfac_k_cost_model_predict_s39_cpu(
              in_raw(pipeline), in_raw(schedules), in_raw(w.head1_filter), in_raw(w.head1_bias),
              in_raw(w.head2_filter), in_raw(w.head2_bias), in_raw(w.conv1_filter),
              in_raw(w.conv1_bias), 2, predictions.raw_buffer()),
          "cost_model_predict_s39");
  }
  void train_dispatch() {
    hkfac::kernels::cost_model_train(pipeline, schedules, w, 2, runtimes, cotangent, 1.0f, 1.0f,
                                     out, hkfac::Device::cpu);
  }
  void train_direct() {
    auto &g = out.grads;
    check(hkfac_k_cost_model_train_s39_cpu(
              in_raw(pipeline), in_raw(schedules), in_raw(w.head1_filter), in_raw(w.head1_bias),
              in_raw(w.head2_filter), in_raw(w.head2_bias), in_raw(w.conv1_filter),
              in_raw(w.conv1_bias), 2, in_raw(runtimes), in_raw(cotangent), 1.0f, 1.0f,
              out.loss.raw_buffer(), out.predictions.raw_buffer(), g.head1_filter.raw_buffer(),
              g.head1_bias.raw_buffer(), g.head2_filter.raw_buffer(), g.head2_bias.raw_buffer(),
              g.conv1_filter.raw_buffer(), g.conv1_bias.raw_buffer(),
              out.head1_out_grad.raw_buffer(), out.head2_input.raw_buffer(),
              out.head2_out_grad.raw_buffer(), out.conv1_input.raw_buffer(),
              out.conv1_out_grad.raw_buffer()),
          "cost_model_train_s39");
  }
  // Generated functions take non-const buffers; they never write their inputs.
  static halide_buffer_t *in_raw(const Buffer<float> &b) {
    return const_cast<halide_buffer_t *>(b.raw_buffer());
  }
};

// A small layer's factor update (20 inputs and the ones column, batch 128): the untiled variant.
struct CovarianceCase {
  Buffer<float> x, c;
  CovarianceCase() : x(random_buffer({20, 128}, 10, -1.0f, 1.0f)), c(identity(21)) {}
  static Buffer<float> identity(int d) {
    Buffer<float> m = hkfac::make_matrix<float>(d, d); // zero-filled
    for (int i = 0; i < d; ++i)
      m(i, i) = 1.0f;
    return m;
  }
  void dispatch() {
    hkfac::kernels::covariance_update(c, x, 0.95f, 0.05f / 128, true, hkfac::Device::cpu);
  }
  void direct() {
    check(hkfac_k_covariance_update_small_cpu(c.raw_buffer(),
                                              const_cast<halide_buffer_t *>(x.raw_buffer()), 0.95f,
                                              0.05f / 128, c.raw_buffer()),
          "covariance_update_small");
  }
};

// Runs `first`, keeps its outputs, restores the case's state, runs `second` and demands the same
// bits: the direct call must be the work the dispatch does at this shape.
template <typename Case>
void expect_same(const char *name, Case &c, void (Case::*first)(), void (Case::*second)(),
                 const std::function<std::vector<float>(Case &)> &outputs,
                 const std::function<void(Case &)> &restore) {
  restore(c);
  (c.*first)();
  const std::vector<float> a = outputs(c);
  restore(c);
  (c.*second)();
  const std::vector<float> b = outputs(c);
  if (a.size() != b.size() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0) {
    throw std::runtime_error(std::string(name) +
                             ": the direct call's output differs from the dispatch's; the "
                             "benchmark would not compare the same work");
  }
}

// Pairs repetition i of "<case>/dispatch" with repetition i of "<case>/direct" (Google Benchmark
// names repetitions by the benchmark and reports them in the order they ran per benchmark).
class PairReporter : public benchmark::ConsoleReporter {
public:
  // Plain text: the table below is meant to be pasted (docs/RESULTS.md).
  PairReporter() : ConsoleReporter(OO_None) {}
  void ReportRuns(const std::vector<Run> &runs) override {
    for (const Run &r : runs) {
      if (r.run_type != Run::RT_Iteration || r.error_occurred)
        continue;
      // Seconds per call over the unit's multiplier, in µs.
      times_[r.run_name.function_name].push_back(
          r.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(r.time_unit) * 1e6);
    }
    ConsoleReporter::ReportRuns(runs);
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\n| case | dispatch µs (median) | direct µs (median) | difference µs | "
                "dispatch time / direct time (median of pairs) |\n|---|---:|---:|---:|---:|\n");
    for (const auto &[name, dispatch] : times_) {
      const std::string suffix = "/dispatch";
      if (name.size() < suffix.size() ||
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
        continue;
      const std::string base = name.substr(0, name.size() - suffix.size());
      auto it = times_.find(base + "/direct");
      if (it == times_.end())
        continue;
      const std::vector<double> &direct = it->second;
      const size_t n = std::min(dispatch.size(), direct.size());
      std::vector<double> ratios;
      for (size_t i = 0; i < n; ++i)
        ratios.push_back(dispatch[i] / direct[i]);
      const double md = median(dispatch), mr = median(direct);
      std::printf("| %s | %.2f | %.2f | %.2f | %.3f |\n", base.c_str(), md, mr, md - mr,
                  median(ratios));
    }
  }

private:
  static double median(std::vector<double> v) {
    if (v.empty())
      return 0.0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  }
  std::map<std::string, std::vector<double>> times_;
};

template <typename Case> void time_calls(benchmark::State &state, Case &c, void (Case::*call)()) {
  for (auto _ : state) {
    (c.*call)();
    benchmark::ClobberMemory();
  }
}

} // namespace

int main(int argc, char **argv) {
  // Repetitions in random order unless the command line says otherwise.
  std::vector<char *> args(argv, argv + argc);
  std::string reps = "--benchmark_repetitions=15",
              shuffle = "--benchmark_enable_random_interleaving=true";
  args.insert(args.begin() + 1, {reps.data(), shuffle.data()});
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data()))
    return 2;
  try {
    static CostModelCase predict16(16), predict128(128), train16(16);
    static CovarianceCase cov;
    auto predictions = [](CostModelCase &c) { return values({&c.predictions}); };
    auto train_outputs = [](CostModelCase &c) {
      const auto &o = c.out;
      return values({&o.loss, &o.predictions, &o.grads.head1_filter, &o.grads.head1_bias,
                     &o.grads.head2_filter, &o.grads.head2_bias, &o.grads.conv1_filter,
                     &o.grads.conv1_bias, &o.head1_out_grad, &o.head2_input, &o.head2_out_grad,
                     &o.conv1_input, &o.conv1_out_grad});
    };
    auto nothing = [](CostModelCase &) {}; // the cost model's outputs are overwritten whole
    expect_same<CostModelCase>("cost_model_predict batch 16", predict16,
                               &CostModelCase::predict_dispatch, &CostModelCase::predict_direct,
                               predictions, nothing);
    expect_same<CostModelCase>("cost_model_predict batch 128", predict128,
                               &CostModelCase::predict_dispatch, &CostModelCase::predict_direct,
                               predictions, nothing);
    expect_same<CostModelCase>("cost_model_train batch 16", train16, &CostModelCase::train_dispatch,
                               &CostModelCase::train_direct, train_outputs, nothing);
    // The update accumulates into C: each side starts from the identity.
    expect_same<CovarianceCase>(
        "covariance_update d=21 n=128", cov, &CovarianceCase::dispatch, &CovarianceCase::direct,
        [](CovarianceCase &c) { return values({&c.c}); },
        [](CovarianceCase &c) { c.c = CovarianceCase::identity(21); });

    auto reg = [](const char *name, auto &c, auto call) {
      benchmark::RegisterBenchmark(name, [&c, call](benchmark::State &s) {
        time_calls(s, c, call);
      })->Unit(benchmark::kMicrosecond);
    };
    reg("cost_model_predict S=39 10 stages batch 16/dispatch", predict16,
        &CostModelCase::predict_dispatch);
    reg("cost_model_predict S=39 10 stages batch 16/direct", predict16,
        &CostModelCase::predict_direct);
    reg("cost_model_predict S=39 10 stages batch 128/dispatch", predict128,
        &CostModelCase::predict_dispatch);
    reg("cost_model_predict S=39 10 stages batch 128/direct", predict128,
        &CostModelCase::predict_direct);
    reg("cost_model_train S=39 10 stages batch 16/dispatch", train16,
        &CostModelCase::train_dispatch);
    reg("cost_model_train S=39 10 stages batch 16/direct", train16, &CostModelCase::train_direct);
    reg("covariance_update d=21 n=128 homog/dispatch", cov, &CovarianceCase::dispatch);
    reg("covariance_update d=21 n=128 homog/direct", cov, &CovarianceCase::direct);
    PairReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    benchmark::Shutdown();
  } catch (const std::exception &e) {
    std::fprintf(stderr, "dispatch_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
