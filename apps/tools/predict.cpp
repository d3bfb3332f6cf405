// Writes the cost model's prediction for every sample, and its ordering accuracy and top regret
// over them. Several weights files separated by ':' predict as the plugin's ensemble does (the
// median of the members' predictions, hkfac/cost_model/ensemble.h).
#include <absl/flags/flag.h>

#include <cstdio>
#include <iostream>
#include <sstream>

#include "hkfac/cost_model/ensemble.h"
#include "hkfac/cost_model/evaluation.h"
#include "hkfac/cost_model/samples.h"
#include "hkfac/cost_model/weights.h"
#include "hkfac/error.h"
#include "tool_main.h"

ABSL_FLAG(std::string, weights, "",
          "The .weights file or weights directory, or several files separated by ':' (an "
          "ensemble: the median of their predictions) (required)");
ABSL_FLAG(std::string, predictions_file, "",
          "Write 'path,predicted,measured_ms' per sample here (default: stdout)");
ABSL_FLAG(std::string, samples, "", "File listing .sample paths, one per line (default: stdin)");
ABSL_FLAG(int, schedule_features, 39, "Schedule features per stage: 39 (CPU) or 73 (GPU)");
ABSL_FLAG(int, num_cores, 0, "Cores of the machine the schedules are for (0: this machine's)");
ABSL_FLAG(bool, allow_version_mismatch, false, "Accept weights with other feature versions");

int main(int argc, char **argv) {
  namespace cm = hkfac::cost_model;
  return hkfac::tools::run_tool(
      argc, argv, "predict", "predict.cpp",
      "Predicts the runtime of every sample (paths on stdin or --samples).\n"
      "  predict --weights=W.weights[:W2.weights...] [--predictions_file=OUT.csv] < samples.txt",
      [](const std::vector<std::string> &args) {
        if (!args.empty())
          throw hkfac::Error("unexpected argument '" + args.front() + "'");
        const std::string weights = absl::GetFlag(FLAGS_weights);
        if (weights.empty())
          throw hkfac::Error("--weights is required");
        const int S = hkfac::tools::schedule_features_flag(absl::GetFlag(FLAGS_schedule_features));
        const int cores = hkfac::tools::num_cores_flag(absl::GetFlag(FLAGS_num_cores));
        const std::string out = absl::GetFlag(FLAGS_predictions_file);
        if (!out.empty())
          hkfac::tools::check_output_flag("--predictions_file", out);
        cm::WeightsLoadOptions load;
        load.expected_schedule_features = S;
        load.allow_version_mismatch = absl::GetFlag(FLAGS_allow_version_mismatch);
        std::vector<cm::Weights> members;
        try {
          for (const std::string &path : cm::split_weights_list(weights))
            members.push_back(cm::load_weights(path, load));
        } catch (const hkfac::Error &e) {
          throw hkfac::Error(std::string("--weights: ") + e.what());
        }

        std::vector<std::string> paths;
        if (const std::string list = absl::GetFlag(FLAGS_samples); !list.empty()) {
          try {
            paths = cm::read_path_list_file(list);
          } catch (const hkfac::Error &e) {
            throw hkfac::Error(std::string("--samples: ") + e.what());
          }
        } else {
          paths = cm::read_path_list(std::cin);
        }
        cm::SampleSet set = cm::load_samples(paths, S);
        for (const cm::SampleRejection &r : set.rejected)
          std::fprintf(stderr, "rejected %s: %s\n", r.path.c_str(), r.reason.c_str());
        if (set.num_samples() == 0)
          throw hkfac::Error("no usable samples (" + std::to_string(set.rejected.size()) +
                             " rejected)");
        const cm::TrainingData data =
            cm::make_training_data(std::move(set), S, cm::Split{cm::Split::Kind::none, ""}, false);

        // A file gets the predictions whole (temporary file and rename), stdout as they come.
        std::ostringstream text;
        std::ostream &os = out.empty() ? static_cast<std::ostream &>(std::cout) : text;
        os << "path,predicted,measured_ms\n";
        cm::Score score;
        for (const cm::PipelineData &p : data.pipelines) {
          // A schedule's members side by side, scored as the plugin scores them.
          const size_t m_count = members.size(), n = p.train.size();
          std::vector<float> by_schedule(n * m_count);
          for (size_t m = 0; m < m_count; ++m) {
            const std::vector<float> one = cm::predict(members[m], p, p.train, cores);
            for (size_t k = 0; k < n; ++k)
              by_schedule[k * m_count + m] = one[k];
          }
          std::vector<float> predicted(n);
          for (size_t k = 0; k < n; ++k)
            predicted[k] = static_cast<float>(
                cm::ensemble_prediction(by_schedule.data() + k * m_count, m_count));
          std::vector<float> measured;
          for (size_t k = 0; k < p.train.size(); ++k) {
            const int i = p.train[k];
            measured.push_back(p.runtimes_ms[i]);
            os << p.paths[i] << "," << predicted[k] << "," << p.runtimes_ms[i] << "\n";
          }
          cm::accumulate_score(predicted, measured, score);
        }
        cm::finish_score(score);
        std::fprintf(stderr,
                     "%zu schedules over %zu pipelines: loss %.4f, ordering accuracy %.3f "
                     "over %zu pairs more than %.1fx apart; the predicted fastest runs %.3fx the "
                     "fastest (geomean over %zu pipelines)\n",
                     data.train_schedules(), data.pipelines.size(), score.loss, score.accuracy,
                     score.pairs, cm::kOrderingRatio, score.top_regret, score.regret_pipelines);
        if (!out.empty())
          hkfac::tools::write_output_flag("--predictions_file", out, text.str());
        else if (!std::cout.flush())
          throw hkfac::Error("cannot write the predictions to stdout");
        return 0;
      });
}
