// libFuzzer target: the .sample parser (both S) and featurization_to_sample on arbitrary bytes
// must throw hkfac::Error or produce a sample that serialises back to exactly the input.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "hkfac/cost_model/samples.h"

namespace cm = hkfac::cost_model;

namespace {

cm::Sample seed_sample(int s, int stages, int32_t id) {
  cm::Sample smp;
  smp.num_stages = stages;
  smp.schedule_features = hkfac::Buffer<float>(s, stages);
  smp.types_in_use = hkfac::Buffer<float>(cm::kTypesInUseFeatures, stages);
  smp.pipeline_features =
      hkfac::Buffer<float>(cm::kPipelineFeatureRows, cm::kPipelineFeatureTypes, stages);
  float v = 0;
  hkfac::for_each_value(smp.schedule_features, [&](float &x) { x = v += 0.5f; });
  hkfac::for_each_value(smp.types_in_use, [&](float &x) { x = 1; });
  hkfac::for_each_value(smp.pipeline_features, [&](float &x) { x = v += 1; });
  smp.runtime_ms = 1.5f;
  smp.pipeline_id = id;
  smp.schedule_id = -id;
  return smp;
}

} // namespace

// With HKFAC_FUZZ_WRITE_SEEDS=DIR the binary writes its seed corpus (valid samples) and exits.
extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  const char *dir = std::getenv("HKFAC_FUZZ_WRITE_SEEDS");
  if (dir == nullptr)
    return 0;
  for (int s : {39, 73}) {
    for (int stages : {1, 3}) {
      const std::vector<uint8_t> bytes = cm::serialize_sample(seed_sample(s, stages, stages));
      std::ofstream(std::string(dir) + "/s" + std::to_string(s) + "_" + std::to_string(stages),
                    std::ios::binary)
          .write(reinterpret_cast<const char *>(bytes.data()),
                 static_cast<std::streamsize>(bytes.size()));
    }
  }
  std::exit(0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  for (int s : {39, 73}) {
    try {
      const cm::Sample smp = cm::parse_sample(data, size, s, "fuzz");
      const std::vector<uint8_t> again = cm::serialize_sample(smp);
      if (again.size() != size || std::memcmp(again.data(), data, size) != 0)
        __builtin_trap();
    } catch (const hkfac::Error &) {
    }
  }
  try {
    const std::vector<uint8_t> featurization(data, data + size);
    const std::vector<uint8_t> sample =
        cm::featurization_to_sample(featurization, 2.0f, 1, 2, 0, "fuzz");
    if (sample.size() != size + cm::kSampleTrailerBytes ||
        std::memcmp(sample.data(), data, size) != 0) {
      __builtin_trap();
    }
  } catch (const hkfac::Error &) {
  }
  return 0;
}
