// A small residual network (resnet.h) on Fashion-MNIST, trained in turn with hkfac::kfac_torch's
// K-FAC and with LibTorch's own Adam and SGD with momentum, each from the same initial weights
// and for the same training time, the held-out set evaluated every few seconds with the clock
// paused. One CSV row per evaluation; apps/bench/kfac_torch/compare.py tunes the learning rates on
// a validation split, runs the comparison on the test set and draws the PNG.
#include <absl/flags/flag.h>
#include <torch/torch.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include "cli.h"
#include "flags.h"
#include "hkfac/error.h"
#include "hkfac/kfac_torch/optimizer.h"
#include "idx.h"
#include "resnet.h"

ABSL_FLAG(std::string, optimizers, "kfac,adam,sgd",
          "Comma-separated optimizers to train with, one after another: kfac, adam, sgd");
ABSL_FLAG(double, kfac_lr, 0.003, "K-FAC's learning rate");
ABSL_FLAG(double, adam_lr, 3e-3, "Adam's learning rate");
ABSL_FLAG(double, sgd_lr, 0.1, "SGD's learning rate");
ABSL_FLAG(double, momentum, 0.9, "Momentum of SGD and of K-FAC");
ABSL_FLAG(double, weight_decay, 0.0, "L2 coefficient, for every optimizer");
ABSL_FLAG(double, kfac_damping, 0.03, "K-FAC's damping (fixed)");
ABSL_FLAG(double, kfac_kl_clip, 1e-3, "K-FAC's norm constraint (0 = none)");
ABSL_FLAG(int, kfac_factor_period, 10, "K-FAC: steps between factor updates");
ABSL_FLAG(int, kfac_inverse_period, 100, "K-FAC: steps between inverse updates");
ABSL_FLAG(int, batch_size, 128, "Examples per mini-batch");
ABSL_FLAG(double, seconds, 600.0, "Training time per optimizer (evaluations excluded)");
ABSL_FLAG(int, steps, 0, "Stop each optimizer after this many steps too (0 = no limit)");
ABSL_FLAG(double, eval_every_seconds, 15.0, "Evaluate every this many seconds of training");
ABSL_FLAG(std::string, heldout, "test",
          "test: evaluate on the 10,000 test images; validation: on the last 5,000 training "
          "images, trained on the other 55,000 (for choosing learning rates)");
ABSL_FLAG(int, threads, 2, "LibTorch's intra-op threads");
ABSL_FLAG(int, seed, 1, "Random seed (initial weights, batch order)");
ABSL_FLAG(std::string, data_dir, "/usr/share/datasets/fashion-mnist",
          "Directory with the Fashion-MNIST idx files");
ABSL_FLAG(std::string, csv, "torch_resnet.csv",
          "Output, a row per evaluation: optimizer,step,seconds,heldout_loss,heldout_accuracy,"
          "train_loss");

namespace {

constexpr int kValidation = 5000;

struct Split {
  torch::Tensor images; // N x 1 x 28 x 28, [0, 1]
  torch::Tensor labels; // N, int64
  int64_t size() const { return labels.size(0); }
  Split rows(int64_t first, int64_t count) const {
    return {images.narrow(0, first, count), labels.narrow(0, first, count)};
  }
};

Split read_split(const std::string &dir, const std::string &name) {
  const std::string images_path = dir + "/" + name + "-images-idx3-ubyte.gz";
  const std::string labels_path = dir + "/" + name + "-labels-idx1-ubyte.gz";
  const hkfac::kfac::Matrix pixels = hkfac::apps::read_idx_images(images_path);
  const std::vector<int> labels = hkfac::apps::read_idx_labels(labels_path);
  if (labels.empty() || pixels.rows() != static_cast<Eigen::Index>(labels.size()) ||
      pixels.cols() != 28 * 28) {
    throw hkfac::Error("torch_resnet: " + images_path + " and " + labels_path +
                       " do not hold the same number (>= 1) of 28x28 images and labels");
  }
  Split s;
  s.images = torch::from_blob(const_cast<float *>(pixels.data()),
                              {pixels.rows(), 1, 28, 28}, torch::kFloat)
                 .clone();
  s.labels = torch::empty({static_cast<int64_t>(labels.size())}, torch::kLong);
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || labels[i] > 9) {
      throw hkfac::Error("torch_resnet: " + labels_path + ": label " + std::to_string(i) +
                         " is " + std::to_string(labels[i]) + ", expected 0-9");
    }
    s.labels[static_cast<int64_t>(i)] = labels[i];
  }
  return s;
}

