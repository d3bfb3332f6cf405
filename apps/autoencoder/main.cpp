// Deep autoencoder trained with K-FAC, Adam or SGD: kfac_ferminet_alpha's example, in C++.
//
// Encoder 1000-500-250-30, mirrored decoder, Glorot-uniform weights, tanh everywhere but the code
// and output layers. Random data (20-dimensional) uses a squared-error loss; Fashion-MNIST
// (784 pixels) a sigmoid cross-entropy. All optimizers run the same model on the same kernels, so
// their curves compare fairly. Writes the loss curve as CSV and PNG.
#include <absl/flags/flag.h>
#include <absl/flags/reflection.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>
#include <utility>
#include <vector>

#include "hkfac/kfac/adam.h"
#include "cli.h"
#include "data.h"
#include "flags.h"
#include "hkfac/allocator.h"
#include "hkfac/error.h"
#include "hkfac/kfac/layers.h"
#include "hkfac/kfac/optimizer.h"
#include "loss_plot.h"
#include "multi_device.h"

ABSL_FLAG(int, training_steps, 100, "Number of optimizer steps");
ABSL_FLAG(int, batch_size, 128, "Examples per mini-batch");
ABSL_FLAG(double, learning_rate, 1e-3, "Learning rate");
ABSL_FLAG(double, l2_reg, 1e-3, "L2 regularisation coefficient (l2/2 * ||params||^2)");
ABSL_FLAG(double, momentum, 0.8, "Momentum (K-FAC and SGD; Adam's beta1 is 0.9)");
ABSL_FLAG(double, damping, 1e-2, "K-FAC damping");
ABSL_FLAG(bool, multi_device, false,
          "K-FAC: data-parallel training across the ranks of an MPI job (mpirun -np N "
          "autoencoder --multi_device): --batch_size is the global batch, each rank steps on its "
          "share, rank 0 logs and writes the outputs");
ABSL_FLAG(bool, serial_kernels, false,
          "K-FAC: run every kernel and the factor inverses on the calling thread (one thread per "
          "rank under mpirun)");
ABSL_FLAG(bool, distributed_inverses, false,
          "K-FAC with --multi_device: each rank inverts a share of the curvature blocks and "
          "broadcasts them");
ABSL_FLAG(int, seed, 12412321, "Random seed");
ABSL_FLAG(std::string, data, "random", "random | fashion_mnist");
ABSL_FLAG(std::string, data_dir, "/usr/share/datasets/fashion-mnist",
          "Directory with the Fashion-MNIST idx files");
ABSL_FLAG(std::string, optimizer, "kfac", "kfac | adam | sgd");
ABSL_FLAG(std::string, estimation_mode, "fisher_gradients", "K-FAC curvature estimation mode");
ABSL_FLAG(bool, use_adaptive_damping, false,
          "K-FAC: Levenberg-Marquardt damping from the reduction ratio rho");
ABSL_FLAG(bool, use_adaptive_learning_rate, false,
          "K-FAC: learning rate from the quadratic model each step (--learning_rate is ignored)");
ABSL_FLAG(bool, use_adaptive_momentum, false,
          "K-FAC: momentum from the quadratic model too (needs --use_adaptive_learning_rate; "
          "--momentum is ignored)");
ABSL_FLAG(int, curvature_update_period, 1, "K-FAC: steps between curvature (factor) updates");
ABSL_FLAG(double, norm_constraint, 0.0, "K-FAC: bound (> 0) on lr^2 <u, g> (0 = no constraint)");
ABSL_FLAG(int, curvature_batch_size, 0,
          "K-FAC: examples of each batch the curvature is estimated on, at most --batch_size "
          "(0 = all)");
ABSL_FLAG(int, inverse_update_period, 5, "K-FAC: steps between factor inverse updates");
ABSL_FLAG(double, min_damping, 1e-8, "K-FAC: lower bound of adaptive damping");
ABSL_FLAG(double, curvature_ema, 0.95,
          "K-FAC: weight of the old curvature estimate in each update (after burn-in)");
ABSL_FLAG(std::string, save_checkpoint, "",
          "K-FAC: write the parameters and the optimizer's state here when training ends");
ABSL_FLAG(int, checkpoint_every, 0,
          "K-FAC: also write --save_checkpoint every this many steps, with the clock paused "
          "(0 = only at the end)");
