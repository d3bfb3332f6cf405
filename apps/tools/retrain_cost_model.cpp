// Trains the cost model on .sample files with K-FAC or Adam (the flags of Halide's tool of this
// name, plus --optimizer, --validation, --csv and --predictions_file).
#include <absl/flags/flag.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <set>
#include <sstream>

#include "hkfac/cost_model/samples.h"
#include "hkfac/cost_model/trainer.h"
#include "hkfac/cost_model/weights.h"
#include "hkfac/error.h"
#include "tool_main.h"

ABSL_FLAG(int, epochs, 50, "Passes over the training pipelines");
ABSL_FLAG(std::string, rates, "0.0001",
          "Adam: comma-separated learning rates; one model is trained per rate and the one with "
          "the lowest validation loss is written (K-FAC: see --kfac_rate)");
ABSL_FLAG(std::string, initial_weights, "", "Start from this .weights file or weights directory");
ABSL_FLAG(bool, randomize_weights, false, "Start from random weights (seeded by --seed)");
ABSL_FLAG(std::string, weights_out, "", "Write the trained weights here (.weights; required)");
ABSL_FLAG(int, num_cores, 0,
          "Cores of the machine that benchmarked the samples (0: this machine's)");
ABSL_FLAG(std::string, best_benchmark, "",
          "Write the fastest sample's runtime, schedule id and path to this file, in Halide's "
          "line format ('Best runtime is R msec, from schedule id I in file P')");
ABSL_FLAG(std::string, best_schedule, "",
          "Copy the fastest sample's .schedule.h (next to the sample) to this file");
ABSL_FLAG(std::string, optimizer, "kfac", "kfac | adam");
ABSL_FLAG(std::string, validation, "hash",
          "hash (a fixed fifth of each pipeline's schedules) | pipelines (a fixed fifth of the "
          "pipelines) | app:NAME (hold out a pipeline) | none");
ABSL_FLAG(std::string, csv, "", "Per-epoch CSV: rate, epoch, seconds, losses, accuracies");
ABSL_FLAG(std::string, predictions_file, "",
          "After training, write 'path,predicted,measured_ms,split' for every sample");
ABSL_FLAG(std::string, samples, "", "File listing .sample paths, one per line (default: stdin)");
ABSL_FLAG(int, schedule_features, 39, "Schedule features per stage: 39 (CPU) or 73 (GPU)");
ABSL_FLAG(int, batch_size, 128, "Most schedules of one pipeline per step");
ABSL_FLAG(int, schedules_per_visit, 0,
          "0: each pipeline one step per epoch; k: ceil(n / k) steps for n training schedules");
ABSL_FLAG(int, seed, 0, "Seed for random weights, batch order and subsets");
ABSL_FLAG(double, max_seconds, 0, "Stop a run after this much training time (0: no limit)");
ABSL_FLAG(double, penalty_weight, 1e-4,
          "Adam: weight of the negative conv1 pre-activation penalty");
ABSL_FLAG(bool, kfac_adaptive, false,
          "K-FAC: adaptive damping, learning rate and momentum from the quadratic model "
          "(otherwise --kfac_rate, --kfac_momentum, --kfac_damping are fixed)");
ABSL_FLAG(double, kfac_rate, 0.3, "K-FAC: learning rate when not adaptive");
ABSL_FLAG(double, kfac_final_rate, 0,
          "K-FAC: decay the learning rate from --kfac_rate to this value over --epochs along a "
          "half cosine (0: a constant rate)");
ABSL_FLAG(double, kfac_damping, 0.1, "K-FAC: damping (initial damping when adaptive)");
ABSL_FLAG(double, kfac_momentum, 0.5, "K-FAC: momentum when not adaptive");
ABSL_FLAG(int, kfac_inverse_period, 5, "K-FAC: steps between factor inverses");
ABSL_FLAG(int, kfac_curvature_period, 1,
          "K-FAC: steps between curvature (factor) updates, kfac-jax's curvature_update_period");
ABSL_FLAG(double, kfac_norm_constraint, 3e-4,
          "K-FAC: norm constraint (0: none; not with --kfac_adaptive)");
ABSL_FLAG(bool, kfac_serial_kernels, true,
          "K-FAC: run the steps' kernels on the calling thread (the network is small: waking the "
          "kernel thread pool between the optimizer's work costs more than it gives back)");
