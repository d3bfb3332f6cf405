// Reading, writing, validating and randomly initialising the cost model's weights.
#include "hkfac/cost_model/weights.h"

#include <cmath>
#include <random>
#include <sstream>

#include <sys/stat.h>

#include "hkfac/file_util.h"

namespace hkfac::cost_model {

using detail::append_le32;
using detail::append_le_float;
using detail::load_le32;
using detail::load_le_float;

const std::array<const char *, kNumWeightBuffers> kWeightBufferNames = {
    "head1_filter", "head1_bias", "head2_filter", "head2_bias", "conv1_filter", "conv1_bias"};
const std::array<const char *, kNumWeightBuffers> kWeightsDirFileNames = {
    "head1_conv1_weight.data", "head1_conv1_bias.data",   "head2_conv1_weight.data",
    "head2_conv1_bias.data",   "trunk_conv1_weight.data", "trunk_conv1_bias.data"};

namespace {

constexpr int kHead2FilterIndex = 2;
// Larger than any valid file (S = 73 gives about 22 KB); files beyond it are not read whole.
constexpr size_t kMaxWeightsFileBytes = size_t(1) << 20;

bool valid_schedule_features(int s) {
  return s == kCpuScheduleFeatures || s == kGpuScheduleFeatures;
}

std::string shape_text(const std::vector<int> &shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); i++)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

size_t element_count(const std::vector<int> &shape) {
  size_t n = 1;
  for (int e : shape)
    n *= static_cast<size_t>(e);
  return n;
}

// Halide coordinates of the element at `linear` in dimension-0-fastest order.
std::string coordinates_text(size_t linear, const std::vector<int> &shape) {
  std::vector<int> pos;
  for (int e : shape) {
    pos.push_back(static_cast<int>(linear % static_cast<size_t>(e)));
    linear /= static_cast<size_t>(e);
  }
  return shape_text(pos);
}

// Visits every element in file order (dimension 0 fastest), whatever the buffer's strides.
template <typename F> void for_each_in_file_order(const Buffer<float> &b, F f) {
  const int dims = b.dimensions();
  std::vector<int> pos(dims);
  for (int d = 0; d < dims; d++)
    pos[d] = b.dim(d).min();
  const size_t n = b.number_of_elements();
  for (size_t i = 0; i < n; i++) {
    f(i, b(pos.data()));
    for (int d = 0; d < dims; d++) {
      if (++pos[d] < b.dim(d).max() + 1)
        break;
      pos[d] = b.dim(d).min();
    }
  }
}

std::vector<int> buffer_shape(const Buffer<float> &b) {
  std::vector<int> shape;
  for (int d = 0; d < b.dimensions(); d++)
    shape.push_back(b.dim(d).extent());
  return shape;
}

void check_version(const std::string &name, const char *field, uint32_t expected, uint32_t found,
                   const WeightsLoadOptions &options) {
  if (options.allow_version_mismatch || expected == found)
    return;
  std::string msg = name + ": " + field + " version: expected " + std::to_string(expected) +
                    ", found " + std::to_string(found);
  if (found == kHalideAdams2019Version) {
    msg += " (a Halide 14 Adams2019 file; allow a version mismatch to load it)";
  }
  throw Error(msg);
}

// Our two schedule-features versions name S themselves, so one that belongs to the other S is a
// contradiction within the file, refused even when foreign versions are allowed.
void check_own_version_matches_s(const std::string &name, uint32_t version, int s) {
  const bool ours =
      version == kCpuScheduleFeaturesVersion || version == kGpuScheduleFeaturesVersion;
  if (ours && version != schedule_features_version_for(s)) {
    throw Error(
        name + ": schedule features version: expected " +
        std::to_string(schedule_features_version_for(s)) + " for S = " + std::to_string(s) +
        ", found " + std::to_string(version) + " (the version for S = " +
        std::to_string(s == kCpuScheduleFeatures ? kGpuScheduleFeatures : kCpuScheduleFeatures) +
        ")");
  }
}

void check_finite(const std::string &name, const char *buffer, const float *values,
                  const std::vector<int> &shape) {
  const size_t n = element_count(shape);
  for (size_t i = 0; i < n; i++) {
    if (!std::isfinite(values[i])) {
      std::ostringstream v;
      v << values[i];
      throw Error(name + ": " + buffer + " value at index " + coordinates_text(i, shape) +
                  " (element " + std::to_string(i) + ") is not finite: " + v.str());
    }
  }
}

int checked_expected_s(const WeightsLoadOptions &options) {
  const int s = options.expected_schedule_features;
  if (s != 0 && !valid_schedule_features(s)) {
    throw Error("WeightsLoadOptions::expected_schedule_features must be 0, 39 or 73, got " +
                std::to_string(s));
  }
  return s;
}

Weights parse_prefix(const uint8_t *data, size_t available, size_t total, const std::string &name,
                     const WeightsLoadOptions &options) {
  int s = checked_expected_s(options);
  detail::FieldReader r(name, data, available, total);
  const uint32_t signature = r.u32("signature");
  if (signature != kWeightsSignature) {
    std::ostringstream msg;
    msg << name << ": signature: expected 0x" << std::hex << kWeightsSignature << ", found 0x"
        << signature << " (not an hwf1 weights file)";
    throw Error(msg.str());
  }
  Weights w;
  w.pipeline_features_version = r.u32("pipeline features version");
  w.schedule_features_version = r.u32("schedule features version");
  check_version(name, "pipeline features", kPipelineFeaturesVersion, w.pipeline_features_version,
                options);
  if (s != 0) {
    check_version(name, "schedule features", schedule_features_version_for(s),
                  w.schedule_features_version, options);
  }
  const uint32_t count = r.u32("buffer count");
  if (count != kNumWeightBuffers) {
    throw Error(name + ": buffer count: expected " + std::to_string(kNumWeightBuffers) +
                ", found " + std::to_string(count));
  }
  const auto buffers = w.buffers();
  for (int b = 0; b < kNumWeightBuffers; b++) {
    const std::string buffer = kWeightBufferNames[b];
    // S only matters for head2_filter, which is read after the buffers that do not depend on it.
    std::vector<int> expected = weight_buffer_shape(b, s != 0 ? s : kCpuScheduleFeatures);
    const uint32_t dims = r.u32(buffer + " dimension count");
    if (dims != expected.size()) {
      throw Error(name + ": " + buffer + " dimension count: expected " +
                  std::to_string(expected.size()) + ", found " + std::to_string(dims));
    }
    for (size_t d = 0; d < expected.size(); d++) {
      const std::string field = buffer + " dimension " + std::to_string(d) + " extent";
      const uint32_t extent = r.u32(field);
      if (b == kHead2FilterIndex && d == 1 && s == 0) {
        if (extent > INT32_MAX || !valid_schedule_features(static_cast<int>(extent))) {
          throw Error(name + ": " + field + ": expected 39 or 73, found " + std::to_string(extent));
        }
        s = static_cast<int>(extent);
        expected[d] = s;
        check_version(name, "schedule features", schedule_features_version_for(s),
                      w.schedule_features_version, options);
      } else if (extent != static_cast<uint32_t>(expected[d])) {
        throw Error(name + ": " + field + ": expected " + std::to_string(expected[d]) + ", found " +
                    std::to_string(extent));
      }
    }
    if (b == kHead2FilterIndex)
      check_own_version_matches_s(name, w.schedule_features_version, s);
    // The shape is the network's now, so this allocation is bounded.
    const size_t n = element_count(expected);
    const uint8_t *bytes = r.take(n * 4, buffer + " data");
    Buffer<float> buf(expected);
    float *values = buf.data();
    for (size_t i = 0; i < n; i++)
      values[i] = load_le_float(bytes + 4 * i);
    check_finite(name, buffer.c_str(), values, expected);
    *buffers[b] = std::move(buf);
  }
  if (r.position() != r.total()) {
    throw Error(name + ": " + std::to_string(r.total() - r.position()) +
                " trailing bytes after the last weight: expected file size " +
                std::to_string(r.position()) + ", found " + std::to_string(r.total()));
  }
  return w;
}

// Box-Muller on mt19937_64's raw output: std::normal_distribution differs between standard
// libraries, and the same seed must give the same weights everywhere.
class PortableNormal {
public:
  explicit PortableNormal(uint64_t seed) : rng_(seed) {}
  double next() {
    if (have_spare_) {
      have_spare_ = false;
      return spare_;
    }
    const double u1 = (static_cast<double>(rng_() >> 11) + 1.0) * 0x1.0p-53; // (0, 1]
    const double u2 = static_cast<double>(rng_() >> 11) * 0x1.0p-53;         // [0, 1)
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double theta = 6.283185307179586 * u2; // 2 pi u2
    spare_ = r * std::sin(theta);
    have_spare_ = true;
    return r * std::cos(theta);
  }

private:
  std::mt19937_64 rng_;
  double spare_ = 0;
  bool have_spare_ = false;
};

} // namespace

