// retrain_cost_model end to end on synthetic samples: what it refuses before training, and that a
// run that learned nothing fails instead of writing weights.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "../cost_model_io/io_test_util.h"
#include "hkfac/cost_model/samples.h"
#include "hkfac/cost_model/weights.h"

namespace cm = hkfac::cost_model;
using hkfac::testing::ScratchDir;

namespace {

// Three pipelines of six schedules, listed in `dir`/list.txt.
std::string write_samples(const ScratchDir &dir) {
  std::string list;
  for (int p = 0; p < 3; ++p) {
    for (int k = 0; k < 6; ++k) {
      const std::string path =
          dir.file("p" + std::to_string(p) + "_" + std::to_string(k) + ".sample");
      cm::write_sample(hkfac::testing::synthetic_sample(39, 2, p, k), path);
      list += path + "\n";
    }
  }
  hkfac::testing::write_bytes(dir.file("list.txt"), std::vector<uint8_t>(list.begin(), list.end()));
  return dir.file("list.txt");
}

// Runs the tool with `flags`; returns its exit status and puts its stdout and stderr in *log.
int retrain(const ScratchDir &dir, const std::string &flags, std::string *log) {
  const std::string command =
      std::string(HKFAC_RETRAIN_COST_MODEL) + " " + flags + " >" + dir.file("log") + " 2>&1";
  const int status = std::system(command.c_str());
  const std::vector<uint8_t> bytes = hkfac::testing::read_bytes(dir.file("log"));
  log->assign(bytes.begin(), bytes.end());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(RetrainTool, NonFiniteTrainingFailsAndWritesNoWeights) {
  ScratchDir dir;
  const std::string list = write_samples(dir);
  // Finite, so the file loads, but large enough that every prediction overflows.
  cm::Weights huge = cm::random_weights(39, 1);
  for (hkfac::Buffer<float> *b : huge.buffers())
    hkfac::for_each_value(*b, [](float &v) { v = 1e30f; });
  cm::save_weights_file(huge, dir.file("huge.weights"));
  std::string log;
  EXPECT_EQ(retrain(dir,
                    "--initial_weights=" + dir.file("huge.weights") + " --optimizer=adam " +
                        "--epochs=1 --samples=" + list +
                        " --weights_out=" + dir.file("out.weights"),
                    &log),
            1)
      << log;
  EXPECT_NE(log.find("not writing --weights_out"), std::string::npos) << log;
  EXPECT_FALSE(std::filesystem::exists(dir.file("out.weights")));
}

TEST(RetrainTool, BadOutputPathIsReportedBeforeLoadingOrTraining) {
  ScratchDir dir;
  const std::string list = write_samples(dir);
  std::filesystem::create_directory(dir.file("taken.weights"));
  std::string log;
  EXPECT_EQ(retrain(dir,
                    "--randomize_weights --epochs=1 --samples=" + list +
                        " --weights_out=" + dir.file("taken.weights"),
                    &log),
            1);
  EXPECT_NE(log.find("--weights_out: " + dir.file("taken.weights") + ": is a directory"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("epoch"), std::string::npos) << log;
  EXPECT_EQ(log.find("samples ("), std::string::npos) << log;
}

TEST(RetrainTool, GoodRunWritesTheWeightsThroughASymlink) {
  ScratchDir dir;
  const std::string list = write_samples(dir);
  std::filesystem::create_symlink("real.weights", dir.file("link.weights"));
  std::string log;
  ASSERT_EQ(retrain(dir,
                    "--randomize_weights --epochs=1 --samples=" + list +
                        " --weights_out=" + dir.file("link.weights"),
                    &log),
            0)
      << log;
  EXPECT_TRUE(std::filesystem::is_symlink(dir.file("link.weights")));
  EXPECT_NO_THROW(cm::load_weights_file(dir.file("real.weights")));
}

} // namespace