struct Evaluation {
  double loss = 0.0, accuracy = 0.0;
};

Evaluation evaluate(torch_resnet::ResNet &model, const Split &split) {
  torch::NoGradGuard no_grad;
  Evaluation e;
  for (int64_t first = 0; first < split.size(); first += 1000) {
    const Split part = split.rows(first, std::min<int64_t>(1000, split.size() - first));
    const torch::Tensor logits = model->forward(part.images);
    e.loss += torch::nn::functional::cross_entropy(
                  logits, part.labels,
                  torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                  .item<double>();
    e.accuracy += logits.argmax(1).eq(part.labels).sum().item<double>();
  }
  e.loss /= static_cast<double>(split.size());
  e.accuracy /= static_cast<double>(split.size());
  return e;
}

std::vector<std::string> split_list(const std::string &s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    out.push_back(item);
  return out;
}

void check_flags() {
  using hkfac::apps::require_flag;
  const std::vector<std::string> names = split_list(absl::GetFlag(FLAGS_optimizers));
  require_flag(!names.empty(), "--optimizers", absl::GetFlag(FLAGS_optimizers),
               "one or more of kfac, adam, sgd");
  for (const std::string &n : names) {
    require_flag(n == "kfac" || n == "adam" || n == "sgd", "--optimizers", n,
                 "kfac, adam or sgd");
  }
  for (const auto &[flag, value] :
       {std::pair{"--kfac_lr", absl::GetFlag(FLAGS_kfac_lr)},
        {"--adam_lr", absl::GetFlag(FLAGS_adam_lr)},
        {"--sgd_lr", absl::GetFlag(FLAGS_sgd_lr)},
        {"--kfac_damping", absl::GetFlag(FLAGS_kfac_damping)},
        {"--seconds", absl::GetFlag(FLAGS_seconds)},
        {"--eval_every_seconds", absl::GetFlag(FLAGS_eval_every_seconds)}}) {
    require_flag(std::isfinite(value) && value > 0, flag, value, "finite and > 0");
  }
  for (const auto &[flag, value] :
       {std::pair{"--momentum", absl::GetFlag(FLAGS_momentum)},
        {"--weight_decay", absl::GetFlag(FLAGS_weight_decay)},
        {"--kfac_kl_clip", absl::GetFlag(FLAGS_kfac_kl_clip)}}) {
    require_flag(std::isfinite(value) && value >= 0, flag, value, "finite and >= 0");
  }
  require_flag(absl::GetFlag(FLAGS_momentum) < 1, "--momentum", absl::GetFlag(FLAGS_momentum),
               "< 1");
  for (const auto &[flag, value] :
       {std::pair{"--kfac_factor_period", absl::GetFlag(FLAGS_kfac_factor_period)},
        {"--kfac_inverse_period", absl::GetFlag(FLAGS_kfac_inverse_period)},
        {"--batch_size", absl::GetFlag(FLAGS_batch_size)},
        {"--threads", absl::GetFlag(FLAGS_threads)}}) {
    require_flag(value >= 1, flag, value, ">= 1");
  }
  require_flag(absl::GetFlag(FLAGS_steps) >= 0, "--steps", absl::GetFlag(FLAGS_steps),
               ">= 0 (0 = no limit)");
  const std::string heldout = absl::GetFlag(FLAGS_heldout);
  require_flag(heldout == "test" || heldout == "validation", "--heldout", heldout,
               "test or validation");
  const std::string dir = absl::GetFlag(FLAGS_data_dir);
  for (const char *split : {"train", "t10k"}) {
    hkfac::apps::require_readable_input("--data_dir",
                                        dir + "/" + split + "-images-idx3-ubyte.gz");
    hkfac::apps::require_readable_input("--data_dir",
                                        dir + "/" + split + "-labels-idx1-ubyte.gz");
  }
  hkfac::apps::require_writable_output("--csv", absl::GetFlag(FLAGS_csv),
                                       hkfac::apps::OutputWrite::streamed);
}

// One optimizer's step over a batch: forward, backward and update; returns the batch's loss.
class Trainer {
public:
  Trainer(const std::string &name, torch_resnet::ResNet &model) : name_(name), model_(model) {
    const double wd = absl::GetFlag(FLAGS_weight_decay);
    if (name == "kfac") {
      hkfac::kfac_torch::KfacOptimizerOptions o;
      o.learning_rate = absl::GetFlag(FLAGS_kfac_lr);
      o.momentum = absl::GetFlag(FLAGS_momentum);
      o.damping = absl::GetFlag(FLAGS_kfac_damping);
      o.weight_decay = wd;
      if (absl::GetFlag(FLAGS_kfac_kl_clip) > 0)
        o.kl_clip = absl::GetFlag(FLAGS_kfac_kl_clip);
      o.preconditioner.factor_update_period = absl::GetFlag(FLAGS_kfac_factor_period);
      o.preconditioner.inverse_update_period = absl::GetFlag(FLAGS_kfac_inverse_period);
      kfac_ = std::make_unique<hkfac::kfac_torch::KfacOptimizer>(*model, o);
    } else if (name == "adam") {
      base_ = std::make_unique<torch::optim::Adam>(
          model->parameters(),
          torch::optim::AdamOptions(absl::GetFlag(FLAGS_adam_lr)).weight_decay(wd));
    } else {
      base_ = std::make_unique<torch::optim::SGD>(
          model->parameters(), torch::optim::SGDOptions(absl::GetFlag(FLAGS_sgd_lr))
                                   .momentum(absl::GetFlag(FLAGS_momentum))
                                   .weight_decay(wd));
    }
  }

  double step(const Split &batch) {
    if (kfac_)
      kfac_->zero_grad();
    else
      base_->zero_grad();
    const torch::Tensor loss =
        torch::nn::functional::cross_entropy(model_->forward(batch.images), batch.labels);
    loss.backward();
    if (kfac_)
      kfac_->step();
    else
      base_->step();
    return loss.item<double>();
  }

private:
  std::string name_;
  torch_resnet::ResNet &model_;
  std::unique_ptr<hkfac::kfac_torch::KfacOptimizer> kfac_;
  std::unique_ptr<torch::optim::Optimizer> base_;
};

struct Summary {
  std::string name;
  int64_t steps = 0;
  double seconds = 0.0;
  Evaluation last, best;
};

Summary train(const std::string &name, const Split &train_set, const Split &heldout,
              std::ofstream &csv, const std::string &csv_path) {
  const int64_t seed = absl::GetFlag(FLAGS_seed);
  torch::manual_seed(seed); // the same initial weights for every optimizer
  torch_resnet::ResNet model;
  Trainer trainer(name, model);
  std::mt19937 rng(static_cast<unsigned>(seed) + 1);
  std::vector<int64_t> order(static_cast<size_t>(train_set.size()));
  std::iota(order.begin(), order.end(), 0);
  const int64_t batch = std::min<int64_t>(absl::GetFlag(FLAGS_batch_size), train_set.size());
  size_t next = order.size(); // reshuffled on first use
  const double budget = absl::GetFlag(FLAGS_seconds);
  const double eval_every = absl::GetFlag(FLAGS_eval_every_seconds);

  Summary s;
  s.name = name;
  double trained = 0.0, next_eval = 0.0, loss_sum = 0.0;
  int64_t loss_count = 0;
  auto report = [&]() {
    s.last = evaluate(model, heldout);
    if (s.last.accuracy > s.best.accuracy)
      s.best = s.last;
    const double train_loss = loss_count ? loss_sum / static_cast<double>(loss_count) : NAN;
    std::ostringstream row;
    row << name << ',' << s.steps << ',' << trained << ',' << s.last.loss << ','
        << s.last.accuracy << ',' << train_loss << '\n';
    hkfac::apps::append_checked(csv, csv_path, row.str());
    std::printf("%-4s step %6lld %7.1fs  held-out loss %.4f accuracy %.4f  train loss %.4f\n",
                name.c_str(), static_cast<long long>(s.steps), trained, s.last.loss,
                s.last.accuracy, train_loss);
    loss_sum = 0.0;
    loss_count = 0;
    next_eval = eval_every * (std::floor(trained / eval_every) + 1.0);
  };
  report();
  const int64_t max_steps = absl::GetFlag(FLAGS_steps);
  while (trained < budget && (max_steps == 0 || s.steps < max_steps) &&
         !hkfac::apps::stop_signal()) {
    if (next + static_cast<size_t>(batch) > order.size()) {
      std::shuffle(order.begin(), order.end(), rng);
      next = 0;
    }
    const torch::Tensor index =
        torch::from_blob(order.data() + next, {batch}, torch::kLong).clone();
    next += static_cast<size_t>(batch);
    const Split b{train_set.images.index_select(0, index), train_set.labels.index_select(0, index)};
    const auto t0 = std::chrono::steady_clock::now();
    const double loss = trainer.step(b);
    trained += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++s.steps;
    if (!std::isfinite(loss)) {
      std::printf("%-4s step %6lld: the training loss is %g, stopping this optimizer\n",
                  name.c_str(), static_cast<long long>(s.steps), loss);
      break;
    }
    loss_sum += loss;
    ++loss_count;
    if (trained >= next_eval)
      report();
  }
  if (loss_count)
    report();
  s.seconds = trained;
  return s;
}

int run() {
  check_flags();
  torch::set_num_threads(absl::GetFlag(FLAGS_threads));
  const std::string dir = absl::GetFlag(FLAGS_data_dir);
  Split train_set = read_split(dir, "train");
  Split heldout;
  if (absl::GetFlag(FLAGS_heldout) == "validation") {
    const int64_t n = train_set.size() - kValidation;
    heldout = train_set.rows(n, kValidation);
    train_set = train_set.rows(0, n);
  } else {
    heldout = read_split(dir, "t10k");
  }
  const std::string csv_path = absl::GetFlag(FLAGS_csv);
  std::ofstream csv(csv_path);
  if (!csv)
    throw hkfac::Error(csv_path + ": cannot open for writing: " + std::strerror(errno));
  hkfac::apps::append_checked(csv, csv_path,
                              "optimizer,step,seconds,heldout_loss,heldout_accuracy,train_loss\n");
  std::printf("torch_resnet: Fashion-MNIST, %lld training and %lld %s images, batch %d, %.0f s "
              "per optimizer, %d threads\n",
              static_cast<long long>(train_set.size()), static_cast<long long>(heldout.size()),
              absl::GetFlag(FLAGS_heldout).c_str(), absl::GetFlag(FLAGS_batch_size),
              absl::GetFlag(FLAGS_seconds), absl::GetFlag(FLAGS_threads));
  hkfac::apps::stop_on_signals();
  std::vector<Summary> summaries;
  for (const std::string &name : split_list(absl::GetFlag(FLAGS_optimizers))) {
    summaries.push_back(train(name, train_set, heldout, csv, csv_path));
    if (hkfac::apps::stop_signal())
      break;
  }
  std::printf("\n%-5s %8s %10s %10s %10s\n", "", "steps", "ms/step", "final acc", "best acc");
  for (const Summary &s : summaries) {
    std::printf("%-5s %8lld %10.1f %10.4f %10.4f\n", s.name.c_str(),
                static_cast<long long>(s.steps),
                s.steps ? 1e3 * s.seconds / static_cast<double>(s.steps) : 0.0, s.last.accuracy,
                s.best.accuracy);
  }
  std::printf("wrote %s\n", csv_path.c_str());
  if (const int sig = hkfac::apps::stop_signal())
    return 128 + sig;
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  hkfac::apps::parse_flags(
      argc, argv, "torch_resnet",
      "Trains a small residual network on Fashion-MNIST with K-FAC (hkfac::kfac_torch), Adam and "
      "SGD with momentum in turn, and writes the held-out accuracy against training time.\n"
      "Example: torch_resnet --optimizers=kfac,adam --seconds=60",
      "torch_resnet/main.cpp");
  try {
    return run();
  } catch (const std::exception &e) {
    std::fprintf(stderr, "torch_resnet: error: %s\n", e.what());
    return 1;
  }
}