uint32_t schedule_features_version_for(int schedule_features) {
  if (schedule_features == kCpuScheduleFeatures)
    return kCpuScheduleFeaturesVersion;
  if (schedule_features == kGpuScheduleFeatures)
    return kGpuScheduleFeaturesVersion;
  throw Error("schedule features: expected 39 (CPU) or 73 (GPU), got " +
              std::to_string(schedule_features));
}

std::vector<int> weight_buffer_shape(int index, int schedule_features) {
  switch (index) {
  case 0:
    return {kHead1Channels, kPipelineFeatureRows, kPipelineFeatureTypes};
  case 1:
    return {kHead1Channels};
  case 2:
    return {kHead2Channels, schedule_features};
  case 3:
    return {kHead2Channels};
  case 4:
    return {kConv1Channels, kHead1Channels + kHead2Channels};
  case 5:
    return {kConv1Channels};
  default:
    throw Error("weight_buffer_shape: buffer index must be 0..5, got " + std::to_string(index));
  }
}

int Weights::schedule_features() const {
  if (head2_filter.dimensions() != 2) {
    throw Error("weights: head2_filter is not a 2-D buffer (not initialised?)");
  }
  return head2_filter.dim(1).extent();
}

std::array<Buffer<float> *, kNumWeightBuffers> Weights::buffers() {
  return {&head1_filter, &head1_bias, &head2_filter, &head2_bias, &conv1_filter, &conv1_bias};
}

