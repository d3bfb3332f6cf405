// Converts an old cost-model weights directory (six raw .data files) into one .weights file.
#include <absl/flags/flag.h>

#include <cstdio>

#include "hkfac/cost_model/weights.h"
#include "hkfac/error.h"
#include "tool_main.h"

ABSL_FLAG(int, schedule_features, 0,
          "Schedule features S (39 CPU, 73 GPU); 0 = infer from head2_conv1_weight.data's size");
ABSL_FLAG(bool, halide_versions, false,
          "Write Halide 14's Adams2019 versions (3, 3) instead of ours");

int main(int argc, char **argv) {
  namespace cm = hkfac::cost_model;
  return hkfac::tools::run_tool(
      argc, argv, "weightsdir_to_weightsfile", "tools/weightsdir_to_weightsfile.cpp",
      "Usage: weightsdir_to_weightsfile [flags] WEIGHTS_DIR OUT.weights\n"
      "Converts an old weights directory into an hwf1 .weights file (like Halide's tool).",
      [](const std::vector<std::string> &args) {
        if (args.size() != 2) {
          throw hkfac::Error("expected 2 arguments (WEIGHTS_DIR OUT.weights), got " +
                             std::to_string(args.size()) + "; see --help");
        }
        const int S = absl::GetFlag(FLAGS_schedule_features);
        if (S != 0 && S != cm::kCpuScheduleFeatures && S != cm::kGpuScheduleFeatures) {
          throw hkfac::Error("--schedule_features: expected 0, 39 (CPU) or 73 (GPU), got " +
                             std::to_string(S));
        }
        cm::WeightsLoadOptions options;
        options.expected_schedule_features = S;
        cm::Weights w = cm::load_weights_dir(args[0], options);
        if (absl::GetFlag(FLAGS_halide_versions)) {
          w.pipeline_features_version = cm::kHalideAdams2019Version;
          w.schedule_features_version = cm::kHalideAdams2019Version;
        }
        cm::save_weights_file(w, args[1]);
        // The directory format carries no versions, so the ones written are an assumption.
        std::printf("wrote %s (S = %d); %s has no versions, wrote pipeline/schedule features "
                    "versions %u/%u\n",
                    args[1].c_str(), w.schedule_features(), args[0].c_str(),
                    w.pipeline_features_version, w.schedule_features_version);
        return 0;
      });
}
