// A convolutional Fashion-MNIST classifier trained with K-FAC (KFC blocks for the convolutions,
// Grosse & Martens 2016) or Adam on the same model and kernels, evaluated on the 10,000 test
// images. Where the autoencoder exercises dense layers and a Bernoulli loss, this exercises
// Conv2D's patch factors and the softmax cross-entropy.
//
// The network: three strided 'same' convolutions with ReLU, 28x28x1 -> 14x14x16 -> 7x7x32 ->
// 4x4x64, then a dense layer to the 10 logits.
#include <absl/flags/flag.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "hkfac/kfac/adam.h"
#include "cli.h"
#include "flags.h"
#include "hkfac/allocator.h"
#include "hkfac/error.h"
#include "hkfac/kfac/layers.h"
#include "hkfac/kfac/optimizer.h"
#include "idx.h"
#include "multi_device.h"

ABSL_FLAG(std::string, optimizer, "kfac", "kfac | adam");
ABSL_FLAG(int, batch_size, 128, "Examples per mini-batch");
ABSL_FLAG(int, training_steps, 1000000, "Maximum number of optimizer steps");
ABSL_FLAG(double, max_seconds, 60.0, "Stop after this much training time (0 = no limit)");
ABSL_FLAG(double, learning_rate, 1e-3, "Adam's learning rate (K-FAC takes its own)");
ABSL_FLAG(double, l2_reg, 1e-5, "L2 regularisation coefficient (l2/2 * ||params||^2)");
ABSL_FLAG(double, damping, 1.0, "K-FAC: initial damping (adapted by rho afterwards)");
// At the library's floor (1e-8) the damping falls there within ~300 steps on this network, the
// quadratic model's momentum then swings to ±6 and beyond, and one run blew up its weights after
// 835 steps. 1e-3 kept a 120-s run steady; at 1e-4, and with l2_reg 1e-4 at the old floor, test
// accuracy swung between 0.80 and 0.87 from one evaluation to the next.
ABSL_FLAG(double, min_damping, 1e-3, "K-FAC: the floor adaptive damping stops at");
ABSL_FLAG(int, inverse_update_period, 20, "K-FAC: steps between factor inverse updates");
ABSL_FLAG(int, curvature_update_period, 2, "K-FAC: steps between curvature updates");
ABSL_FLAG(std::string, estimation_mode, "fisher_gradients", "K-FAC curvature estimation mode");
ABSL_FLAG(double, eval_every_seconds, 10.0,
          "Evaluate on the test images every this many seconds of training, clock paused");
ABSL_FLAG(int, eval_examples, 10000, "Test images evaluated (the first ones)");
ABSL_FLAG(int, train_examples, 60000, "Training images used (the first ones)");
ABSL_FLAG(std::string, data_dir, "/usr/share/datasets/fashion-mnist",
          "Directory with the Fashion-MNIST idx files");
ABSL_FLAG(std::string, csv, "classifier.csv",
          "Output, a row per evaluation as it happens: step,seconds,test_loss,test_accuracy");
ABSL_FLAG(int, seed, 1, "Random seed (initialisation, batches, K-FAC's sampling)");
ABSL_FLAG(int, log_every, 50, "Print the training loss every this many steps");
ABSL_FLAG(bool, multi_device, false,
          "K-FAC: data-parallel training across the ranks of an MPI job (mpirun -np N "
          "classifier --multi_device): --batch_size is the global batch, each rank steps on its "
          "share, rank 0 logs, evaluates and writes the CSV");
ABSL_FLAG(bool, distributed_inverses, false,
          "K-FAC with --multi_device: each rank inverts a share of the curvature blocks and "
          "broadcasts them");

namespace {

using hkfac::apps::BatchShard;
using hkfac::apps::finite_float;
using hkfac::apps::shard_batches;
using hkfac::apps::require_flag;
using hkfac::kfac::Activation;
using hkfac::kfac::Batch;
using hkfac::kfac::Matrix;
using hkfac::kfac::Params;

constexpr int kClasses = 10;

hkfac::kfac::Sequential build_classifier() {
  hkfac::kfac::Sequential m(28 * 28);
  m.add<hkfac::kfac::Conv2D>(28, 28, 1, 16, 5, 2, 2, Activation::relu);
  m.add<hkfac::kfac::Conv2D>(14, 14, 16, 32, 3, 2, 1, Activation::relu);
  m.add<hkfac::kfac::Conv2D>(7, 7, 32, 64, 3, 2, 1, Activation::relu);
  m.add<hkfac::kfac::Dense>(4 * 4 * 64, kClasses);
  return m;
}

void softmax_cross_entropy(const Matrix &logits, const Batch &batch,
                           hkfac::kfac::ValueContext &ctx) {
  ctx.losses().register_categorical_predictive_distribution(logits, &batch.targets);
}

// Images with one-hot targets.
struct Split {
  Matrix images;
  std::vector<int> labels;