std::array<const Buffer<float> *, kNumWeightBuffers> Weights::buffers() const {
  return {&head1_filter, &head1_bias, &head2_filter, &head2_bias, &conv1_filter, &conv1_bias};
}

Weights make_weights(int schedule_features) {
  Weights w;
  w.pipeline_features_version = kPipelineFeaturesVersion;
  w.schedule_features_version = schedule_features_version_for(schedule_features);
  const auto buffers = w.buffers();
  for (int b = 0; b < kNumWeightBuffers; b++) {
    Buffer<float> buf(weight_buffer_shape(b, schedule_features));
    fill(buf, 0.0f);
    *buffers[b] = std::move(buf);
  }
  return w;
}

Weights random_weights(int schedule_features, uint64_t seed) {
  Weights w = make_weights(schedule_features);
  PortableNormal normal(seed);
  // Filters get N(0, 1/fan_in) so each layer's pre-activations start at unit scale.
  for (Buffer<float> *filter : {&w.head1_filter, &w.head2_filter, &w.conv1_filter}) {
    const size_t fan_in = filter->number_of_elements() / filter->dim(0).extent();
    const double scale = 1.0 / std::sqrt(static_cast<double>(fan_in));
    float *v = filter->data();
    for (size_t i = 0; i < filter->number_of_elements(); i++) {
      v[i] = static_cast<float>(normal.next() * scale);
    }
  }
  return w;
}

void validate_weights(const Weights &w, const std::string &name) {
  if (w.head2_filter.dimensions() != 2) {
    throw Error(name + ": head2_filter dimension count: expected 2, found " +
                std::to_string(w.head2_filter.dimensions()));
  }
  const int s = w.head2_filter.dim(1).extent();
  if (!valid_schedule_features(s)) {
    throw Error(name + ": head2_filter dimension 1 extent: expected 39 or 73, found " +
                std::to_string(s));
  }
  check_own_version_matches_s(name, w.schedule_features_version, s);
  const auto buffers = w.buffers();
  for (int b = 0; b < kNumWeightBuffers; b++) {
    const Buffer<float> &buf = *buffers[b];
    const std::string buffer = kWeightBufferNames[b];
    if (buf.data() == nullptr)
      throw Error(name + ": " + buffer + " has no host memory");
    if (buf.device_dirty()) {
      throw Error(name + ": " + buffer + " is newer on the device; copy it to the host first");
    }
    const std::vector<int> expected = weight_buffer_shape(b, s);
    const std::vector<int> found = buffer_shape(buf);
    if (found != expected) {
      throw Error(name + ": " + buffer + " shape: expected " + shape_text(expected) + ", found " +
                  shape_text(found));
    }
    for_each_in_file_order(buf, [&](size_t i, float v) {
      if (!std::isfinite(v)) {
        std::ostringstream text;
        text << v;
        throw Error(name + ": " + buffer + " value at index " + coordinates_text(i, expected) +
                    " (element " + std::to_string(i) + ") is not finite: " + text.str());
      }
    });
  }
}