ABSL_FLAG(std::string, load_checkpoint, "",
          "K-FAC: resume from a --save_checkpoint file of a run with the same flags; the data "
          "continue where that run stopped, and --training_steps more steps are taken");
ABSL_FLAG(int, log_every, 10, "Print progress every this many steps");
ABSL_FLAG(double, max_seconds, 0.0, "Stop after this much training time (0 = no limit)");
ABSL_FLAG(std::string, csv, "autoencoder_loss.csv", "Loss-curve CSV output path");
ABSL_FLAG(std::string, png, "autoencoder_loss.png", "Loss-curve PNG output path");
ABSL_FLAG(double, eval_every_seconds, 0.0,
          "Evaluate the objective on a fixed set every this many seconds of training, with the "
          "clock paused (0 = never)");
ABSL_FLAG(int, eval_examples, 10000, "Size of the fixed evaluation set: the first examples");
ABSL_FLAG(std::string, eval_csv, "autoencoder_eval.csv",
          "Evaluation CSV output path (step,seconds,loss), when --eval_every_seconds > 0");

namespace {

using hkfac::apps::BatchShard;
using hkfac::apps::finite_float;
using hkfac::apps::shard_batches;
using hkfac::apps::require_flag;
using hkfac::kfac::Activation;
using hkfac::kfac::Matrix;
using hkfac::kfac::Params;

hkfac::kfac::Sequential build_autoencoder(int dim) {
  hkfac::kfac::Sequential m(dim);
  const int encoder[] = {1000, 500, 250};
  int width = dim;
  for (int w : encoder) {
    m.add<hkfac::kfac::Dense>(width, w, Activation::tanh);
    width = w;
  }
  m.add<hkfac::kfac::Dense>(width, 30); // the code layer: linear
  width = 30;
  for (int w : {250, 500, 1000}) {
    m.add<hkfac::kfac::Dense>(width, w, Activation::tanh);
    width = w;
  }
  m.add<hkfac::kfac::Dense>(width, dim); // output (logits or means): linear
  return m;
}

// Registers the reconstruction loss: squared error for random data, sigmoid cross-entropy for
// images in [0, 1].
hkfac::kfac::ValueFunction reconstruction_loss(bool images) {
  return
      [images](const Matrix &out, const hkfac::kfac::Batch &batch, hkfac::kfac::ValueContext &ctx) {
        if (images) {
          ctx.losses().register_multi_bernoulli_predictive_distribution(out, &batch.targets);
        } else {
          ctx.losses().register_squared_error_loss(out, &batch.targets);
        }
      };
}

// Forward pass on `batch` with the losses registered (per-example values and gradients).
hkfac::kfac::LossRegistry forward_losses(hkfac::kfac::Sequential &model,
                                         const hkfac::kfac::ValueFunction &value,
                                         const Params &params, const hkfac::kfac::Batch &batch) {
  const Matrix out = model.forward(params, batch);
  hkfac::kfac::LossRegistry losses;
  hkfac::kfac::ValueContext ctx(losses, nullptr, nullptr, false);
  value(out, batch, ctx);
  return losses;
}

// The objective (1/N) Σ loss_i + l2/2·||θ||² over a fixed set, forward passes only, in chunks
// so that memory stays that of a mini-batch. The mini-batch losses of the curve carry sampling
// noise of a unit or two on Fashion-MNIST; this reading does not.
double evaluate_objective(hkfac::kfac::Sequential &model, const hkfac::kfac::ValueFunction &value,
                          const Params &params, const autoencoder::Dataset &data, int examples,
                          double l2) {
  const int n = std::min(examples, data.size()), chunk = 1000;
  double total = 0.0;
  for (int first = 0; first < n; first += chunk) {
    const hkfac::kfac::Batch b = data.slice(first, std::min(chunk, n - first));
    total += forward_losses(model, value, params, b).total_values().cast<double>().sum();
  }
  return total / n + 0.5 * l2 * hkfac::kfac::squared_norm(params);
}

// Loss and gradient of (1/B) Σ loss_i + l2/2·||θ||² for the first-order optimizers.
double loss_and_gradient(hkfac::kfac::Sequential &model, const hkfac::kfac::ValueFunction &value,
                         const Params &params, const hkfac::kfac::Batch &batch, double l2,
                         Params &grad) {
  const hkfac::kfac::LossRegistry losses = forward_losses(model, value, params, batch);
  const float inv_b = 1.0f / static_cast<float>(batch.inputs.rows());
  grad = model.backward(losses.total_gradient() * inv_b);
  hkfac::kfac::axpy(static_cast<float>(l2), params, grad);
  return losses.total_values().mean() + 0.5 * l2 * hkfac::kfac::squared_norm(params);
}

// The payload each rank handed to the collectives per step, by phase, over the steps after the
// first (the model behind RESULTS.md#mpi-k-fac).
void report_traffic(const hkfac::kfac::Communicator &comm, int steps) {
  double total = 0.0;
  std::printf("communicated per step and rank, steps after the first (%d):", steps);
  for (const auto &[phase, t] : comm.traffic()) {
    std::printf("  %s %.0f B in %.2f calls,", phase.c_str(), double(t.bytes) / steps,
                double(t.calls) / steps);
    total += double(t.bytes) / steps;
  }
  std::printf("  total %.0f B\n", total);
}

// The flags a run's losses depend on, as "name=value" lines: saved with each checkpoint and
// compared when one is loaded, since the optimizer cannot see them (the batch size, the data and
// its seed) or, for its options, takes the resuming run's as given. The step count, time limits,
// logging and output paths may differ.
std::string run_settings() {
  static const char *const kNames[] = {"batch_size",
                                       "learning_rate",
                                       "l2_reg",
                                       "momentum",
                                       "damping",
                                       "seed",
                                       "data",
                                       "data_dir",
                                       "estimation_mode",
                                       "use_adaptive_damping",
                                       "use_adaptive_learning_rate",
                                       "use_adaptive_momentum",
                                       "curvature_update_period",
                                       "norm_constraint",
                                       "curvature_batch_size",
                                       "inverse_update_period",
                                       "min_damping",
                                       "curvature_ema"};
  std::string text;
  for (const char *name : kNames) {
    const absl::CommandLineFlag *flag = absl::FindCommandLineFlag(name);
    if (!flag)
      throw hkfac::Error(std::string("internal: no flag --") + name);
    text += std::string(name) + "=" + flag->CurrentValue() + "\n";
  }
  return text;
}

// Refuses to resume from a checkpoint saved with other run_settings, naming each difference; a
// checkpoint without recorded settings (an older file) is resumed with a note.
void check_resume_settings(const std::string &path, const std::string &saved) {
  if (saved.empty()) {
    std::printf("note: %s records no run settings (an older checkpoint); the flags are not "
                "compared\n",
                path.c_str());
    return;
  }
  auto parse = [](const std::string &text) {
    std::vector<std::pair<std::string, std::string>> kv;
    std::istringstream is(text);
    for (std::string line; std::getline(is, line);) {
      const size_t eq = line.find('=');
      kv.push_back({line.substr(0, eq), eq == std::string::npos ? "" : line.substr(eq + 1)});
    }
    return kv;
  };
  const auto then = parse(saved), now = parse(run_settings());
  std::string differences;
  for (const auto &[name, value] : now) {
    const auto it = std::find_if(then.begin(), then.end(),
                                 [&, n = name](const auto &p) { return p.first == n; });
    const std::string was = it == then.end() ? "(not recorded)" : it->second;
    if (was != value)
      differences += "\n  --" + name + ": the checkpoint's run had " + was + ", this run " + value;
  }
  if (!differences.empty()) {
    throw hkfac::Error("--load_checkpoint: " + path +
                       " was saved by a run with other settings, and resuming would not continue "
                       "it; pass the same flags:" +
                       differences);
  }
}

// Checks every flag, the unselected optimizer's too, and that the outputs can be written, before
// any data is read or training starts; errors name the flag.
void check_flags() {
  const int steps = absl::GetFlag(FLAGS_training_steps);
  const int batch_size = absl::GetFlag(FLAGS_batch_size);
  if (absl::GetFlag(FLAGS_multi_device)) {
    require_flag(hkfac::kfac::mpi_available(), "--multi_device", "true",
                 "false: this build has no MPI (configure with HKFAC_MPI=ON)");
    require_flag(absl::GetFlag(FLAGS_optimizer) == "kfac", "--multi_device", "true",
                 "used with --optimizer=kfac");
    require_flag(absl::GetFlag(FLAGS_curvature_batch_size) == 0, "--multi_device", "true",
                 "used without --curvature_batch_size");
  }
  require_flag(!absl::GetFlag(FLAGS_distributed_inverses) || absl::GetFlag(FLAGS_multi_device),
               "--distributed_inverses", "true", "used with --multi_device");
  require_flag(steps >= 1, "--training_steps", steps, ">= 1");
  require_flag(batch_size >= 1, "--batch_size", batch_size, ">= 1");
  const std::string which = absl::GetFlag(FLAGS_optimizer), data = absl::GetFlag(FLAGS_data);
  require_flag(which == "kfac" || which == "adam" || which == "sgd", "--optimizer", which,
               "kfac, adam or sgd");
  require_flag(data == "random" || data == "fashion_mnist", "--data", data,
               "random or fashion_mnist");
  const double lr = absl::GetFlag(FLAGS_learning_rate), l2 = absl::GetFlag(FLAGS_l2_reg);
  require_flag(finite_float(lr) && lr > 0, "--learning_rate", lr, "finite and > 0");
  require_flag(finite_float(l2) && l2 >= 0, "--l2_reg", l2, "finite and >= 0");
  const double momentum = absl::GetFlag(FLAGS_momentum);
  require_flag(momentum >= 0 && momentum < 1, "--momentum", momentum, "in [0, 1)");

  const double damping = absl::GetFlag(FLAGS_damping);
  const double min_damping = absl::GetFlag(FLAGS_min_damping);
  require_flag(finite_float(damping) && damping > 0, "--damping", damping, "finite and > 0");
  require_flag(finite_float(min_damping) && min_damping >= 0, "--min_damping", min_damping,
               "finite and >= 0");
  if (absl::GetFlag(FLAGS_use_adaptive_damping)) {
    std::ostringstream floor;
    floor << min_damping;
    require_flag(damping >= min_damping, "--damping", damping,
                 ">= --min_damping (" + floor.str() + "): adaptive damping starts from it");
  }
  const double ema = absl::GetFlag(FLAGS_curvature_ema);
  require_flag(ema >= 0 && ema <= 1, "--curvature_ema", ema, "in [0, 1]");
  const double norm = absl::GetFlag(FLAGS_norm_constraint);
  require_flag(finite_float(norm) && norm >= 0, "--norm_constraint", norm,
               "finite and > 0 (or 0, the default: no constraint)");
  require_flag(norm == 0 || !absl::GetFlag(FLAGS_use_adaptive_learning_rate), "--norm_constraint",
               norm, "0 with --use_adaptive_learning_rate (the adaptive rate sizes its own steps)");
  require_flag(absl::GetFlag(FLAGS_inverse_update_period) >= 1, "--inverse_update_period",
               absl::GetFlag(FLAGS_inverse_update_period), ">= 1");
  require_flag(absl::GetFlag(FLAGS_curvature_update_period) >= 1, "--curvature_update_period",
               absl::GetFlag(FLAGS_curvature_update_period), ">= 1");
  const int curvature_batch = absl::GetFlag(FLAGS_curvature_batch_size);
  require_flag(curvature_batch >= 0 && curvature_batch <= batch_size, "--curvature_batch_size",
               curvature_batch,
               "in [0, --batch_size = " + std::to_string(batch_size) + "] (0 = the whole batch)");
  try {
    hkfac::kfac::parse_estimation_mode(absl::GetFlag(FLAGS_estimation_mode));
  } catch (const hkfac::Error &e) {
    throw hkfac::Error(std::string("--") + e.what());
  }
  require_flag(!absl::GetFlag(FLAGS_use_adaptive_momentum) ||
                   absl::GetFlag(FLAGS_use_adaptive_learning_rate),
               "--use_adaptive_momentum", "true", "used with --use_adaptive_learning_rate");

  const std::string save_path = absl::GetFlag(FLAGS_save_checkpoint);
  const std::string load_path = absl::GetFlag(FLAGS_load_checkpoint);
  const int checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  if (which != "kfac" && (!save_path.empty() || !load_path.empty())) {
    throw hkfac::Error("--save_checkpoint and --load_checkpoint need --optimizer=kfac");
  }
  require_flag(checkpoint_every >= 0 && (checkpoint_every == 0 || !save_path.empty()),
               "--checkpoint_every", checkpoint_every, ">= 0, and > 0 only with --save_checkpoint");
  require_flag(absl::GetFlag(FLAGS_log_every) >= 1, "--log_every", absl::GetFlag(FLAGS_log_every),
               ">= 1");
  const double max_seconds = absl::GetFlag(FLAGS_max_seconds);
  require_flag(std::isfinite(max_seconds) && max_seconds >= 0, "--max_seconds", max_seconds,
               "finite and >= 0 (0 = no limit)");
  const double eval_every = absl::GetFlag(FLAGS_eval_every_seconds);
  require_flag(std::isfinite(eval_every) && eval_every >= 0, "--eval_every_seconds", eval_every,
               "finite and >= 0 (0 = never)");
  require_flag(absl::GetFlag(FLAGS_eval_examples) >= 1, "--eval_examples",
               absl::GetFlag(FLAGS_eval_examples), ">= 1");

  std::vector<std::pair<std::string, std::string>> outputs = {{"--csv", absl::GetFlag(FLAGS_csv)},
                                                              {"--png", absl::GetFlag(FLAGS_png)}};
  if (eval_every > 0)
    outputs.push_back({"--eval_csv", absl::GetFlag(FLAGS_eval_csv)});
  if (!save_path.empty())
    outputs.push_back({"--save_checkpoint", save_path});
  for (const auto &[flag, path] : outputs)
    hkfac::apps::require_writable_output(flag, path);
  hkfac::apps::require_distinct_outputs(outputs);
  if (!load_path.empty())
    hkfac::apps::require_readable_input("--load_checkpoint", load_path);
}

int run() {
  check_flags();
  const int steps = absl::GetFlag(FLAGS_training_steps);
  const int batch_size = absl::GetFlag(FLAGS_batch_size);
  const double lr = absl::GetFlag(FLAGS_learning_rate), l2 = absl::GetFlag(FLAGS_l2_reg);
  const double momentum = absl::GetFlag(FLAGS_momentum), damping = absl::GetFlag(FLAGS_damping);
  const std::string which = absl::GetFlag(FLAGS_optimizer);
  const unsigned seed = static_cast<unsigned>(absl::GetFlag(FLAGS_seed));
  const std::string save_path = absl::GetFlag(FLAGS_save_checkpoint);
  const std::string load_path = absl::GetFlag(FLAGS_load_checkpoint);
  const int checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);