  Split(const std::string &images_path, const std::string &labels_path, int limit) {
    images = hkfac::apps::read_idx_images(images_path);
    labels = hkfac::apps::read_idx_labels(labels_path);
    if (labels.empty() || images.rows() != static_cast<Eigen::Index>(labels.size()) ||
        images.cols() != 28 * 28) {
      throw hkfac::Error("classifier: " + images_path + " and " + labels_path +
                         " do not hold the same number (>= 1) of 28x28 images and labels");
    }
    for (size_t i = 0; i < labels.size(); ++i) {
      if (labels[i] < 0 || labels[i] >= kClasses) {
        throw hkfac::Error("classifier: " + labels_path + ": label " + std::to_string(i) + " is " +
                           std::to_string(labels[i]) + ", expected 0-9");
      }
    }
    if (limit < static_cast<int>(labels.size())) {
      images.conservativeResize(limit, Eigen::NoChange);
      labels.resize(limit);
    }
  }
  int size() const { return static_cast<int>(labels.size()); }
  Batch rows(const std::vector<int> &index) const {
    Batch b;
    b.inputs.resize(static_cast<Eigen::Index>(index.size()), images.cols());
    b.targets = Matrix::Zero(static_cast<Eigen::Index>(index.size()), kClasses);
    for (size_t i = 0; i < index.size(); ++i) {
      b.inputs.row(i) = images.row(index[i]);
      b.targets(i, labels[index[i]]) = 1.0f;
    }
    return b;
  }
};

struct Evaluation {
  double loss = 0.0, accuracy = 0.0;
};

// Mean cross-entropy and accuracy over the split, in chunks of a mini-batch's memory.
Evaluation evaluate(hkfac::kfac::Sequential &model, const Params &params, const Split &split) {
  Evaluation e;
  const int chunk = 1000;
  for (int first = 0; first < split.size(); first += chunk) {
    std::vector<int> index;
    for (int i = first; i < std::min(split.size(), first + chunk); ++i)
      index.push_back(i);
    const Batch b = split.rows(index);
    const Matrix logits = model.forward(params, b);
    hkfac::kfac::LossRegistry losses;
    hkfac::kfac::ValueContext ctx(losses, nullptr, nullptr, false);
    softmax_cross_entropy(logits, b, ctx);
    e.loss += losses.total_values().sum();
    for (Eigen::Index i = 0; i < logits.rows(); ++i) {
      Eigen::Index best;
      logits.row(i).maxCoeff(&best);
      e.accuracy += best == split.labels[index[i]] ? 1.0 : 0.0;
    }
  }
  e.loss /= split.size();
  e.accuracy /= split.size();
  return e;
}

std::string images_file(const std::string &dir, const char *split) {
  return dir + "/" + split + "-images-idx3-ubyte.gz";
}
std::string labels_file(const std::string &dir, const char *split) {
  return dir + "/" + split + "-labels-idx1-ubyte.gz";
}

// Checks every flag, the unselected optimizer's too, the data files and the CSV's path, before
// any data is read or the CSV opened; errors name the flag.
void check_flags() {
  const std::string which = absl::GetFlag(FLAGS_optimizer);
  require_flag(which == "kfac" || which == "adam", "--optimizer", which, "kfac or adam");
  for (const auto &[flag, value] :
       {std::pair{"--batch_size", absl::GetFlag(FLAGS_batch_size)},
        {"--training_steps", absl::GetFlag(FLAGS_training_steps)},
        {"--eval_examples", absl::GetFlag(FLAGS_eval_examples)},
        {"--train_examples", absl::GetFlag(FLAGS_train_examples)},
        {"--inverse_update_period", absl::GetFlag(FLAGS_inverse_update_period)},
        {"--curvature_update_period", absl::GetFlag(FLAGS_curvature_update_period)},
        {"--log_every", absl::GetFlag(FLAGS_log_every)}}) {
    require_flag(value >= 1, flag, value, ">= 1");
  }
  const double max_seconds = absl::GetFlag(FLAGS_max_seconds);
  require_flag(std::isfinite(max_seconds) && max_seconds >= 0, "--max_seconds", max_seconds,
               "finite and >= 0 (0 = no limit)");
  const double eval_every = absl::GetFlag(FLAGS_eval_every_seconds);
  require_flag(std::isfinite(eval_every) && eval_every > 0, "--eval_every_seconds", eval_every,
               "finite and > 0");
  const double lr = absl::GetFlag(FLAGS_learning_rate), l2 = absl::GetFlag(FLAGS_l2_reg);
  require_flag(finite_float(lr) && lr > 0, "--learning_rate", lr, "finite and > 0");
  require_flag(finite_float(l2) && l2 >= 0, "--l2_reg", l2, "finite and >= 0");
  const double damping = absl::GetFlag(FLAGS_damping);
  const double min_damping = absl::GetFlag(FLAGS_min_damping);
  require_flag(finite_float(min_damping) && min_damping >= 0, "--min_damping", min_damping,
               "finite and >= 0");
  std::ostringstream floor;
  floor << min_damping;
  require_flag(finite_float(damping) && damping > 0 && damping >= min_damping, "--damping", damping,
               "finite, > 0 and >= --min_damping (" + floor.str() +
                   "): adaptive damping starts from it");
  try {
    hkfac::kfac::parse_estimation_mode(absl::GetFlag(FLAGS_estimation_mode));
  } catch (const hkfac::Error &e) {
    throw hkfac::Error(std::string("--") + e.what());
  }
  if (absl::GetFlag(FLAGS_multi_device)) {
    require_flag(hkfac::kfac::mpi_available(), "--multi_device", "true",
                 "false: this build has no MPI (configure with HKFAC_MPI=ON)");
    require_flag(which == "kfac", "--multi_device", "true", "used with --optimizer=kfac");
  }
  require_flag(!absl::GetFlag(FLAGS_distributed_inverses) || absl::GetFlag(FLAGS_multi_device),
               "--distributed_inverses", "true", "used with --multi_device");
  const std::string dir = absl::GetFlag(FLAGS_data_dir);
  for (const char *split : {"train", "t10k"}) {
    hkfac::apps::require_readable_input("--data_dir", images_file(dir, split));
    hkfac::apps::require_readable_input("--data_dir", labels_file(dir, split));
  }
  // Streamed: each row is written as it comes.
  hkfac::apps::require_writable_output("--csv", absl::GetFlag(FLAGS_csv),
                                       hkfac::apps::OutputWrite::streamed);
}

int run() {
  check_flags();
  const std::string which = absl::GetFlag(FLAGS_optimizer);
  const int batch_size = absl::GetFlag(FLAGS_batch_size);
  const int steps = absl::GetFlag(FLAGS_training_steps);
  const double eval_every = absl::GetFlag(FLAGS_eval_every_seconds);
  const std::string dir = absl::GetFlag(FLAGS_data_dir);
  const Split train(images_file(dir, "train"), labels_file(dir, "train"),
                    absl::GetFlag(FLAGS_train_examples));
  const Split test(images_file(dir, "t10k"), labels_file(dir, "t10k"),
                   absl::GetFlag(FLAGS_eval_examples));
  const unsigned seed = static_cast<unsigned>(absl::GetFlag(FLAGS_seed));
  hkfac::kfac::Sequential model = build_classifier();
  std::mt19937 rng(seed);
  Params params = model.init_params(rng);
  // With --multi_device, this rank's rows of each global batch; rank 0 alone logs, evaluates and
  // writes the CSV.
  const BatchShard shard = shard_batches(batch_size, absl::GetFlag(FLAGS_multi_device));
  const std::shared_ptr<hkfac::kfac::Communicator> &comm = shard.comm;
  const int shard_first = shard.first, shard_rows = shard.rows;
  const bool reports = shard.leads();
  std::mt19937 data_rng(seed + 1);
  std::uniform_int_distribution<int> pick(0, train.size() - 1);
  auto next_batch = [&]() {
    // Every rank draws the whole global batch's indices and reads its own rows.
    std::vector<int> index(batch_size);
    for (int &i : index)
      i = pick(data_rng);
    return train.rows(
        std::vector<int>(index.begin() + shard_first, index.begin() + shard_first + shard_rows));
  };
  const double l2 = absl::GetFlag(FLAGS_l2_reg);
  std::printf("classifier: Fashion-MNIST (%d training, %d test images), optimizer %s, batch %d\n",
              train.size(), test.size(), which.c_str(), batch_size);

  const auto start = std::chrono::steady_clock::now();
  double paused = 0.0;
  auto elapsed = [&]() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() - paused;
  };
  const std::string csv_path = absl::GetFlag(FLAGS_csv);
  std::ofstream csv;
  if (reports) {
    csv.open(csv_path);
    if (!csv)
      throw hkfac::Error(csv_path + ": cannot open for writing: " + std::strerror(errno));
    hkfac::apps::append_checked(csv, csv_path, "step,seconds,test_loss,test_accuracy\n");
  }
  double next_eval = 0.0;
  Evaluation last;
  int last_step = -1;
  auto evaluate_if_due = [&](int step, bool force) {
    if (!reports || step == last_step || (!force && elapsed() < next_eval))
      return;
    last_step = step;
    const auto t0 = std::chrono::steady_clock::now();
    const double at = elapsed();
    last = evaluate(model, params, test);
    std::ostringstream row;
    row << step << ',' << at << ',' << last.loss << ',' << last.accuracy << '\n';
    hkfac::apps::append_checked(csv, csv_path, row.str()); // each row as it comes
    std::printf("eval  step %5d  %7.1fs  test loss %.4f  accuracy %.4f\n", step, at, last.loss,
                last.accuracy);
    // The next multiple after `at`, computed rather than stepped to: a tiny period would take
    // forever to add up (or never, below at's rounding).
    next_eval = eval_every * (std::floor(at / eval_every) + 1.0);
    paused += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const double max_seconds = absl::GetFlag(FLAGS_max_seconds);
  const int log_every = absl::GetFlag(FLAGS_log_every);
  auto done = [&]() {
    const bool stop = (max_seconds > 0 && elapsed() > max_seconds) || hkfac::apps::stop_signal();
    // The ranks' clocks differ (rank 0 evaluates); they stop together or one waits for ever.
    return comm ? !comm->all(!stop, "control") : stop;
  };
  evaluate_if_due(0, true);
  hkfac::apps::stop_on_signals(); // stop at a step boundary, the CSV complete

  int step = 0;
  if (which == "kfac") {
    hkfac::kfac::OptimizerOptions o;
    o.l2_reg = static_cast<float>(l2);
    o.estimation_mode = hkfac::kfac::parse_estimation_mode(absl::GetFlag(FLAGS_estimation_mode));
    o.seed = seed;
    // kfac-jax's recipe: the quadratic model's learning rate and momentum, LM damping.
    o.use_adaptive_learning_rate = o.use_adaptive_momentum = o.use_adaptive_damping = true;
    o.initial_damping = absl::GetFlag(FLAGS_damping);
    o.min_damping = absl::GetFlag(FLAGS_min_damping);
    o.inverse_update_period = absl::GetFlag(FLAGS_inverse_update_period);
    o.curvature_update_period = absl::GetFlag(FLAGS_curvature_update_period);
    o.multi_device = comm != nullptr;
    o.communicator = comm;
    o.distributed_inverses = absl::GetFlag(FLAGS_distributed_inverses);
    hkfac::kfac::Optimizer opt(model, softmax_cross_entropy, o);
    for (; step < steps && !done(); ++step) {
      const hkfac::kfac::StepStats st = opt.step(params, next_batch);
      if (step % log_every == 0) {
        std::printf("step %5d  loss %.4f  damping %.2e  lr %.2e  mom %+.2f  %7.1fs%s\n", step,
                    st.loss, st.damping, st.learning_rate, st.momentum, elapsed(),
                    st.rejected ? "  [rejected]" : "");
      }
      evaluate_if_due(step + 1, false);
    }
  } else {
    hkfac::kfac::Adam adam(absl::GetFlag(FLAGS_learning_rate));
    for (; step < steps && !done(); ++step) {
      const Batch b = next_batch();
      const Matrix logits = model.forward(params, b);
      hkfac::kfac::LossRegistry losses;
      hkfac::kfac::ValueContext ctx(losses, nullptr, nullptr, false);
      softmax_cross_entropy(logits, b, ctx);
      Params grad = model.backward(losses.total_gradient() / static_cast<float>(batch_size));
      hkfac::kfac::axpy(static_cast<float>(l2), params, grad);
      adam.step(params, grad);
      if (step % log_every == 0) {
        const double loss =
            losses.total_values().mean() + 0.5 * l2 * hkfac::kfac::squared_norm(params);
        std::printf("step %5d  loss %.4f  %7.1fs\n", step, loss, elapsed());
      }
      evaluate_if_due(step + 1, false);
    }
  }
  evaluate_if_due(step, true);
  std::printf("final test accuracy %.4f (loss %.4f) after %d steps, %.1fs; wrote %s\n",
              last.accuracy, last.loss, step, elapsed(), csv_path.c_str());
  if (const int sig = hkfac::apps::stop_signal()) {
    std::fprintf(stderr, "classifier: stopped by %s after %d steps, %s written\n",
                 hkfac::apps::signal_name(sig).c_str(), step, csv_path.c_str());
    return 128 + sig; // the shell's status for death by that signal
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  hkfac::retain_freed_memory();
  hkfac::apps::parse_flags(
      argc, argv, "classifier",
      "Trains a convolutional Fashion-MNIST classifier with K-FAC (KFC) or Adam and reports its "
      "test accuracy. SIGINT or SIGTERM stops training after the current step, evaluates and "
      "exits with 128 + the signal.\nExample: classifier --optimizer=kfac --max_seconds=60",
      "classifier/main.cpp");
  try {
    return run();
  } catch (const std::exception &e) {
    std::fprintf(stderr, "classifier: error: %s\n", e.what());
    return 1;
  }
}