ABSL_FLAG(double, top_choice_weight, 0,
          "K-FAC: weight of the top-choice loss added to L_rel (the cross-entropy of which "
          "schedule of a batch is fastest; 0: L_rel alone)");
ABSL_FLAG(double, top_choice_temperature, 0.25,
          "K-FAC: the top-choice loss's temperature in log-runtime (a schedule 2x slower than "
          "the fastest weighs 2^(-1/T) of it)");
ABSL_FLAG(bool, allow_version_mismatch, false,
          "Accept --initial_weights with other feature versions (e.g. Halide 14's)");

namespace {

namespace cm = hkfac::cost_model;

std::vector<double> parse_rates(const std::string &text) {
  std::vector<double> rates;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char *end = nullptr;
    const double r = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !(r > 0) || !std::isfinite(r))
      throw hkfac::Error("--rates: expected positive numbers separated by commas, got '" + text +
                         "'");
    rates.push_back(r);
  }
  if (rates.empty())
    throw hkfac::Error("--rates: no rate given");
  return rates;
}

std::vector<std::string> sample_paths() {
  const std::string list = absl::GetFlag(FLAGS_samples);
  if (list.empty())
    return cm::read_path_list(std::cin);
  try {
    return cm::read_path_list_file(list);
  } catch (const hkfac::Error &e) {
    throw hkfac::Error(std::string("--samples: ") + e.what());
  }
}

// The flags named on the command line (absl keeps that to itself): "--rates=0.1", "-rates 0.1"
// and "--nokfac_adaptive" all name theirs. Words after "--" are not flags.
std::set<std::string> named_flags(int argc, char **argv) {
  std::set<std::string> names;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--")
      break;
    if (a.size() < 2 || a[0] != '-')
      continue;
    a = a.substr(a[1] == '-' ? 2 : 1);
    a = a.substr(0, a.find('='));
    names.insert(a);
    if (a.rfind("no", 0) == 0)
      names.insert(a.substr(2));
  }
  return names;
}

// A flag of the optimizer not chosen would be dropped without a word (a Halide user's --rates
// under the default K-FAC): refuse it, naming it.
void check_optimizer_flags(cm::OptimizerKind optimizer, const std::set<std::string> &named) {
  static const char *const adam_only[] = {"rates", "penalty_weight"};
  static const char *const kfac_only[] = {
      "kfac_adaptive",      "kfac_rate",           "kfac_final_rate",       "kfac_damping",
      "kfac_momentum",      "kfac_inverse_period", "kfac_curvature_period", "kfac_norm_constraint",
      "kfac_serial_kernels", "top_choice_weight",   "top_choice_temperature"};
  const bool kfac = optimizer == cm::OptimizerKind::kfac;
  const auto refuse = [&](const char *flag) {
    if (!named.count(flag))
      return;
    throw hkfac::Error(std::string("--") + flag + " is " + (kfac ? "an Adam" : "a K-FAC") +
                       " flag, and --optimizer=" + (kfac ? "kfac" : "adam") + " would ignore it" +
                       (kfac ? " (K-FAC's rate is --kfac_rate; add --optimizer=adam for Adam)"
                             : " (add --optimizer=kfac for K-FAC)"));
  };
  if (kfac) {
    for (const char *flag : adam_only)
      refuse(flag);
    if (absl::GetFlag(FLAGS_kfac_adaptive) && named.count("kfac_norm_constraint"))
      throw hkfac::Error("--kfac_norm_constraint and --kfac_adaptive: the adaptive learning rate "
                         "sizes its own steps and takes no norm constraint; drop one");
  } else {
    for (const char *flag : kfac_only)
      refuse(flag);
  }
}

