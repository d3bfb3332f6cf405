// Interop with Halide 14's Adams2019 tools: our files are accepted by them, theirs by us, and our
// tools write the same bytes as theirs. Skipped where Halide 14's tools are not installed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "hkfac/cost_model/samples.h"
#include "hkfac/cost_model/weights.h"
#include "io_test_util.h"

namespace cm = hkfac::cost_model;
using hkfac::testing::read_bytes;
using hkfac::testing::ScratchDir;
using hkfac::testing::synthetic_sample;
using hkfac::testing::write_bytes;

namespace {

const std::string kHalideTools = HKFAC_HALIDE14_TOOLS_DIR;

bool executable(const std::string &path) { return ::access(path.c_str(), X_OK) == 0; }

#define SKIP_WITHOUT(tool)                                                                         \
  do {                                                                                             \
    if (!executable(kHalideTools + "/" + (tool))) {                                                \
      GTEST_SKIP() << "Halide 14's " << (tool) << " not found in " << kHalideTools;                \
    }                                                                                              \
  } while (0)

// Runs `command` with stdout and stderr captured in `log`; returns the exit status.
int run(const std::string &command, const std::string &log) {
  const int status = std::system((command + " >" + log + " 2>&1").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string read_text(const std::string &path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

float max_abs_difference(const cm::Weights &a, const cm::Weights &b) {
  float worst = 0;
  for (int i = 0; i < cm::kNumWeightBuffers; i++) {
    const float *x = a.buffers()[i]->data(), *y = b.buffers()[i]->data();
    for (size_t k = 0; k < a.buffers()[i]->number_of_elements(); k++) {
      worst = std::max(worst, std::abs(x[k] - y[k]));
    }
  }
  return worst;
}

// A few pipelines with several schedules each, written by our writer; returns the list file.
std::string write_training_set(const ScratchDir &dir) {
  std::ofstream list(dir.file("samples.txt"));
  for (int pipeline = 1; pipeline <= 3; pipeline++) {
    for (int schedule = 0; schedule < 8; schedule++) {
      const std::string path =
          dir.file("p" + std::to_string(pipeline) + "_s" + std::to_string(schedule) + ".sample");
      cm::write_sample(synthetic_sample(39, 2 + pipeline, 1000 + pipeline, schedule), path);
      list << path << "\n";
    }
  }
  return dir.file("samples.txt");
}

cm::WeightsLoadOptions allow_versions() {
  cm::WeightsLoadOptions o;
  o.allow_version_mismatch = true;
  return o;
}

TEST(Halide14Interop, WeightsdirToWeightsfileMatchesHalideByteForByteWithHalideVersions) {
  SKIP_WITHOUT("weightsdir_to_weightsfile");
  ScratchDir dir;
  const cm::Weights w = cm::random_weights(39, 5);
  cm::save_weights_dir(w, dir.file("old"));
  ASSERT_EQ(run(kHalideTools + "/weightsdir_to_weightsfile " + dir.file("old") + " " +
                    dir.file("halide.weights"),
                dir.file("log")),
            0)
      << read_text(dir.file("log"));
  ASSERT_EQ(run(std::string(HKFAC_WEIGHTSDIR_TO_WEIGHTSFILE) + " --halide_versions " +
                    dir.file("old") + " " + dir.file("ours3.weights"),
                dir.file("log")),
            0)
      << read_text(dir.file("log"));
  ASSERT_EQ(run(std::string(HKFAC_WEIGHTSDIR_TO_WEIGHTSFILE) + " " + dir.file("old") + " " +
                    dir.file("ours.weights"),
                dir.file("log")),
            0)
      << read_text(dir.file("log"));
  EXPECT_NE(read_text(dir.file("log")).find("has no versions"), std::string::npos);
  const std::vector<uint8_t> halide = read_bytes(dir.file("halide.weights"));
  EXPECT_EQ(read_bytes(dir.file("ours3.weights")), halide);
  // With our own versions only bytes 4..11 (the two versions) differ.
  std::vector<uint8_t> ours = read_bytes(dir.file("ours.weights"));
  const cm::Weights loaded = cm::load_weights_file(dir.file("ours.weights"));
  EXPECT_EQ(loaded.pipeline_features_version, cm::kPipelineFeaturesVersion);
  std::copy(halide.begin() + 4, halide.begin() + 12, ours.begin() + 4);
  EXPECT_EQ(ours, halide);
}

TEST(Halide14Interop, FeaturizationToSampleMatchesHalideByteForByte) {
  SKIP_WITHOUT("featurization_to_sample");
  ScratchDir dir;
  std::vector<uint8_t> featurization = cm::serialize_sample(synthetic_sample(39, 4, 9, 9));
  featurization.resize(featurization.size() - 12);
  write_bytes(dir.file("in.featurization"), featurization);
  const std::string in = dir.file("in.featurization");
  // Runtimes chosen to exercise the seconds -> milliseconds rounding; ids at the int32 limits.
  const char *cases[] = {"0.0123 7 3", "1e-3 0 0", "2.5 2147483647 12", "0.1 -5 -2147483648",
                         "3.3333333333 123 456"};
  for (const std::string args : cases) {
    ASSERT_EQ(run(kHalideTools + "/featurization_to_sample " + in + " " + args + " " +
                      dir.file("halide.sample"),
                  dir.file("log")),
              0)
        << read_text(dir.file("log"));
    // "--" ends the flags, so absl takes negative ids as positional arguments.
    ASSERT_EQ(run(std::string(HKFAC_FEATURIZATION_TO_SAMPLE) + " -- " + in + " " + args + " " +
                      dir.file("ours.sample"),
                  dir.file("log")),
              0)
        << args << ": " << read_text(dir.file("log"));
    EXPECT_EQ(read_bytes(dir.file("ours.sample")), read_bytes(dir.file("halide.sample"))) << args;
  }
  // Where Halide's tool would write garbage, ours says why and fails.
  EXPECT_NE(run(std::string(HKFAC_FEATURIZATION_TO_SAMPLE) + " -- " + in + " -1 1 1 " +
                    dir.file("bad.sample"),
                dir.file("log")),
            0);
  EXPECT_NE(read_text(dir.file("log")).find("runtime must be finite and > 0"), std::string::npos)
      << read_text(dir.file("log"));
  EXPECT_NE(run(std::string(HKFAC_FEATURIZATION_TO_SAMPLE) + " " + in + " 0 1 1 " +
                    dir.file("bad.sample"),
                dir.file("log")),
            0);
  EXPECT_NE(read_text(dir.file("log")).find("runtime must be finite and > 0"), std::string::npos)
      << read_text(dir.file("log"));
}

TEST(Halide14Interop, RetrainCostModelTrainsFromOurWeightsAndSamples) {
  SKIP_WITHOUT("retrain_cost_model");
  ScratchDir dir;
  const std::string list = write_training_set(dir);
  const cm::Weights initial = cm::random_weights(39, 99);
  cm::save_weights_file(initial, dir.file("ours.weights"));
  const int rc = run(
      kHalideTools + "/retrain_cost_model --initial_weights=" + dir.file("ours.weights") +
          " --epochs=1 --rates=0.0001 --num_cores=2" + " --weights_out=" + dir.file("out.weights") +
          " --best_benchmark=" + dir.file("best.txt") + " --best_schedule=" + dir.file("best.h") +
          " <" + list,
      dir.file("log"));
  const std::string log = read_text(dir.file("log"));
  ASSERT_EQ(rc, 0) << log;
  EXPECT_EQ(log.find("Rejecting"), std::string::npos) << log;
  // It ran a training pass and ranked schedule pairs (the rate is NaN when no pair counted).
  EXPECT_NE(log.find("Loss:"), std::string::npos) << log;
  const size_t rate = log.find("Rate: ");
  ASSERT_NE(rate, std::string::npos) << log;
  EXPECT_TRUE(std::isfinite(std::strtof(log.c_str() + rate + 6, nullptr))) << log;
  // Halide 14 checks the versions but only warns; its output carries its own (3, 3).
  EXPECT_NE(log.find("pipeline_version = 101"), std::string::npos) << log;
  EXPECT_EQ(log.find("randomiz"), std::string::npos) << log;
  const cm::Weights out = cm::load_weights_file(dir.file("out.weights"), allow_versions());
  EXPECT_EQ(out.pipeline_features_version, cm::kHalideAdams2019Version);
  // Trained (changed) but from our weights: one epoch at rate 1e-4 moves them only slightly.
  const float moved = max_abs_difference(initial, out);
  EXPECT_GT(moved, 0.0f);
  EXPECT_LT(moved, 0.05f);
  EXPECT_NE(read_text(dir.file("best.txt")).find("Best runtime"), std::string::npos);
}

TEST(Halide14Interop, HalideRandomizedWeightsLoadWithTheVersionAllowance) {
  SKIP_WITHOUT("retrain_cost_model");
  ScratchDir dir;
  const std::string list = write_training_set(dir);
  // Halide's flag parser wants booleans as 0/1: "--randomize_weights" or "=true" is an error.
  const int rc =
      run(kHalideTools + "/retrain_cost_model --randomize_weights=1 --epochs=1" +
              " --rates=0.0001 --num_cores=2 --weights_out=" + dir.file("halide.weights") +
              " --best_benchmark=" + dir.file("best.txt") +
              " --best_schedule=" + dir.file("best.h") + " <" + list,
          dir.file("log"));
  ASSERT_EQ(rc, 0) << read_text(dir.file("log"));
  try {
    cm::load_weights_file(dir.file("halide.weights"));
    ADD_FAILURE() << "version 3 accepted without the allowance";
  } catch (const hkfac::Error &e) {
    EXPECT_NE(std::string(e.what()).find("found 3"), std::string::npos) << e.what();
  }
  const cm::Weights w = cm::load_weights_file(dir.file("halide.weights"), allow_versions());
  EXPECT_EQ(w.schedule_features(), 39);
  EXPECT_EQ(w.schedule_features_version, cm::kHalideAdams2019Version);
  // And it round-trips through our writer unchanged.
  cm::save_weights_file(w, dir.file("again.weights"));
  EXPECT_EQ(read_bytes(dir.file("again.weights")), read_bytes(dir.file("halide.weights")));
}

} // namespace
