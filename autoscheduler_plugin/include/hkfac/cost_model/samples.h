// Training samples for the cost model: .featurization and .sample files, one schedule each.
//
// A .featurization holds, per pipeline stage, S schedule features (39 CPU, 73 GPU) followed by
// 287 algorithm (pipeline) features, all float32 little-endian. The algorithm group is 7
// "types in use" flags and then the 280 values the network reads as a 40 x 7 grid: element
// (i, j) at offset 7 + i * 7 + j of the 287. A .sample is a .featurization followed by a 12-byte
// trailer: float32 runtime in milliseconds, int32 pipeline id, int32 schedule id. With S = 39
// this is exactly what Halide 14's featurization_to_sample writes and retrain_cost_model reads.
//
// Samples of one pipeline (same pipeline id) share their algorithm features and differ in the
// schedule; training compares schedules within a pipeline, so load_samples groups them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <istream>
#include <string>
#include <vector>

#include "hkfac/buffer.h"
#include "hkfac/cost_model/weights.h"

namespace hkfac::cost_model {

constexpr int kTypesInUseFeatures = 7;
constexpr int kAlgorithmFeatures =
    kTypesInUseFeatures + kPipelineFeatureRows * kPipelineFeatureTypes;
constexpr size_t kSampleTrailerBytes = 12;
// Far beyond any real pipeline; a larger stage count means a corrupt or foreign file, and the
// bound caps what a loader allocates (about 14 MB per sample at S = 73).
constexpr int kMaxSampleStages = 10000;

// Bytes one stage takes in a .featurization / .sample with S schedule features.
constexpr size_t featurization_stage_bytes(int schedule_features) {
  return static_cast<size_t>(schedule_features + kAlgorithmFeatures) * 4;
}

struct Sample {
  int num_stages = 0;
  // (S, num_stages): element (f, s) is stage s's schedule feature f.
  Buffer<float> schedule_features;
  // (7, num_stages): the algorithm group's "types in use" flags (not seen by the network, kept so
  // a sample writes back byte for byte).
  Buffer<float> types_in_use;
  // (40, 7, num_stages): element (i, j, s) is stage s's algorithm feature 7 + i * 7 + j.
  Buffer<float> pipeline_features;
  float runtime_ms = 0;
  int32_t pipeline_id = 0;
  int32_t schedule_id = 0;

  int schedule_feature_count() const { return schedule_features.dim(0).extent(); }
};

// Parses the bytes of a .sample with S schedule features (39 or 73) and validates it: the size is
// 12 + a positive multiple of the stage size, at most kMaxSampleStages stages, the runtime is
// finite and > 0, and every feature is finite and >= 0. Errors are hkfac::Error "<name>: reason".
Sample parse_sample(const uint8_t *data, size_t size, int schedule_features,
                    const std::string &name);
// Refuses anything but a regular file before opening it (a FIFO would block).
Sample load_sample(const std::string &path, int schedule_features);

// The .sample bytes of `s` (validated first with the same rules as parse_sample).
std::vector<uint8_t> serialize_sample(const Sample &s);
// Writes through a temporary file and a rename.
void write_sample(const Sample &s, const std::string &path);

// A .sample's bytes from a .featurization's and the trailer; the featurization size must fit S
// (0: 39 or 73, whichever the size fits), and the result is validated as parse_sample does.
std::vector<uint8_t> featurization_to_sample(const std::vector<uint8_t> &featurization,
                                             float runtime_ms, int32_t pipeline_id,
                                             int32_t schedule_id, int schedule_features,
                                             const std::string &name);

// The same from file to file: reads `featurization_path` (size-checked before reading), writes
// `sample_path` atomically. Refuses a `sample_path` that is the input file (by inode, so through
// links and other spellings too).
void featurization_file_to_sample(const std::string &featurization_path, float runtime_ms,
                                  int32_t pipeline_id, int32_t schedule_id, int schedule_features,
                                  const std::string &sample_path);

// One path per line; surrounding whitespace is trimmed and empty lines are skipped.
std::vector<std::string> read_path_list(std::istream &in);

// read_path_list over a file. Errors name the file: it cannot be opened, it is a directory, or it
// is binary (its "lines" hold NUL bytes, as a .sample given by mistake would).
std::vector<std::string> read_path_list_file(const std::string &list_path);

struct SampleRejection {
  std::string path;
  std::string reason;
};

// The samples of one pipeline, in input order.
struct PipelineSamples {
  int32_t pipeline_id = 0;
  int num_stages = 0;
  std::vector<Sample> samples;
  std::vector<std::string> paths;
};

struct SampleSet {
  // In order of each pipeline id's first accepted sample.
  std::vector<PipelineSamples> pipelines;
  std::vector<SampleRejection> rejected;
  size_t num_samples() const;
};

// Loads every path (in parallel, `num_threads` = 0: one per core) and groups the good samples by
// pipeline id. A sample is rejected, with the reason, when it does not parse, or when an earlier
// accepted sample of its pipeline has a different stage count, different algorithm features, or
// the same schedule id. Never throws for a bad sample; the result is independent of threading.
SampleSet load_samples(const std::vector<std::string> &paths, int schedule_features,
                       int num_threads = 0);

} // namespace hkfac::cost_model