  // With --multi_device, this rank's rows of each global batch; rank 0 alone logs and writes.
  const BatchShard shard = shard_batches(batch_size, absl::GetFlag(FLAGS_multi_device));
  const std::shared_ptr<hkfac::kfac::Communicator> &comm = shard.comm;
  const int shard_first = shard.first, shard_rows = shard.rows;
  const bool writes_files = shard.leads();

  autoencoder::Dataset data =
      autoencoder::Dataset::load(absl::GetFlag(FLAGS_data), absl::GetFlag(FLAGS_data_dir), seed);
  auto next_shard = [&]() { return data.next_shard(batch_size, shard_first, shard_rows); };
  const bool images = absl::GetFlag(FLAGS_data) == "fashion_mnist";
  hkfac::kfac::Sequential model = build_autoencoder(data.dim());
  std::mt19937 rng(seed);
  Params params = model.init_params(rng);
  const hkfac::kfac::ValueFunction value = reconstruction_loss(images);
  std::printf("autoencoder: %s data (%d examples, dim %d), optimizer %s, %d steps of %d\n",
              absl::GetFlag(FLAGS_data).c_str(), data.size(), data.dim(), which.c_str(), steps,
              batch_size);
  if (comm) {
    std::printf("multi_device: %d ranks, rank 0's shard %d of the %d examples of each batch\n",
                comm->size(), shard_rows, batch_size);
  }