std::vector<uint8_t> serialize_weights(const Weights &w) {
  validate_weights(w);
  std::vector<uint8_t> out;
  append_le32(out, kWeightsSignature);
  append_le32(out, w.pipeline_features_version);
  append_le32(out, w.schedule_features_version);
  append_le32(out, kNumWeightBuffers);
  for (const Buffer<float> *buf : w.buffers()) {
    append_le32(out, static_cast<uint32_t>(buf->dimensions()));
    for (int d = 0; d < buf->dimensions(); d++) {
      append_le32(out, static_cast<uint32_t>(buf->dim(d).extent()));
    }
    out.reserve(out.size() + 4 * buf->number_of_elements());
    for_each_in_file_order(*buf, [&](size_t, float v) { append_le_float(out, v); });
  }
  return out;
}

Weights parse_weights(const uint8_t *data, size_t size, const std::string &name,
                      const WeightsLoadOptions &options) {
  return parse_prefix(data, size, size, name, options);
}

Weights load_weights_file(const std::string &path, const WeightsLoadOptions &options) {
  size_t total = 0;
  const std::vector<uint8_t> bytes = detail::read_file_prefix(path, kMaxWeightsFileBytes, &total);
  return parse_prefix(bytes.data(), bytes.size(), total, path, options);
}

void save_weights_file(const Weights &w, const std::string &path) {
  std::vector<uint8_t> bytes;
  try {
    bytes = serialize_weights(w);
  } catch (const Error &e) {
    throw Error(path + ": not writing invalid weights: " + e.what());
  }
  detail::write_file_atomically(path, bytes);
}

Weights load_weights_dir(const std::string &dir, const WeightsLoadOptions &options) {
  int s = checked_expected_s(options);
  const std::string head2 = dir + "/" + kWeightsDirFileNames[kHead2FilterIndex];
  if (s == 0) {
    // The directory has no header: the head2 filter's size is the only record of S.
    const size_t size = detail::regular_file_size(head2);
    for (int candidate : {kCpuScheduleFeatures, kGpuScheduleFeatures}) {
      if (size == element_count(weight_buffer_shape(kHead2FilterIndex, candidate)) * 4) {
        s = candidate;
      }
    }
    if (s == 0) {
      throw Error(head2 + " (head2_filter): size: expected " +
                  std::to_string(kHead2Channels * kCpuScheduleFeatures * 4) + " or " +
                  std::to_string(kHead2Channels * kGpuScheduleFeatures * 4) + " bytes, found " +
                  std::to_string(size));
    }
  }
  Weights w = make_weights(s); // current versions: the directory format has none
  const auto buffers = w.buffers();
  for (int b = 0; b < kNumWeightBuffers; b++) {
    const std::string path = dir + "/" + kWeightsDirFileNames[b];
    const std::string label = path + " (" + kWeightBufferNames[b] + ")";
    const std::vector<int> shape = weight_buffer_shape(b, s);
    const size_t expected = element_count(shape) * 4;
    size_t total = 0;
    const std::vector<uint8_t> bytes = detail::read_file_prefix(path, expected + 1, &total);
    if (total != expected) {
      throw Error(label + ": size: expected " + std::to_string(expected) + " bytes (" +
                  shape_text(shape) + " floats), found " + std::to_string(total));
    }
    float *values = buffers[b]->data();
    for (size_t i = 0; i < expected / 4; i++)
      values[i] = load_le_float(bytes.data() + 4 * i);
    check_finite(label, kWeightBufferNames[b], values, shape);
  }
  return w;
}

void save_weights_dir(const Weights &w, const std::string &dir) {
  try {
    validate_weights(w);
  } catch (const Error &e) {
    throw Error(dir + ": not writing invalid weights: " + e.what());
  }
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    throw Error(dir + ": cannot create directory: " + detail::errno_text());
  }
  if (!detail::is_directory(dir))
    throw Error(dir + ": exists and is not a directory");
  // All six are checked and written to temporary files before any is renamed into place, so an
  // error leaves the old set whole rather than a mix of old and new weights.
  std::vector<detail::PendingFile> pending;
  pending.reserve(kNumWeightBuffers);
  const auto buffers = w.buffers();
  for (int b = 0; b < kNumWeightBuffers; b++)
    detail::check_replaceable(dir + "/" + kWeightsDirFileNames[b]);
  for (int b = 0; b < kNumWeightBuffers; b++) {
    std::vector<uint8_t> bytes;
    bytes.reserve(4 * buffers[b]->number_of_elements());
    for_each_in_file_order(*buffers[b], [&](size_t, float v) { append_le_float(bytes, v); });
    pending.emplace_back(dir + "/" + kWeightsDirFileNames[b], bytes);
  }
  for (detail::PendingFile &file : pending)
    file.commit();
}

Weights load_weights(const std::string &path, const WeightsLoadOptions &options) {
  return detail::is_directory(path) ? load_weights_dir(path, options)
                                    : load_weights_file(path, options);
}

} // namespace hkfac::cost_model