// --initial_weights, with an error that names the flag that would load the file: a file for the
// other S suggests --schedule_features, one with foreign versions --allow_version_mismatch.
cm::Weights initial_weights(const std::string &path, int S, bool allow_version_mismatch) {
  cm::WeightsLoadOptions load;
  load.expected_schedule_features = S;
  load.allow_version_mismatch = allow_version_mismatch;
  try {
    return cm::load_weights(path, load);
  } catch (const hkfac::Error &e) {
    std::string msg = std::string("--initial_weights: ") + e.what();
    cm::WeightsLoadOptions any; // what the file holds, without the expectations that refused it
    any.allow_version_mismatch = true;
    try {
      const int file_s = cm::load_weights(path, any).schedule_features();
      if (file_s != S) {
        msg += "; the file has " + std::to_string(file_s) +
               " schedule features: pass --schedule_features=" + std::to_string(file_s);
      } else if (!allow_version_mismatch) {
        msg += "; pass --allow_version_mismatch to load it anyway";
      }
    } catch (const hkfac::Error &) {
      // Unreadable either way: the first error says why.
    }
    throw hkfac::Error(msg);
  }
}

std::string fixed3(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", v);
  return text;
}

// The options from the flags, checked before anything is loaded: flags of the other optimizer are
// refused, then the library's checks run (they name the option, here named as the flag). 0 means
// "none" for the optional K-FAC settings.
cm::TrainOptions train_options(const std::set<std::string> &named) {
  cm::TrainOptions o;
  try {
    o.optimizer = cm::parse_optimizer(absl::GetFlag(FLAGS_optimizer));
  } catch (const hkfac::Error &e) {
    throw hkfac::Error(std::string("--") + e.what());
  }
  check_optimizer_flags(o.optimizer, named);
  o.epochs = absl::GetFlag(FLAGS_epochs);
  o.batch_size = absl::GetFlag(FLAGS_batch_size);
  o.schedules_per_visit = absl::GetFlag(FLAGS_schedules_per_visit);
  o.seed = static_cast<unsigned>(absl::GetFlag(FLAGS_seed));
  o.num_cores = hkfac::tools::num_cores_flag(absl::GetFlag(FLAGS_num_cores));
  o.max_seconds = absl::GetFlag(FLAGS_max_seconds);
  o.penalty_weight = absl::GetFlag(FLAGS_penalty_weight);
  o.kfac_adaptive = absl::GetFlag(FLAGS_kfac_adaptive);
  o.kfac_rate = absl::GetFlag(FLAGS_kfac_rate);
  if (const double r = absl::GetFlag(FLAGS_kfac_final_rate); r != 0)
    o.kfac_final_rate = r;
  o.kfac_damping = absl::GetFlag(FLAGS_kfac_damping);
  o.kfac_momentum = absl::GetFlag(FLAGS_kfac_momentum);
  o.kfac_inverse_period = absl::GetFlag(FLAGS_kfac_inverse_period);
  o.kfac_curvature_period = absl::GetFlag(FLAGS_kfac_curvature_period);
  if (const double c = absl::GetFlag(FLAGS_kfac_norm_constraint); c != 0)
    o.kfac_norm_constraint = c;
  else
    o.kfac_norm_constraint.reset();
  o.kfac_serial_kernels = absl::GetFlag(FLAGS_kfac_serial_kernels);
  o.top_choice_weight = absl::GetFlag(FLAGS_top_choice_weight);
  o.top_choice_temperature = absl::GetFlag(FLAGS_top_choice_temperature);
  try {
    cm::validate(o);
  } catch (const hkfac::Error &e) {
    throw hkfac::Error(std::string("--") + e.what());
  }
  return o;
}

void write_best(const cm::TrainingData &data) {
  const cm::PipelineData *best_p = nullptr;
  size_t best_i = 0;
  for (const cm::PipelineData &p : data.pipelines) {
    for (size_t i = 0; i < p.runtimes_ms.size(); ++i) {
      if (!best_p || p.runtimes_ms[i] < best_p->runtimes_ms[best_i]) {
        best_p = &p;
        best_i = i;
      }
    }
  }
  const std::string path = best_p->paths[best_i];
  if (const std::string out = absl::GetFlag(FLAGS_best_benchmark); !out.empty()) {
    // Halide's line, which its autotune_loop.sh and users' scripts read.
    std::ostringstream text;
    text << "Best runtime is " << best_p->runtimes_ms[best_i] << " msec, from schedule id "
         << best_p->schedule_ids[best_i] << " in file " << path << "\n";
    hkfac::tools::write_output_flag("--best_benchmark", out, text.str());
  }
  if (const std::string out = absl::GetFlag(FLAGS_best_schedule); !out.empty()) {
    const std::string schedule =
        path.substr(0, path.size() - std::string(".sample").size()) + ".schedule.h";
    std::ifstream in(schedule, std::ios::binary);
    if (!in)
      throw hkfac::Error("--best_schedule: the fastest sample has no '" + schedule + "'");
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad())
      throw hkfac::Error("--best_schedule: reading '" + schedule + "' failed");
    hkfac::tools::write_output_flag("--best_schedule", out, text.str());
  }
}

