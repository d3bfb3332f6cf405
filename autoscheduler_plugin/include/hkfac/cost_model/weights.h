// The cost model's weights and their files: "hwf1" .weights files and old weights directories.
//
// The network (Adams2019's) has six parameter buffers, held as Halide buffers with these
// dimensions (dimension 0 innermost):
//   head1_filter (8, 40, 7)   head1_bias (8)
//   head2_filter (24, S)      head2_bias (24)
//   conv1_filter (32, 32)     conv1_bias (32)
// where S is the number of schedule features: 39 on CPU, 73 on GPU.
//
// A .weights file is, little-endian whatever the host: uint32 signature 0x68776631 ("1fwh" on
// disk); uint32 pipeline-features version; uint32 schedule-features version; uint32 buffer count
// (6); then per buffer, in the order above: uint32 dimension count, one uint32 extent per
// dimension (dimension 0 first), the float32 values with dimension 0 fastest. That is exactly the
// layout Halide 14 writes (it dumps the dense buffer memory), so the files are interchangeable.
//
// An old weights directory holds six raw little-endian float32 files (names below), same order
// of elements, no header and no versions: loading one assumes the current versions.
//
// Loading validates every header field against the network before allocating anything, rejects
// trailing bytes and non-finite weights, and throws hkfac::Error naming the file, the field, the
// expected and the found value. Our schedule-features version of the other S (200 with S = 39) is
// refused even when other versions are allowed: saving refuses the same, so whatever loads saves
// back byte for byte.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "hkfac/buffer.h"

namespace hkfac::cost_model {

constexpr uint32_t kWeightsSignature = 0x68776631;
// Our feature versions: the Hkfac plugin's featurization (101 / 105 CPU, 200 GPU). Halide 14's
// Adams2019 files carry 3 in both fields, and so do weights trained on Adams2019's samples.
// 100 marked an earlier stamping of Adams2019-trained weights; CPU schedule features 101
// counted points without ShiftInwards overlaps and an update's inlined calls per pure point,
// 102 classified a vectorized update's loads against its innermost RVar instead of its vector
// lanes, 103 counted a row-blocked update's row-independent loads once per row instead of
// once per block, and 104 counted an inlined Func's calls in full where common-subexpression
// elimination shares their work (apps/tools/refeaturize.py carries 102 to 104 samples to 105);
// no current file carries them.
constexpr uint32_t kPipelineFeaturesVersion = 101;
constexpr uint32_t kCpuScheduleFeaturesVersion = 105;
constexpr uint32_t kGpuScheduleFeaturesVersion = 200;
constexpr uint32_t kHalideAdams2019Version = 3;

constexpr int kCpuScheduleFeatures = 39;
constexpr int kGpuScheduleFeatures = 73;
// The algorithm (pipeline) features the network sees: a 40 x 7 grid per stage.
constexpr int kPipelineFeatureRows = 40;
constexpr int kPipelineFeatureTypes = 7;
constexpr int kHead1Channels = 8;
constexpr int kHead2Channels = 24;
constexpr int kConv1Channels = 32;
constexpr int kNumWeightBuffers = 6;

// Buffer names in file order; the second list is the matching old weights-directory file names.
extern const std::array<const char *, kNumWeightBuffers> kWeightBufferNames;
extern const std::array<const char *, kNumWeightBuffers> kWeightsDirFileNames;

// The schedule-features version we write for S schedule features (39 -> 105, 73 -> 200).
// Throws hkfac::Error for any other S.
uint32_t schedule_features_version_for(int schedule_features);

// The Halide dimensions of buffer `index` (file order) for S schedule features.
std::vector<int> weight_buffer_shape(int index, int schedule_features);

struct Weights {
  uint32_t pipeline_features_version = kPipelineFeaturesVersion;
  uint32_t schedule_features_version = kCpuScheduleFeaturesVersion;
  Buffer<float> head1_filter, head1_bias;
  Buffer<float> head2_filter, head2_bias;
  Buffer<float> conv1_filter, conv1_bias;

  // S, read from head2_filter's dimension 1.
  int schedule_features() const;
  // The buffers in file order (kWeightBufferNames).
  std::array<Buffer<float> *, kNumWeightBuffers> buffers();
  std::array<const Buffer<float> *, kNumWeightBuffers> buffers() const;
};

struct WeightsLoadOptions {
  // 0: accept 39 or 73 (taken from head2_filter); otherwise the S the caller needs.
  int expected_schedule_features = 0;
  // Accept versions other than ours (needed for Halide 14's files, which carry version 3).
  bool allow_version_mismatch = false;
};

// Zero weights of the right shapes for S schedule features, with our versions.
Weights make_weights(int schedule_features);
// Deterministic random weights from `seed`: filters ~ N(0, 1/fan_in), biases zero. With our
// versions.
Weights random_weights(int schedule_features, uint64_t seed);

// Checks shapes (against S = head2_filter's dimension 1, which must be 39 or 73), that the
// schedule-features version, if it is one of ours (105, 200), is S's, and that every value is
// finite. `name` prefixes the error messages. Other versions (Halide's 3) pass: saving writes
// them as given.
void validate_weights(const Weights &w, const std::string &name = "weights");

// The hwf1 byte stream for `w` (validated first), with the versions `w` carries.
std::vector<uint8_t> serialize_weights(const Weights &w);
// Parses an hwf1 byte stream; `name` (usually the path) prefixes every error message.
Weights parse_weights(const uint8_t *data, size_t size, const std::string &name,
                      const WeightsLoadOptions &options = {});

// Reads/writes a .weights file. Reading refuses anything but a regular file (a FIFO would block).
// Writing goes through a temporary file and a rename, so a reader never sees half a file; it
// writes through a symbolic link to its target and refuses a target that is not a regular file
// or is read-only (detail::check_replaceable).
Weights load_weights_file(const std::string &path, const WeightsLoadOptions &options = {});
void save_weights_file(const Weights &w, const std::string &path);

// Reads/writes an old weights directory. Loading assumes our current versions (the directory has
// none); `options.expected_schedule_features` picks S when set, otherwise the size of
// head2_conv1_weight.data decides between 39 and 73. Saving checks all six targets and writes
// six temporary files before renaming any into place, so an error leaves the old set whole.
Weights load_weights_dir(const std::string &dir, const WeightsLoadOptions &options = {});
void save_weights_dir(const Weights &w, const std::string &dir);

// HL_WEIGHTS_DIR semantics: a directory is an old weights directory, anything else a .weights
// file.
Weights load_weights(const std::string &path, const WeightsLoadOptions &options = {});

} // namespace hkfac::cost_model
