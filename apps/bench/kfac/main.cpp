// K-FAC step cost relative to a plain SGD step on the autoencoder, split by phase.
//
// Both optimizers run the same model on the same kernels and the same batches. Steps alternate
// (K-FAC, SGD, K-FAC, ...) so load drift on a shared machine hits both alike. The inverse runs
// every inverse_update_period steps, so steps are grouped into windows of one period: a window's
// ratio is Σ K-FAC time / Σ SGD time (the amortised ratio), and the table reports medians over
// windows. Usage: kfac_bench [windows=4] [fashion_mnist_dir] [batch=128].
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cli.h"
#include "data.h"
#include "hkfac/allocator.h"
#include "hkfac/kfac/layers.h"
#include "hkfac/kfac/optimizer.h"

namespace {

using hkfac::kfac::Activation;
using hkfac::kfac::Batch;
using hkfac::kfac::Matrix;
using hkfac::kfac::Params;

// The autoencoder app's network: encoder 1000-500-250-30, mirrored decoder, tanh but for the code
// and output layers.
hkfac::kfac::Sequential build_autoencoder(int dim) {
  hkfac::kfac::Sequential m(dim);
  int width = dim;
  for (int w : {1000, 500, 250}) {
    m.add<hkfac::kfac::Dense>(width, w, Activation::tanh);
    width = w;
  }
  m.add<hkfac::kfac::Dense>(width, 30);
  width = 30;
  for (int w : {250, 500, 1000}) {
    m.add<hkfac::kfac::Dense>(width, w, Activation::tanh);
    width = w;
  }
  m.add<hkfac::kfac::Dense>(width, dim);
  return m;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

struct Row {
  std::string name;
  double sgd_ms, kfac_ms, per_step_ratio, amortised_ratio;
  double fwd_bwd, curvature, inverse, precondition, other; // each / SGD time, amortised
  double precondition_flop_ratio; // arithmetic, not a measurement (see below)
};

// Flops of preconditioning every dense layer (A⁻¹ V G⁻¹: 2(i+1)²o + 2(i+1)o²) over the flops of
// an SGD step's forward and backward passes (6n(i+1)o), for i x o weights and batch n. It is
// the precondition phase's cost in SGD steps if both ran at the same GFLOP/s; the precondition's
// square GEMMs usually run faster than the batch-thin ones of an SGD step.
double precondition_flop_ratio(const hkfac::kfac::Model &m, int n) {
  double pre = 0, sgd = 0;
  for (const hkfac::kfac::ParamShape &p : m.param_shapes()) {
    if (p.rows <= 1)
      continue; // a bias: part of its weight's homogeneous row
    const double i = p.rows + 1.0, o = p.cols;
    pre += 2 * i * i * o + 2 * i * o * o;
    sgd += 6.0 * n * i * o;
  }
  return pre / sgd;
}

Row measure(const std::string &name, autoencoder::Dataset &data, bool images, int windows,
            int batch_size) {
  const float l2 = 1e-3f;
  hkfac::kfac::ValueFunction value = [images](const Matrix &out, const Batch &batch,
                                              hkfac::kfac::ValueContext &ctx) {
    if (images) {
      ctx.losses().register_multi_bernoulli_predictive_distribution(out, &batch.targets);
    } else {
      ctx.losses().register_squared_error_loss(out, &batch.targets);
    }
  };
  hkfac::kfac::Sequential kfac_model = build_autoencoder(data.dim());
  hkfac::kfac::Sequential sgd_model = build_autoencoder(data.dim());
  std::mt19937 rng(12412321);
  Params kfac_params = kfac_model.init_params(rng);
  Params sgd_params = kfac_params;

  hkfac::kfac::OptimizerOptions o;
  o.l2_reg = l2;
  hkfac::kfac::Optimizer opt(kfac_model, value, o);
  const int period = o.inverse_update_period;
  hkfac::kfac::StepValues v;
  v.learning_rate = 1e-3;
  v.momentum = 0.0; // the default 0.8 diverges on random data (see docs); cost is the same
  v.damping = 1e-2;

  Params velocity = hkfac::kfac::zeros_like(sgd_params);
  auto sgd_step = [&](const Batch &batch) {
    const Matrix out = sgd_model.forward(sgd_params, batch);
    hkfac::kfac::LossRegistry losses;
    hkfac::kfac::ValueContext ctx(losses, nullptr, nullptr, false);
    value(out, batch, ctx);
    Params grad =
        sgd_model.backward(losses.total_gradient() / static_cast<float>(batch.inputs.rows()));
    hkfac::kfac::axpy(l2, sgd_params, grad);
    hkfac::kfac::scale(0.8f, velocity);
    hkfac::kfac::axpy(-1e-3f, grad, velocity);
    hkfac::kfac::axpy(1.0f, velocity, sgd_params);
  };

  // Warm-up: the first K-FAC step runs the burn-in; then align to the start of a period.
  auto next = [&]() { return data.next_batch(batch_size); };
  for (int s = 0; s < period; ++s) {
    opt.step(kfac_params, next, v);
    sgd_step(next());
  }

  std::vector<double> step_ratios, window_ratios, sgd_times, kfac_times;
  std::vector<double> fb, cu, inv, pre, other;
  for (int w = 0; w < windows; ++w) {
    double k_sum = 0, s_sum = 0, fb_sum = 0, cu_sum = 0, inv_sum = 0, pre_sum = 0;
    for (int s = 0; s < period; ++s) {
      const Batch kb = next(), sb = next();
      auto t = std::chrono::steady_clock::now();
      const hkfac::kfac::StepStats st = opt.step(
          kfac_params, [&]() { return kb; }, v);
      const double k = seconds_since(t);
      t = std::chrono::steady_clock::now();
      sgd_step(sb);
      const double sg = seconds_since(t);
      step_ratios.push_back(k / sg);
      k_sum += k;
      s_sum += sg;
      fb_sum += st.timings.forward_backward_s;
      cu_sum += st.timings.curvature_update_s;
      inv_sum += st.timings.inverse_s;
      pre_sum += st.timings.precondition_s;
    }
    window_ratios.push_back(k_sum / s_sum);
    sgd_times.push_back(s_sum / period);
    kfac_times.push_back(k_sum / period);
    fb.push_back(fb_sum / s_sum);
    cu.push_back(cu_sum / s_sum);
    inv.push_back(inv_sum / s_sum);
    pre.push_back(pre_sum / s_sum);
    other.push_back((k_sum - fb_sum - cu_sum - inv_sum - pre_sum) / s_sum);
  }
  return {name,
          1e3 * median(sgd_times),
          1e3 * median(kfac_times),
          median(step_ratios),
          median(window_ratios),
          median(fb),
          median(cu),
          median(inv),
          median(pre),
          median(other),
          precondition_flop_ratio(kfac_model, batch_size)};
}

constexpr const char *kUsage =
    "usage: kfac_bench [WINDOWS (>= 1, default 4) [FASHION_MNIST_DIR (default "
    "/usr/share/datasets/fashion-mnist) [BATCH (>= 1, default 128)]]]";

// A command-line mistake: the message, the usage line, exit status 2.
int usage_error(const std::string &message) {
  std::fprintf(stderr, "kfac_bench: %s\n%s\n", message.c_str(), kUsage);
  return 2;
}

std::string load_line() {
  std::ifstream f("/proc/loadavg");
  std::string s;
  std::getline(f, s);
  return s;
}

} // namespace

int main(int argc, char **argv) {
  hkfac::retain_freed_memory();             // as the autoencoder app does
  std::setvbuf(stdout, nullptr, _IOLBF, 0); // progress through a pipe as it is printed
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("kfac_bench: K-FAC step time / SGD step time on the autoencoder, by phase.\n%s\n",
                  kUsage);
      return 0;
    }
    if (a.rfind("-", 0) == 0)
      return usage_error("unknown option '" + a + "' (the arguments are positional)");
  }
  if (argc > 4)
    return usage_error(std::string("unexpected argument '") + argv[4] + "'");
  const std::optional<int> windows = argc > 1 ? hkfac::apps::parse_int(argv[1]) : 4;
  if (!windows || *windows < 1)
    return usage_error(std::string("bad WINDOWS '") + argv[1] + "': need an integer >= 1");
  const std::string mnist_dir = argc > 2 ? argv[2] : "/usr/share/datasets/fashion-mnist";
  const std::optional<int> batch = argc > 3 ? hkfac::apps::parse_int(argv[3]) : 128;
  if (!batch || *batch < 1)
    return usage_error(std::string("bad BATCH '") + argv[3] + "': need an integer >= 1");
  try {
    std::printf("kfac_bench: autoencoder, batch %d, inverse_update_period 5, %d windows of 5 "
                "interleaved K-FAC/SGD steps; load average before: %s\n",
                *batch, *windows, load_line().c_str());
    std::vector<Row> rows;
    // Both loaded first, so that a bad data directory fails before minutes of measuring.
    autoencoder::Dataset random = autoencoder::Dataset::load("random", "", 12412321);
    autoencoder::Dataset images = autoencoder::Dataset::load("fashion_mnist", mnist_dir, 12412321);
    rows.push_back(measure("random (20-dim, squared error)", random, false, *windows, *batch));
    rows.push_back(measure("Fashion-MNIST (784-dim, sigmoid CE)", images, true, *windows, *batch));
    std::printf("load average after: %s\n\n", load_line().c_str());
    std::printf("| data | SGD step (ms) | K-FAC step (ms, amortised) | K-FAC/SGD per step (median) "
                "| K-FAC/SGD amortised (median) | fwd/bwd | curvature update | inverse | "
                "precondition | other (rho, update) | precondition flops / SGD flops |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const Row &r : rows) {
      std::printf("| %s | %.1f | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n",
                  r.name.c_str(), r.sgd_ms, r.kfac_ms, r.per_step_ratio, r.amortised_ratio,
                  r.fwd_bwd, r.curvature, r.inverse, r.precondition, r.other,
                  r.precondition_flop_ratio);
    }
    std::printf("\nPhase columns: amortised phase time / SGD step time (they sum to the amortised "
                "ratio up to medians).\n");
  } catch (const std::exception &e) {
    std::fprintf(stderr, "kfac_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
