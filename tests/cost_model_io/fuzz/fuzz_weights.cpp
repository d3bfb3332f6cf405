// libFuzzer target: the hwf1 weights parser on arbitrary bytes must throw hkfac::Error or return
// weights that serialise back to exactly the input (the format has one encoding per model).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "hkfac/cost_model/weights.h"

namespace cm = hkfac::cost_model;

namespace {

void write_seed(const std::string &path, const std::vector<uint8_t> &bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char *>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

} // namespace

// With HKFAC_FUZZ_WRITE_SEEDS=DIR the binary writes its seed corpus (valid files) and exits, so
// the seeds come from the code under test rather than checked-in blobs.
extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  const char *dir = std::getenv("HKFAC_FUZZ_WRITE_SEEDS");
  if (dir == nullptr)
    return 0;
  for (int s : {39, 73}) {
    cm::Weights w = cm::random_weights(s, static_cast<uint64_t>(s));
    write_seed(std::string(dir) + "/ours_" + std::to_string(s), cm::serialize_weights(w));
    w.pipeline_features_version = w.schedule_features_version = cm::kHalideAdams2019Version;
    write_seed(std::string(dir) + "/halide_" + std::to_string(s), cm::serialize_weights(w));
  }
  std::exit(0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  for (int options = 0; options < 4; options++) {
    cm::WeightsLoadOptions o;
    o.allow_version_mismatch = options & 1;
    o.expected_schedule_features = options & 2 ? 73 : 0;
    try {
      const cm::Weights w = cm::parse_weights(data, size, "fuzz", o);
      const std::vector<uint8_t> again = cm::serialize_weights(w);
      if (again.size() != size || std::memcmp(again.data(), data, size) != 0)
        __builtin_trap();
    } catch (const hkfac::Error &) {
    }
  }
  return 0;
}
