// generate_data.py's sample writer against the C++ sample reader the trainer uses, and its
// pipeline ids against the trainer's (issue: the writer must round-trip through the reader).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "hkfac/cost_model/samples.h"
#include "hkfac/cost_model/training_data.h"

namespace hkfac::cost_model {
namespace {

std::string capture(const std::string &cmd) {
  std::string out;
  FILE *p = popen(cmd.c_str(), "r");
  if (!p)
    return out;
  char buf[256];
  while (fgets(buf, sizeof buf, p))
    out += buf;
  pclose(p);
  return out;
}

bool have_python() { return std::system("python3 -c 'import struct' >/dev/null 2>&1") == 0; }

TEST(SampleWriter, GenerateDataSamplesLoadInTheTrainersReader) {
  if (!have_python())
    GTEST_SKIP() << "python3 missing";
  const int S = kCpuScheduleFeatures, stages = 3;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.0f, 1000.0f);
  std::vector<float> feat(static_cast<size_t>(stages) * (S + kAlgorithmFeatures));
  for (float &v : feat)
    v = std::floor(u(rng));
  const std::string dir = ::testing::TempDir();
  const std::string fz = dir + "/writer_test.featurization", sample = dir + "/writer_test.sample";
  {
    std::ofstream f(fz, std::ios::binary);
    f.write(reinterpret_cast<const char *>(feat.data()),
            static_cast<std::streamsize>(feat.size() * 4));
  }
  const std::string cmd = "python3 -c \"import sys; sys.path.insert(0, '" HKFAC_SOURCE_DIR
                          "/apps/tools'); import generate_data as g; g.write_sample('" +
                          fz + "', 12.5, 123456, 7, '" + sample + "')\"";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const Sample s = load_sample(sample, S);
  EXPECT_EQ(s.num_stages, stages);
  EXPECT_EQ(s.runtime_ms, 12.5f);
  EXPECT_EQ(s.pipeline_id, 123456);
  EXPECT_EQ(s.schedule_id, 7);
  for (int st = 0; st < stages; ++st) {
    const float *stage = feat.data() + static_cast<size_t>(st) * (S + kAlgorithmFeatures);
    for (int f = 0; f < S; ++f)
      ASSERT_EQ(s.schedule_features(f, st), stage[f]) << "stage " << st << " feature " << f;
    for (int i = 0; i < kPipelineFeatureRows; ++i) {
      for (int j = 0; j < kPipelineFeatureTypes; ++j) {
        ASSERT_EQ(s.pipeline_features(i, j, st), stage[S + kTypesInUseFeatures + i * 7 + j]);
      }
    }
  }
}

TEST(SampleWriter, PipelineIdsMatchGenerateData) {
  if (!have_python())
    GTEST_SKIP() << "python3 missing";
  for (const std::string name : {"harris", "random_pipeline_g2_seed17_stages6", "local_laplacian"}) {
    const std::string out =
        capture("python3 -c \"import zlib; print(zlib.crc32(b'" + name + "') & 0x7FFFFFFF)\"");
    EXPECT_EQ(std::to_string(pipeline_id_for(name)) + "\n", out) << name;
  }
}

} // namespace
} // namespace hkfac::cost_model