  std::vector<autoencoder::LossPoint> curve, evals;
  const auto start = std::chrono::steady_clock::now();
  double paused = 0.0; // seconds spent evaluating, not counted as training time
  auto elapsed = [&]() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() - paused;
  };
  const double max_seconds = absl::GetFlag(FLAGS_max_seconds);
  const int log_every = absl::GetFlag(FLAGS_log_every);
  const double eval_every = absl::GetFlag(FLAGS_eval_every_seconds);
  const int eval_examples = absl::GetFlag(FLAGS_eval_examples);
  double next_eval = 0.0;
  // After `step` steps: evaluates when the training clock has reached the next multiple of
  // --eval_every_seconds (or when forced, at the end), stopping the clock meanwhile.
  auto evaluate_if_due = [&](int step, bool force) {
    if (eval_every <= 0 || (!force && elapsed() < next_eval))
      return;
    const auto t0 = std::chrono::steady_clock::now();
    const double at = elapsed();
    evals.push_back({step, at, evaluate_objective(model, value, params, data, eval_examples, l2)});
    // The next multiple after `at`, computed rather than stepped to: a tiny period would take
    // forever to add up (or never, below at's rounding).
    next_eval = eval_every * (std::floor(at / eval_every) + 1.0);
    paused += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  evaluate_if_due(0, false);
  hkfac::apps::stop_on_signals(); // stop at a step boundary, outputs written

  if (which == "kfac") {
    hkfac::kfac::OptimizerOptions o;
    o.l2_reg = static_cast<float>(l2);
    o.estimation_mode = hkfac::kfac::parse_estimation_mode(absl::GetFlag(FLAGS_estimation_mode));
    o.seed = seed;
    o.use_adaptive_damping = absl::GetFlag(FLAGS_use_adaptive_damping);
    o.initial_damping = damping; // adaptive damping starts from --damping
    o.inverse_update_period = absl::GetFlag(FLAGS_inverse_update_period);
    o.curvature_update_period = absl::GetFlag(FLAGS_curvature_update_period);
    o.curvature_batch_size = absl::GetFlag(FLAGS_curvature_batch_size);
    o.min_damping = absl::GetFlag(FLAGS_min_damping);
    o.curvature_ema = absl::GetFlag(FLAGS_curvature_ema);
    o.use_adaptive_learning_rate = absl::GetFlag(FLAGS_use_adaptive_learning_rate);
    o.use_adaptive_momentum = absl::GetFlag(FLAGS_use_adaptive_momentum);
    o.multi_device = comm != nullptr;
    o.communicator = comm;
    o.distributed_inverses = absl::GetFlag(FLAGS_distributed_inverses);
    o.serial_kernels = absl::GetFlag(FLAGS_serial_kernels);
    if (absl::GetFlag(FLAGS_norm_constraint) > 0) {
      o.norm_constraint = absl::GetFlag(FLAGS_norm_constraint);
    }
    hkfac::kfac::Optimizer opt(model, value, o);
    int first = 0;
    if (!load_path.empty()) {
      const auto t0 = std::chrono::steady_clock::now();
      check_resume_settings(load_path, opt.checkpoint_metadata(load_path));
      opt.load_checkpoint(load_path, params);
      const double load_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      first = opt.step_count();
      // The saved run drew its burn-in batches and one batch per step.
      data.skip_batches(first > 0 ? o.num_burnin_steps + first : 0, batch_size);
      std::printf("resumed from %s at step %d (read in %.2fs)\n", load_path.c_str(), first, load_s);
      // The evaluation before training was of the parameters the checkpoint replaced.
      evals.clear();
      next_eval = 0.0;
      evaluate_if_due(first, false);
    }
    hkfac::kfac::StepValues v;
    if (!o.use_adaptive_learning_rate)
      v.learning_rate = lr;
    if (!o.use_adaptive_momentum)
      v.momentum = momentum;
    if (!o.use_adaptive_damping)
      v.damping = damping;
    // Writes the checkpoint; its time is not training time.
    auto save = [&]() {
      const auto t0 = std::chrono::steady_clock::now();
      opt.save_checkpoint(save_path, params, run_settings());
      const double took =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      paused += took;
      std::printf("wrote checkpoint %s at step %d in %.2fs\n", save_path.c_str(), opt.step_count(),
                  took);
    };
    for (int s = first; s < first + steps; ++s) {
      const hkfac::kfac::StepStats st = opt.step(params, next_shard, v);
      // The traffic report leaves out the first step's burn-in.
      if (comm && s == first)
        comm->reset_traffic();
      curve.push_back({s, elapsed(), st.loss});
      if (s % log_every == 0 || s + 1 == first + steps) {
        char rho[16] = "     -"; // computed only where adaptive damping needs it
        if (st.rho)
          std::snprintf(rho, sizeof rho, "%+.3f", *st.rho);
        std::printf(
            "step %4d  loss %.5f  rho %s  damping %.2e  lr %.2e  mom %.2f  |update| %.3e  %6.2fs "
            "(fwd/bwd %.3f, curv %.3f, inv %.3f, precond %.3f, update %.3f)%s\n",
            s, st.loss, rho, st.damping, st.learning_rate, st.momentum, st.update_norm, elapsed(),
            st.timings.forward_backward_s, st.timings.curvature_update_s, st.timings.inverse_s,
            st.timings.precondition_s, st.timings.update_s, st.rejected ? "  [rejected]" : "");
      }
      evaluate_if_due(s + 1, false);
      bool stop = (max_seconds > 0 && elapsed() > max_seconds) || hkfac::apps::stop_signal();
      // The ranks' clocks differ; they stop together or one waits for ever in the next step.
      if (comm)
        stop = !comm->all(!stop, "control");
      if (stop)
        break;
      if (checkpoint_every > 0 && (s + 1) % checkpoint_every == 0 && s + 1 < first + steps)
        save();
    }
    if (!save_path.empty())
      save();
    if (comm && curve.size() > 1)
      report_traffic(*comm, static_cast<int>(curve.size()) - 1);
  } else {
    Params velocity = hkfac::kfac::zeros_like(params), grad;
    hkfac::kfac::Adam adam(lr);
    for (int s = 0; s < steps; ++s) {
      const double loss =
          loss_and_gradient(model, value, params, data.next_batch(batch_size), l2, grad);
      if (which == "sgd") {
        hkfac::kfac::scale(static_cast<float>(momentum), velocity);
        hkfac::kfac::axpy(static_cast<float>(-lr), grad, velocity);
        hkfac::kfac::axpy(1.0f, velocity, params);
      } else {
        adam.step(params, grad);
      }
      curve.push_back({s, elapsed(), loss});
      if (s % log_every == 0 || s + 1 == steps) {
        std::printf("step %4d  loss %.5f  %6.2fs\n", s, loss, elapsed());
      }
      evaluate_if_due(s + 1, false);
      if ((max_seconds > 0 && elapsed() > max_seconds) || hkfac::apps::stop_signal())
        break;
    }
  }
  if (eval_every > 0) {
    const int done = curve.empty() ? 0 : curve.back().step + 1;
    if (evals.empty() || evals.back().step != done)
      evaluate_if_due(done, true);
    if (writes_files)
      autoencoder::write_csv(absl::GetFlag(FLAGS_eval_csv), evals);
    std::printf("objective on the first %d examples: %.5f at the start, %.5f at the end; wrote "
                "%s\n",
                std::min(eval_examples, data.size()), evals.front().loss, evals.back().loss,
                absl::GetFlag(FLAGS_eval_csv).c_str());
  }
  if (writes_files) {
    autoencoder::write_csv(absl::GetFlag(FLAGS_csv), curve);
    autoencoder::write_png(absl::GetFlag(FLAGS_png), curve,
                           "autoencoder " + absl::GetFlag(FLAGS_data) + " " + which);
  }
  std::printf("final loss %.5f after %zu steps, %.2fs; wrote %s and %s\n", curve.back().loss,
              curve.size(), elapsed(), absl::GetFlag(FLAGS_csv).c_str(),
              absl::GetFlag(FLAGS_png).c_str());
  if (const int sig = hkfac::apps::stop_signal()) {
    std::fprintf(stderr, "autoencoder: stopped by %s after %zu steps, outputs written\n",
                 hkfac::apps::signal_name(sig).c_str(), curve.size());
    return 128 + sig; // the shell's status for death by that signal
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  hkfac::retain_freed_memory(); // every step allocates and frees the same buffers
  hkfac::apps::parse_flags(
      argc, argv, "autoencoder",
      "Trains kfac_ferminet_alpha's deep autoencoder with K-FAC, Adam or SGD; writes a CSV and a "
      "PNG loss curve. SIGINT or SIGTERM stops training after the current step, writes the "
      "outputs (and --save_checkpoint) and exits with 128 + the signal.\nExample: autoencoder "
      "--data=fashion_mnist --optimizer=kfac --norm_constraint=0.001 --max_seconds=60",
      "autoencoder/main.cpp");
  try {
    return run();
  } catch (const std::exception &e) {
    std::fprintf(stderr, "autoencoder: error: %s\n", e.what());
    return 1;
  }
}
