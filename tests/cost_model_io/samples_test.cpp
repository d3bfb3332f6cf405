// .sample files: round trips, validation reasons, grouping samples by pipeline, and the
// featurization_to_sample conversion.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <sstream>

#include <sys/stat.h>
#include <unistd.h>

#include "hkfac/cost_model/samples.h"
#include "io_test_util.h"

namespace cm = hkfac::cost_model;
using hkfac::testing::push_le32;
using hkfac::testing::ScratchDir;
using hkfac::testing::synthetic_sample;
using hkfac::testing::write_bytes;

namespace {

std::string parse_error(const std::vector<uint8_t> &bytes, int s = 39) {
  try {
    cm::parse_sample(bytes.data(), bytes.size(), s, "x.sample");
  } catch (const hkfac::Error &e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an hkfac::Error";
  return "";
}

void put_float(std::vector<uint8_t> &bytes, size_t offset, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  for (int i = 0; i < 4; i++)
    bytes[offset + i] = static_cast<uint8_t>(bits >> (8 * i));
}

TEST(Sample, WriteThenLoadIsEqualForCpuAndGpu) {
  for (int s : {39, 73}) {
    ScratchDir dir;
    const cm::Sample smp = synthetic_sample(s, 5, 1234, -7);
    cm::write_sample(smp, dir.file("a.sample"));
    const cm::Sample back = cm::load_sample(dir.file("a.sample"), s);
    EXPECT_EQ(back.num_stages, 5);
    EXPECT_EQ(back.runtime_ms, smp.runtime_ms);
    EXPECT_EQ(back.pipeline_id, 1234);
    EXPECT_EQ(back.schedule_id, -7);
    EXPECT_EQ(cm::serialize_sample(back), cm::serialize_sample(smp));
    EXPECT_EQ(std::memcmp(back.pipeline_features.data(), smp.pipeline_features.data(),
                          smp.pipeline_features.size_in_bytes()),
              0);
  }
}

TEST(Sample, LayoutIsScheduleThenTypesThenGridPerStageThenTrailer) {
  const int s = 39, stages = 2;
  std::vector<uint8_t> bytes;
  // Feature k of stage st holds the value st * 1000 + k, so every position is recognisable.
  for (int st = 0; st < stages; st++) {
    for (int k = 0; k < s + cm::kAlgorithmFeatures; k++) {
      const float v = static_cast<float>(st * 1000 + k);
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      push_le32(bytes, bits);
    }
  }
  const float runtime = 2.5f;
  uint32_t bits;
  std::memcpy(&bits, &runtime, 4);
  push_le32(bytes, bits);
  push_le32(bytes, 77);
  push_le32(bytes, 0xffffffff);
  const cm::Sample smp = cm::parse_sample(bytes.data(), bytes.size(), s, "hand.sample");
  EXPECT_EQ(smp.num_stages, 2);
  EXPECT_EQ(smp.schedule_features(38, 1), 1038.0f);
  EXPECT_EQ(smp.types_in_use(6, 1), 1000.0f + 39 + 6);
  // Grid element (i, j) is algorithm feature 7 + i * 7 + j.
  EXPECT_EQ(smp.pipeline_features(3, 5, 0), 39.0f + 7 + 3 * 7 + 5);
  EXPECT_EQ(smp.pipeline_features(39, 6, 1), 1000.0f + 39 + 286);
  EXPECT_EQ(smp.runtime_ms, 2.5f);
  EXPECT_EQ(smp.pipeline_id, 77);
  EXPECT_EQ(smp.schedule_id, -1);
  EXPECT_EQ(cm::serialize_sample(smp), bytes);
}

TEST(Sample, EachBadCaseIsRejectedWithItsReason) {
  const std::vector<uint8_t> good = cm::serialize_sample(synthetic_sample(39, 3, 1, 1));
  const size_t stage_bytes = cm::featurization_stage_bytes(39);
  const size_t trailer = good.size() - 12;

  std::vector<uint8_t> bytes(good.begin(), good.end() - 1);
  EXPECT_NE(parse_error(bytes).find("is not 12 + a multiple of 1304 bytes per stage"),
            std::string::npos);
  EXPECT_NE(parse_error({1, 2, 3}).find("smaller than the 12-byte trailer"), std::string::npos);
  bytes.assign(good.end() - 12, good.end());
  EXPECT_NE(parse_error(bytes).find("no stages"), std::string::npos);
  bytes = cm::serialize_sample(synthetic_sample(73, 2, 1, 1));
  EXPECT_NE(parse_error(bytes).find("it fits S = 73"), std::string::npos) << parse_error(bytes);

  for (float runtime : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::infinity()}) {
    bytes = good;
    put_float(bytes, trailer, runtime);
    EXPECT_NE(parse_error(bytes).find("runtime must be finite and > 0 ms"), std::string::npos);
  }
  bytes = good;
  put_float(bytes, stage_bytes + 4 * 5, std::numeric_limits<float>::quiet_NaN());
  EXPECT_NE(parse_error(bytes).find("stage 1 schedule feature 5 is not finite"), std::string::npos);
  bytes = good;
  put_float(bytes, 2 * stage_bytes + 4 * (39 + 20), -3.0f);
  EXPECT_NE(parse_error(bytes).find("stage 2 algorithm feature 20 is negative: -3"),
            std::string::npos);
  EXPECT_NE(parse_error(good, 73).find("fits S = 39"), std::string::npos);
}

TEST(Sample, AbsurdStageCountIsRejectedBeforeReading) {
  ScratchDir dir;
  const std::string path = dir.file("huge.sample");
  {
    std::ofstream out(path, std::ios::binary);
    out.seekp(12 + (cm::kMaxSampleStages + 1) * cm::featurization_stage_bytes(39) - 1);
    out.put(0); // sparse: no real data written
  }
  try {
    cm::load_sample(path, 39);
    FAIL() << "expected an error";
  } catch (const hkfac::Error &e) {
    EXPECT_NE(std::string(e.what()).find("10001 stages, more than the 10000"), std::string::npos)
        << e.what();
  }
}

TEST(Sample, FeaturizationToSampleAppendsRuntimeAndIds) {
  const cm::Sample smp = synthetic_sample(73, 2, 5, 6);
  std::vector<uint8_t> bytes = cm::serialize_sample(smp);
  const std::vector<uint8_t> featurization(bytes.begin(), bytes.end() - 12);
  EXPECT_EQ(cm::featurization_to_sample(featurization, smp.runtime_ms, 5, 6, 0, "f"), bytes);
  EXPECT_THROW(cm::featurization_to_sample(featurization, 1.0f, 5, 6, 39, "f"), hkfac::Error);
  EXPECT_THROW(cm::featurization_to_sample(featurization, -1.0f, 5, 6, 73, "f"), hkfac::Error);
}

TEST(Sample, FeaturizationFileToSampleRefusesToReplaceItsInput) {
  ScratchDir dir;
  const std::vector<uint8_t> sample = cm::serialize_sample(synthetic_sample(39, 2, 5, 6));
  const std::vector<uint8_t> featurization(sample.begin(), sample.end() - 12);
  const std::string in = dir.file("in.featurization");
  write_bytes(in, featurization);
  std::filesystem::create_symlink("in.featurization", dir.file("alias.sample"));
  for (const std::string &out :
       {in, dir.path() + "/./in.featurization", dir.file("alias.sample")}) {
    try {
      cm::featurization_file_to_sample(in, 1.0f, 5, 6, 39, out);
      ADD_FAILURE() << out << " accepted";
    } catch (const hkfac::Error &e) {
      EXPECT_NE(std::string(e.what()).find("is the input"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(hkfac::testing::read_bytes(in), featurization);
  cm::featurization_file_to_sample(in, 1.0f, 5, 6, 39, dir.file("out.sample"));
  EXPECT_EQ(hkfac::testing::read_bytes(dir.file("out.sample")).size(), sample.size());
}

// See FifoIsRefusedWithoutBlocking in weights_test.cpp: a child an alarm kills if it blocks.
TEST(Sample, FifoIsRefusedWithoutBlocking) {
  ScratchDir dir;
  const std::string fifo = dir.file("x.sample");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  EXPECT_EXIT(
      {
        ::alarm(10);
        const cm::SampleSet set = cm::load_samples({fifo}, 39, 1);
        const bool ok = set.rejected.size() == 1 &&
                        set.rejected[0].reason.find("is a FIFO") != std::string::npos;
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// The tool's positional numbers are plain decimals: strtod's hex, inf and leading spaces are not.
TEST(Sample, FeaturizationToSampleToolRefusesNonDecimalNumbers) {
  ScratchDir dir;
  const std::vector<uint8_t> sample = cm::serialize_sample(synthetic_sample(39, 2, 5, 6));
  write_bytes(dir.file("in.featurization"),
              std::vector<uint8_t>(sample.begin(), sample.end() - 12));
  const auto run = [&](const std::string &args) {
    const std::string command = std::string(HKFAC_FEATURIZATION_TO_SAMPLE) + " -- " +
                                dir.file("in.featurization") + " " + args + " " +
                                dir.file("out.sample") + " >" + dir.file("log") + " 2>&1";
    return std::system(command.c_str());
  };
  for (const std::string bad :
       {"0x1p-4 1 2", "' 0.5' 1 2", "inf 1 2", "0.5 0x10 2", "0.5 ' 1' 2", "1e-3e4 1 2"}) {
    EXPECT_NE(run(bad), 0) << bad << " accepted";
    const std::vector<uint8_t> log = hkfac::testing::read_bytes(dir.file("log"));
    EXPECT_NE(std::string(log.begin(), log.end()).find("expected a"), std::string::npos) << bad;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("out.sample")));
  EXPECT_EQ(run("1.5e-3 -1 +2"), 0);
  EXPECT_TRUE(std::filesystem::exists(dir.file("out.sample")));
}

TEST(SampleSet, ReadPathListTrimsAndSkipsBlankLines) {
  std::istringstream in("a.sample\n  b.sample \r\n\n\t\nc d.sample\n");
  EXPECT_EQ(cm::read_path_list(in),
            (std::vector<std::string>{"a.sample", "b.sample", "c d.sample"}));
}

// The tools' --samples takes a list file; a directory or a .sample in its place is named as
// such rather than read as an empty or garbled list.
TEST(SampleSet, ReadPathListFileNamesWhatIsWrongWithTheFile) {
  ScratchDir dir;
  const auto error_of = [](const std::string &path) -> std::string {
    try {
      cm::read_path_list_file(path);
    } catch (const hkfac::Error &e) {
      return e.what();
    }
    return "";
  };
  const std::string list = dir.file("list.txt");
  const std::string text = "x.sample\n y.sample\n";
  write_bytes(list, std::vector<uint8_t>(text.begin(), text.end()));
  EXPECT_EQ(cm::read_path_list_file(list), (std::vector<std::string>{"x.sample", "y.sample"}));

  EXPECT_NE(error_of(dir.path()).find("is a directory"), std::string::npos) << error_of(dir.path());
  EXPECT_NE(error_of(dir.file("missing")).find("cannot open"), std::string::npos);
  const std::string sample = dir.file("a.sample");
  cm::write_sample(synthetic_sample(39, 2, 1, 0), sample);
  EXPECT_NE(error_of(sample).find("NUL byte"), std::string::npos) << error_of(sample);
}

TEST(SampleSet, GroupsByPipelineAndRejectsInconsistentSamplesWithReasons) {
  ScratchDir dir;
  std::vector<std::string> paths;
  const auto add = [&](const std::string &name, const cm::Sample &smp) {
    paths.push_back(dir.file(name));
    cm::write_sample(smp, paths.back());
  };
  for (int i = 0; i < 4; i++)
    add("p1_" + std::to_string(i), synthetic_sample(39, 3, 1, i));
  for (int i = 0; i < 3; i++)
    add("p2_" + std::to_string(i), synthetic_sample(39, 4, 2, i));
  add("stages", synthetic_sample(39, 4, 1, 10));
  cm::Sample other = synthetic_sample(39, 3, 1, 11);
  other.pipeline_features(2, 3, 1) += 1;
  add("features", other);
  add("duplicate", synthetic_sample(39, 3, 1, 2));
  paths.push_back(dir.file("missing.sample"));
  write_bytes(dir.file("short.sample"), {0, 0, 0});
  paths.push_back(dir.file("short.sample"));

  for (int threads : {1, 3}) {
    const cm::SampleSet set = cm::load_samples(paths, 39, threads);
    ASSERT_EQ(set.pipelines.size(), 2u);
    EXPECT_EQ(set.pipelines[0].pipeline_id, 1);
    EXPECT_EQ(set.pipelines[0].samples.size(), 4u);
    EXPECT_EQ(set.pipelines[1].num_stages, 4);
    EXPECT_EQ(set.num_samples(), 7u);
    ASSERT_EQ(set.rejected.size(), 5u);
    EXPECT_EQ(set.rejected[0].path, dir.file("stages"));
    EXPECT_EQ(set.rejected[0].reason, "pipeline 1 has 4 stages here but 3 in " + dir.file("p1_0"));
    EXPECT_EQ(set.rejected[1].reason,
              "pipeline 1: stage 1 algorithm feature 24 differs from " + dir.file("p1_0"));
    EXPECT_EQ(set.rejected[2].reason, "pipeline 1 schedule 2 duplicates " + dir.file("p1_2"));
    EXPECT_NE(set.rejected[3].reason.find("cannot open"), std::string::npos);
    EXPECT_NE(set.rejected[4].reason.find("smaller than the 12-byte trailer"), std::string::npos);
  }
}

} // namespace
