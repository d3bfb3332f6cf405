// retrain_cost_model end to end on synthetic samples: what it refuses before training (naming the
// flag that would fix it), that a run that learned nothing fails instead of writing weights, and
// what its outputs say.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
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

TEST(RetrainTool, SeveralAdamRatesSayWhichRatesWeightsWereWritten) {
  ScratchDir dir;
  const std::string list = write_samples(dir);
  std::string log;
  ASSERT_EQ(retrain(dir,
                    "--randomize_weights --optimizer=adam --rates=0.001,0.01 --epochs=1 "
                    "--samples=" +
                        list + " --weights_out=" + dir.file("out.weights"),
                    &log),
            0)
      << log;
  EXPECT_NE(log.find("wrote " + dir.file("out.weights") + ": the weights of Adam rate "),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("of the 2 rates"), std::string::npos) << log;
}

TEST(RetrainTool, InitialWeightsForTheOtherWidthSuggestScheduleFeatures73) {
  ScratchDir dir;
  const std::string list = write_samples(dir);
  cm::save_weights_file(cm::random_weights(73, 1), dir.file("gpu.weights"));
  std::string log;
  EXPECT_EQ(retrain(dir,
                    "--initial_weights=" + dir.file("gpu.weights") + " --epochs=1 --samples=" +
                        list + " --weights_out=" + dir.file("out.weights"),
                    &log),
            1)
      << log;
  EXPECT_NE(log.find("--initial_weights: "), std::string::npos) << log;
  EXPECT_NE(log.find("pass --schedule_features=73"), std::string::npos) << log;
}

TEST(RetrainTool, ForeignVersionNamesAllowVersionMismatchAndLoadsWithIt) {
  ScratchDir dir;
  const std::string list = write_samples(dir);
  cm::Weights halide = cm::random_weights(39, 1);
  halide.pipeline_features_version = cm::kHalideAdams2019Version;
  halide.schedule_features_version = cm::kHalideAdams2019Version;
  cm::save_weights_file(halide, dir.file("halide.weights"));
  const std::string flags = "--initial_weights=" + dir.file("halide.weights") +
                            " --epochs=1 --samples=" + list +
                            " --weights_out=" + dir.file("out.weights");
  std::string log;
  EXPECT_EQ(retrain(dir, flags, &log), 1) << log;
  EXPECT_NE(log.find("pass --allow_version_mismatch"), std::string::npos) << log;
  EXPECT_EQ(retrain(dir, flags + " --allow_version_mismatch", &log), 0) << log;
}

// Three copies of one schedule (same features), the middle one fastest; each copy's runtime is
// 10, 2 and 5 ms in that order, so the merged schedule's time and file are the second copy's.
std::string write_repeated_schedule(const ScratchDir &dir, const std::string &list) {
  std::string paths;
  const float runtimes[] = {10.0f, 2.0f, 5.0f};
  for (int copy = 0; copy < 3; ++copy) {
    cm::Sample s = hkfac::testing::synthetic_sample(39, 2, 0, 100);
    s.runtime_ms = runtimes[copy];
    s.schedule_id = 100 + copy;
    const std::string path = dir.file("repeat_" + std::to_string(copy) + ".sample");
    cm::write_sample(s, path);
    paths += path + "\n";
  }
  const std::vector<uint8_t> old = hkfac::testing::read_bytes(list);
  std::string all(old.begin(), old.end());
  all += paths;
  hkfac::testing::write_bytes(dir.file("all.txt"), std::vector<uint8_t>(all.begin(), all.end()));
  return dir.file("all.txt");
}

TEST(RetrainTool, PredictionsOfMergedRepeatsNameTheFileWhoseTimeTheyGive) {
  ScratchDir dir;
  const std::string list = write_repeated_schedule(dir, write_samples(dir));
  std::string log;
  ASSERT_EQ(retrain(dir,
                    "--randomize_weights --epochs=0 --samples=" + list +
                        " --weights_out=" + dir.file("out.weights") +
                        " --predictions_file=" + dir.file("predictions.csv"),
                    &log),
            0)
      << log;
  std::ifstream in(dir.file("predictions.csv"));
  std::string line, repeat_rows;
  int rows = 0;
  while (std::getline(in, line)) {
    if (line.find("repeat_") != std::string::npos) {
      repeat_rows += line + "\n";
      ++rows;
    }
  }
  ASSERT_EQ(rows, 1) << repeat_rows;
  EXPECT_EQ(repeat_rows.rfind(dir.file("repeat_1.sample") + ",", 0), 0u) << repeat_rows;
  EXPECT_NE(repeat_rows.find(",2,"), std::string::npos) << repeat_rows;
}

TEST(RetrainTool, BestBenchmarkIsHalidesLine) {
  ScratchDir dir;
  const std::string list = write_repeated_schedule(dir, write_samples(dir));
  std::string log;
  ASSERT_EQ(retrain(dir,
                    "--randomize_weights --epochs=0 --samples=" + list + " --weights_out=" +
                        dir.file("out.weights") + " --best_benchmark=" + dir.file("best.txt"),
                    &log),
            0)
      << log;
  // Halide's words around the fastest sample's runtime, schedule id and path.
  const std::vector<uint8_t> bytes = hkfac::testing::read_bytes(dir.file("best.txt"));
  const std::string text(bytes.begin(), bytes.end());
  std::istringstream words(text);
  std::string best, runtime, is, msec, from, schedule, id_word, in, file, path;
  float ms = 0;
  int id = -1;
  words >> best >> runtime >> is >> ms >> msec >> from >> schedule >> id_word >> id >> in >> file >>
      path;
  EXPECT_EQ(best + " " + runtime + " " + is, "Best runtime is") << text;
  EXPECT_EQ(text.substr(text.find(" msec,")),
            " msec, from schedule id " + std::to_string(id) + " in file " + path + "\n")
      << text;
  const cm::Sample fastest = cm::load_sample(path, 39);
  EXPECT_EQ(fastest.schedule_id, id) << text;
  EXPECT_NEAR(ms, fastest.runtime_ms, 1e-5 * fastest.runtime_ms) << text;
}

} // namespace
