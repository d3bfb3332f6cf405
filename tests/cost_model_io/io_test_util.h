// Helpers for the cost-model file tests: scratch directories, raw bytes, synthetic samples.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "hkfac/cost_model/samples.h"
#include "hkfac/error.h"

namespace hkfac::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it at scope exit.
class ScratchDir {
public:
  ScratchDir() {
    const char *base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/hkfac_io_XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr)
      throw Error("mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir &) = delete;
  ScratchDir &operator=(const ScratchDir &) = delete;

  const std::string &path() const { return path_; }
  std::string file(const std::string &name) const { return path_ + "/" + name; }

private:
  std::string path_;
};

inline std::vector<uint8_t> read_bytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error("cannot open " + path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::string &path, const std::vector<uint8_t> &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char *>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out)
    throw Error("cannot write " + path);
}

// Explicit little-endian bytes, written out independently of the library's own helpers.
inline void push_le32(std::vector<uint8_t> &out, uint32_t v) {
  for (int i = 0; i < 4; i++)
    out.push_back(static_cast<uint8_t>((v >> (8 * i)) & 0xff));
}

// A plausible sample: small non-negative features, a runtime that depends on them, so a trainer
// has something to learn. Same pipeline id and seed give the same algorithm features.
inline cost_model::Sample synthetic_sample(int s, int stages, int32_t pipeline_id,
                                           int32_t schedule_id) {
  namespace cm = cost_model;
  cm::Sample smp;
  smp.num_stages = stages;
  smp.schedule_features = Buffer<float>(s, stages);
  smp.types_in_use = Buffer<float>(cm::kTypesInUseFeatures, stages);
  smp.pipeline_features =
      Buffer<float>(cm::kPipelineFeatureRows, cm::kPipelineFeatureTypes, stages);
  std::mt19937 pipeline_rng(static_cast<uint32_t>(pipeline_id));
  std::uniform_int_distribution<int> count(0, 4);
  hkfac::for_each_value(smp.types_in_use,
                        [&](float &v) { v = static_cast<float>(count(pipeline_rng) & 1); });
  hkfac::for_each_value(smp.pipeline_features,
                        [&](float &v) { v = static_cast<float>(count(pipeline_rng)); });
  std::mt19937 schedule_rng(static_cast<uint32_t>(pipeline_id * 7919 + schedule_id));
  std::uniform_real_distribution<float> u(0.0f, 64.0f);
  double work = 0;
  hkfac::for_each_value(smp.schedule_features, [&](float &v) {
    v = u(schedule_rng);
    work += v;
  });
  // Schedules of a pipeline differ by well over measurement noise, as real ones mostly do.
  smp.runtime_ms = static_cast<float>((1 + static_cast<uint32_t>(schedule_id) % 16) *
                                      (0.5 + work / (s * stages)));
  smp.pipeline_id = pipeline_id;
  smp.schedule_id = schedule_id;
  return smp;
}

} // namespace hkfac::testing