void write_predictions(const cm::Weights &w, const cm::TrainingData &data, int cores,
                       const std::string &out) {
  std::ostringstream f;
  f << "path,predicted,measured_ms,split\n";
  for (const cm::PipelineData &p : data.pipelines) {
    std::vector<int> all(p.runtimes_ms.size());
    for (size_t i = 0; i < all.size(); ++i)
      all[i] = static_cast<int>(i);
    const std::vector<float> predicted = cm::predict(w, p, all, cores);
    std::vector<bool> validation(all.size(), false);
    for (int i : p.validation)
      validation[i] = true;
    for (size_t i = 0; i < all.size(); ++i) {
      f << p.paths[i] << "," << predicted[i] << "," << p.runtimes_ms[i] << ","
        << (validation[i] ? "validation" : "train") << "\n";
    }
  }
  hkfac::tools::write_output_flag("--predictions_file", out, f.str());
}

} // namespace

int main(int argc, char **argv) {
  const std::set<std::string> named = named_flags(argc, argv);
  return hkfac::tools::run_tool(
      argc, argv, "retrain_cost_model", "retrain_cost_model.cpp",
      "Trains the hkfac cost model on .sample files (paths on stdin or --samples).\n"
      "  retrain_cost_model --randomize_weights --weights_out=OUT.weights [flags] < samples.txt",
      [&named](const std::vector<std::string> &args) {
        if (!args.empty())
          throw hkfac::Error("unexpected argument '" + args.front() +
                             "' (sample paths go on "
                             "stdin or in --samples)");
        const std::string initial = absl::GetFlag(FLAGS_initial_weights);
        const bool randomize = absl::GetFlag(FLAGS_randomize_weights);
        if (initial.empty() == !randomize)
          throw hkfac::Error("give exactly one of --initial_weights and --randomize_weights");
        const int S = hkfac::tools::schedule_features_flag(absl::GetFlag(FLAGS_schedule_features));
        cm::TrainOptions o = train_options(named);
        std::vector<double> rates = parse_rates(absl::GetFlag(FLAGS_rates));
        if (o.optimizer == cm::OptimizerKind::kfac)
          rates = {rates.front()}; // K-FAC's rate is --kfac_rate (or adaptive)
        const cm::Split split = cm::parse_split(absl::GetFlag(FLAGS_validation));
        // Training's only product is the weights: without a place for them it would be lost.
        const std::string weights_out = absl::GetFlag(FLAGS_weights_out);
        if (weights_out.empty())
          throw hkfac::Error("--weights_out is required (where to write the trained weights)");
        hkfac::tools::check_output_flag("--weights_out", weights_out);
        for (const auto &[flag, path] :
             {std::pair{"--predictions_file", absl::GetFlag(FLAGS_predictions_file)},
              std::pair{"--best_benchmark", absl::GetFlag(FLAGS_best_benchmark)},
              std::pair{"--best_schedule", absl::GetFlag(FLAGS_best_schedule)}}) {
          if (!path.empty())
            hkfac::tools::check_output_flag(flag, path);
        }
        const std::string csv_path = absl::GetFlag(FLAGS_csv);
        if (!csv_path.empty())
          hkfac::tools::check_stream_output_flag("--csv", csv_path);

        const cm::Weights start =
            randomize ? cm::random_weights(S, o.seed)
                      : initial_weights(initial, S, absl::GetFlag(FLAGS_allow_version_mismatch));

        cm::SampleSet set = cm::load_samples(sample_paths(), S);
        for (const cm::SampleRejection &r : set.rejected)
          std::fprintf(stderr, "rejected %s: %s\n", r.path.c_str(), r.reason.c_str());
        if (set.num_samples() == 0)
          throw hkfac::Error("no usable samples (" + std::to_string(set.rejected.size()) +
                             " rejected)");
        const size_t loaded = set.num_samples(), rejected = set.rejected.size();
        const cm::TrainingData data = cm::make_training_data(std::move(set), S, split);
        std::printf("%zu samples (%zu rejected, %zu duplicate schedules merged) over %zu "
                    "pipelines: %zu training, %zu validation schedules\n",
                    loaded, rejected, data.duplicates, data.pipelines.size(),
                    data.train_schedules(), data.validation_schedules());
        write_best(data);

        std::ofstream csv;
        if (!csv_path.empty()) {
          csv.open(csv_path);
          if (!csv)
            throw hkfac::Error("--csv: cannot write '" + csv_path + "': " + std::strerror(errno));
          csv << "optimizer,rate,epoch,seconds,steps,train_loss,train_accuracy,validation_loss,"
                 "validation_accuracy,validation_pairs,rejected_steps,train_top_regret,"
                 "validation_top_regret\n";
        }
        const std::string opt_name = absl::GetFlag(FLAGS_optimizer);
        cm::Weights best;
        double best_loss = std::numeric_limits<double>::infinity(), best_rate = 0;
        for (double rate : rates) {
          o.rate = rate;
          cm::EpochRecord last;
          // Empty where no pipeline has two schedules: a top regret of 1 would claim a pick.
          const auto regret_field = [](const cm::Score &s) {
            return s.regret_pipelines ? std::to_string(s.top_regret) : std::string();
          };
          const double shown_rate = o.optimizer == cm::OptimizerKind::kfac ? o.kfac_rate : rate;
          cm::Weights w = cm::train(data, start, o, [&](const cm::EpochRecord &r) {
            std::printf("[%s rate %g] epoch %d  %.1f s  train loss %.4f acc %.3f | validation "
                        "loss %.4f acc %.3f (%zu pairs)%s%s\n",
                        opt_name.c_str(), shown_rate, r.epoch, r.seconds, r.train.loss,
                        r.train.accuracy, r.validation.loss, r.validation.accuracy,
                        r.validation.pairs,
                        r.validation.regret_pipelines
                            ? (" top regret " + fixed3(r.validation.top_regret) + "x").c_str()
                            : "",
                        r.rejected_steps
                            ? (" " + std::to_string(r.rejected_steps) + " rejected steps").c_str()
                            : "");
            std::fflush(stdout);
            if (csv.is_open()) {
              csv << opt_name << "," << shown_rate << "," << r.epoch << "," << r.seconds << ","
                  << r.steps << "," << r.train.loss << "," << r.train.accuracy << ","
                  << r.validation.loss << "," << r.validation.accuracy << "," << r.validation.pairs
                  << "," << r.rejected_steps << "," << regret_field(r.train) << ","
                  << regret_field(r.validation) << "\n";
              csv.flush();
            }
            last = r;
          });
          // Every step rejected (non-finite updates) leaves the initial weights: not a result.
          if (last.steps > 0 && last.rejected_steps == last.steps) {
            std::ostringstream msg;
            msg << "all " << last.steps << " training steps (" << opt_name << " rate " << shown_rate
                << ") were rejected as non-finite, so the weights never changed; "
                << "not writing --weights_out";
            throw hkfac::Error(msg.str());
          }
          if (last.steps > 0 && !std::isfinite(last.train.loss)) {
            std::ostringstream msg;
            msg << "the training loss after the last epoch is " << last.train.loss << " ("
                << opt_name << " rate " << shown_rate
                << "): the weights predict nothing usable; not writing --weights_out";
            throw hkfac::Error(msg.str());
          }
          const double score = data.validation_schedules() ? last.validation.loss : last.train.loss;
          if (rates.size() == 1 || score < best_loss) {
            best_loss = score;
            best_rate = rate;
            best = w;
          }
        }
        cm::save_weights_file(best, weights_out);
        if (rates.size() > 1) {
          std::printf("wrote %s: the weights of Adam rate %g, the lowest %s loss (%.4f) of the %zu "
                      "rates\n",
                      weights_out.c_str(), best_rate,
                      data.validation_schedules() ? "validation" : "training", best_loss,
                      rates.size());
        }
        if (const std::string out = absl::GetFlag(FLAGS_predictions_file); !out.empty())
          write_predictions(best, data, o.num_cores, out);
        return 0;
      });
}
