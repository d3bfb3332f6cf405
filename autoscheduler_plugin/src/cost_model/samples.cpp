// Reading, validating, writing and grouping the cost model's training samples.
#include "hkfac/cost_model/samples.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "hkfac/file_util.h"

namespace hkfac::cost_model {

using detail::append_le32;
using detail::append_le_float;
using detail::load_le32;
using detail::load_le_float;

namespace {

void check_schedule_features(int s) {
  if (s != kCpuScheduleFeatures && s != kGpuScheduleFeatures) {
    throw Error("samples: schedule features must be 39 (CPU) or 73 (GPU), got " +
                std::to_string(s));
  }
}

std::string float_text(float v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

// Features are counts, sizes and ratios: never negative, and a NaN or infinity would poison
// training (Halide's trainer warns about the same cases).
void check_feature(const std::string &name, float v, int stage, const char *group, int index) {
  if (!std::isfinite(v) || v < 0) {
    throw Error(name + ": stage " + std::to_string(stage) + " " + group + " feature " +
                std::to_string(index) + " is " + (std::isfinite(v) ? "negative" : "not finite") +
                ": " + float_text(v));
  }
}

void check_runtime(const std::string &name, float runtime_ms) {
  if (!std::isfinite(runtime_ms) || runtime_ms <= 0) {
    throw Error(name + ": runtime must be finite and > 0 ms, found " + float_text(runtime_ms));
  }
}

// Stage count for a .sample of `size` bytes, or an error saying why the size cannot be one.
int sample_stages(size_t size, int s, const std::string &name) {
  const size_t stage_bytes = featurization_stage_bytes(s);
  if (size < kSampleTrailerBytes) {
    throw Error(name + ": size " + std::to_string(size) + " bytes is smaller than the " +
                std::to_string(kSampleTrailerBytes) + "-byte trailer");
  }
  const size_t body = size - kSampleTrailerBytes;
  if (body % stage_bytes != 0) {
    const int other = s == kCpuScheduleFeatures ? kGpuScheduleFeatures : kCpuScheduleFeatures;
    const bool fits_other = body % featurization_stage_bytes(other) == 0 && body > 0;
    throw Error(name + ": size " + std::to_string(size) + " bytes is not 12 + a multiple of " +
                std::to_string(stage_bytes) + " bytes per stage (S = " + std::to_string(s) + ")" +
                (fits_other ? "; it fits S = " + std::to_string(other) : ""));
  }
  if (body == 0)
    throw Error(name + ": no stages (the file is only the 12-byte trailer)");
  if (body / stage_bytes > static_cast<size_t>(kMaxSampleStages)) {
    throw Error(name + ": " + std::to_string(body / stage_bytes) + " stages, more than the " +
                std::to_string(kMaxSampleStages) + " any real pipeline has");
  }
  return static_cast<int>(body / stage_bytes);
}

void validate_sample(const Sample &smp, const std::string &name) {
  if (smp.schedule_features.dimensions() != 2) {
    throw Error(name + ": schedule_features must be a 2-D (S, num_stages) buffer");
  }
  const int s = smp.schedule_feature_count();
  check_schedule_features(s);
  const int n = smp.num_stages;
  if (n < 1 || n > kMaxSampleStages) {
    throw Error(name + ": num_stages must be 1.." + std::to_string(kMaxSampleStages) + ", got " +
                std::to_string(n));
  }
  const auto expect = [&](const Buffer<float> &b, const char *what, std::vector<int> shape) {
    bool ok = b.data() != nullptr && b.dimensions() == static_cast<int>(shape.size());
    for (size_t d = 0; ok && d < shape.size(); d++)
      ok = b.dim(d).extent() == shape[d];
    if (!ok)
      throw Error(name + ": " + what + " has the wrong shape for " + std::to_string(n) +
                  " stages and S = " + std::to_string(s));
    if (b.device_dirty())
      throw Error(name + ": " + what + " is newer on the device");
  };
  expect(smp.schedule_features, "schedule_features", {s, n});
  expect(smp.types_in_use, "types_in_use", {kTypesInUseFeatures, n});
  expect(smp.pipeline_features, "pipeline_features",
         {kPipelineFeatureRows, kPipelineFeatureTypes, n});
  check_runtime(name, smp.runtime_ms);
  for (int st = 0; st < n; st++) {
    for (int f = 0; f < s; f++)
      check_feature(name, smp.schedule_features(f, st), st, "schedule", f);
    for (int f = 0; f < kTypesInUseFeatures; f++) {
      check_feature(name, smp.types_in_use(f, st), st, "algorithm", f);
    }
    for (int i = 0; i < kPipelineFeatureRows; i++) {
      for (int j = 0; j < kPipelineFeatureTypes; j++) {
        check_feature(name, smp.pipeline_features(i, j, st), st, "algorithm",
                      kTypesInUseFeatures + i * kPipelineFeatureTypes + j);
      }
    }
  }
}

// Parses with the size of the whole file known up front, so absurd sizes are rejected before
// anything is allocated.
Sample parse_checked(const uint8_t *data, size_t size, int s, const std::string &name) {
  check_schedule_features(s);
  const int n = sample_stages(size, s, name);
  Sample smp;
  smp.num_stages = n;
  smp.schedule_features = Buffer<float>(s, n);
  smp.types_in_use = Buffer<float>(kTypesInUseFeatures, n);
  smp.pipeline_features = Buffer<float>(kPipelineFeatureRows, kPipelineFeatureTypes, n);
  const size_t stage_bytes = featurization_stage_bytes(s);
  for (int st = 0; st < n; st++) {
    const uint8_t *p = data + st * stage_bytes;
    for (int f = 0; f < s; f++) {
      const float v = load_le_float(p + 4 * f);
      check_feature(name, v, st, "schedule", f);
      smp.schedule_features(f, st) = v;
    }
    p += 4 * s;
    for (int f = 0; f < kAlgorithmFeatures; f++) {
      const float v = load_le_float(p + 4 * f);
      check_feature(name, v, st, "algorithm", f);
      if (f < kTypesInUseFeatures) {
        smp.types_in_use(f, st) = v;
      } else {
        const int g = f - kTypesInUseFeatures;
        smp.pipeline_features(g / kPipelineFeatureTypes, g % kPipelineFeatureTypes, st) = v;
      }
    }
  }
  const uint8_t *trailer = data + size - kSampleTrailerBytes;
  smp.runtime_ms = load_le_float(trailer);
  check_runtime(name, smp.runtime_ms);
  smp.pipeline_id = static_cast<int32_t>(load_le32(trailer + 4));
  smp.schedule_id = static_cast<int32_t>(load_le32(trailer + 8));
  return smp;
}

bool same_algorithm_features(const Sample &a, const Sample &b, std::string *where) {
  for (int st = 0; st < a.num_stages; st++) {
    for (int f = 0; f < kTypesInUseFeatures; f++) {
      if (std::memcmp(&a.types_in_use(f, st), &b.types_in_use(f, st), 4) != 0) {
        *where = "stage " + std::to_string(st) + " algorithm feature " + std::to_string(f);
        return false;
      }
    }
    for (int i = 0; i < kPipelineFeatureRows; i++) {
      for (int j = 0; j < kPipelineFeatureTypes; j++) {
        if (std::memcmp(&a.pipeline_features(i, j, st), &b.pipeline_features(i, j, st), 4) != 0) {
          *where = "stage " + std::to_string(st) + " algorithm feature " +
                   std::to_string(kTypesInUseFeatures + i * kPipelineFeatureTypes + j);
          return false;
        }
      }
    }
  }
  return true;
}

std::string strip_prefix(const std::string &message, const std::string &prefix) {
  const std::string full = prefix + ": ";
  return message.compare(0, full.size(), full) == 0 ? message.substr(full.size()) : message;
}

} // namespace

Sample parse_sample(const uint8_t *data, size_t size, int schedule_features,
                    const std::string &name) {
  return parse_checked(data, size, schedule_features, name);
}

Sample load_sample(const std::string &path, int schedule_features) {
  check_schedule_features(schedule_features);
  const size_t cap =
      kSampleTrailerBytes + kMaxSampleStages * featurization_stage_bytes(schedule_features);
  size_t total = 0;
  const std::vector<uint8_t> bytes = detail::read_file_prefix(path, cap + 1, &total);
  // sample_stages rejects every size over the cap, so the prefix is the whole file past this.
  sample_stages(total, schedule_features, path);
  return parse_checked(bytes.data(), bytes.size(), schedule_features, path);
}

std::vector<uint8_t> serialize_sample(const Sample &smp) {
  validate_sample(smp, "sample");
  const int s = smp.schedule_feature_count();
  std::vector<uint8_t> out;
  out.reserve(smp.num_stages * featurization_stage_bytes(s) + kSampleTrailerBytes);
  for (int st = 0; st < smp.num_stages; st++) {
    for (int f = 0; f < s; f++)
      append_le_float(out, smp.schedule_features(f, st));
    for (int f = 0; f < kTypesInUseFeatures; f++)
      append_le_float(out, smp.types_in_use(f, st));
    for (int i = 0; i < kPipelineFeatureRows; i++) {
      for (int j = 0; j < kPipelineFeatureTypes; j++) {
        append_le_float(out, smp.pipeline_features(i, j, st));
      }
    }
  }
  append_le_float(out, smp.runtime_ms);
  append_le32(out, static_cast<uint32_t>(smp.pipeline_id));
  append_le32(out, static_cast<uint32_t>(smp.schedule_id));
  return out;
}

void write_sample(const Sample &smp, const std::string &path) {
  std::vector<uint8_t> bytes;
  try {
    bytes = serialize_sample(smp);
  } catch (const Error &e) {
    throw Error(path + ": not writing an invalid sample: " + e.what());
  }
  detail::write_file_atomically(path, bytes);
}

std::vector<uint8_t> featurization_to_sample(const std::vector<uint8_t> &featurization,
                                             float runtime_ms, int32_t pipeline_id,
                                             int32_t schedule_id, int schedule_features,
                                             const std::string &name) {
  int s = schedule_features;
  if (s == 0) {
    const bool cpu = featurization.size() % featurization_stage_bytes(kCpuScheduleFeatures) == 0;
    const bool gpu = featurization.size() % featurization_stage_bytes(kGpuScheduleFeatures) == 0;
    if (cpu && gpu && !featurization.empty()) {
      throw Error(name + ": size " + std::to_string(featurization.size()) +
                  " bytes fits both S = 39 and S = 73; say which");
    }
    s = gpu && !featurization.empty() ? kGpuScheduleFeatures : kCpuScheduleFeatures;
  }
  check_schedule_features(s);
  if (featurization.empty() || featurization.size() % featurization_stage_bytes(s) != 0) {
    throw Error(name + ": size " + std::to_string(featurization.size()) +
                " bytes is not a positive multiple of " +
                std::to_string(featurization_stage_bytes(s)) +
                " bytes per stage (S = " + std::to_string(s) + ")");
  }
  std::vector<uint8_t> out = featurization;
  append_le_float(out, runtime_ms);
  append_le32(out, static_cast<uint32_t>(pipeline_id));
  append_le32(out, static_cast<uint32_t>(schedule_id));
  parse_checked(out.data(), out.size(), s, name); // validates stages, features and runtime
  return out;
}

void featurization_file_to_sample(const std::string &featurization_path, float runtime_ms,
                                  int32_t pipeline_id, int32_t schedule_id, int schedule_features,
                                  const std::string &sample_path) {
  // The write would replace the input with itself plus a trailer, losing the featurization.
  if (detail::same_file(featurization_path, sample_path)) {
    throw Error(sample_path + ": is the input " + featurization_path +
                " itself; not replacing the featurization with its sample");
  }
  const size_t cap = kMaxSampleStages * featurization_stage_bytes(kGpuScheduleFeatures);
  size_t total = 0;
  const std::vector<uint8_t> featurization =
      detail::read_file_prefix(featurization_path, cap, &total);
  if (total > cap) {
    throw Error(featurization_path + ": size " + std::to_string(total) + " bytes is more than " +
                std::to_string(kMaxSampleStages) + " stages");
  }
  detail::write_file_atomically(
      sample_path, featurization_to_sample(featurization, runtime_ms, pipeline_id, schedule_id,
                                           schedule_features, featurization_path));
}

std::vector<std::string> read_path_list(std::istream &in) {
  std::vector<std::string> paths;
  std::string line;
  while (std::getline(in, line)) {
    const size_t first = line.find_first_not_of(" \t\r\n");
    if (first == std::string::npos)
      continue;
    const size_t last = line.find_last_not_of(" \t\r\n");
    paths.push_back(line.substr(first, last - first + 1));
  }
  return paths;
}

std::vector<std::string> read_path_list_file(const std::string &list_path) {
  // A directory opens as an empty stream on Linux; without this check the tools would go on
  // with no samples and say only that none were usable.
  std::error_code ec;
  if (std::filesystem::is_directory(list_path, ec)) {
    throw Error("'" + list_path +
                "' is a directory, not a file listing sample paths (make one "
                "with: find " +
                list_path + " -name '*.sample' > samples.txt)");
  }
  std::ifstream in(list_path, std::ios::binary);
  if (!in)
    throw Error("cannot open the sample list '" + list_path + "'");
  std::vector<std::string> paths = read_path_list(in);
  if (in.bad())
    throw Error("reading the sample list '" + list_path + "' failed");
  for (size_t i = 0; i < paths.size(); ++i) {
    if (paths[i].find('\0') != std::string::npos) {
      throw Error("'" + list_path + "' line " + std::to_string(i + 1) +
                  " holds a NUL byte: a binary file (a .sample itself?), not a list of paths, "
                  "one per line");
    }
  }
  return paths;
}

size_t SampleSet::num_samples() const {
  size_t n = 0;
  for (const PipelineSamples &p : pipelines)
    n += p.samples.size();
  return n;
}

SampleSet load_samples(const std::vector<std::string> &paths, int schedule_features,
                       int num_threads) {
  check_schedule_features(schedule_features);
  struct Loaded {
    std::unique_ptr<Sample> sample;
    std::string error;
  };
  std::vector<Loaded> loaded(paths.size());
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (size_t i = next++; i < paths.size(); i = next++) {
      try {
        loaded[i].sample = std::make_unique<Sample>(load_sample(paths[i], schedule_features));
      } catch (const std::exception &e) {
        loaded[i].error = strip_prefix(e.what(), paths[i]);
      }
    }
  };
  size_t threads = num_threads > 0 ? num_threads : std::thread::hardware_concurrency();
  threads = std::max<size_t>(1, std::min(threads, paths.size()));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; t++)
    pool.emplace_back(work);
  work();
  for (std::thread &t : pool)
    t.join();

  // Grouping runs in input order, so which sample is "first" does not depend on the threads.
  SampleSet set;
  std::unordered_map<int32_t, size_t> group_of;
  std::unordered_map<int64_t, size_t> schedule_seen; // (pipeline, schedule) -> path index
  for (size_t i = 0; i < paths.size(); i++) {
    if (!loaded[i].sample) {
      set.rejected.push_back({paths[i], loaded[i].error});
      continue;
    }
    Sample &smp = *loaded[i].sample;
    const auto [it, inserted] = group_of.emplace(smp.pipeline_id, set.pipelines.size());
    if (!inserted) {
      const PipelineSamples &group = set.pipelines[it->second];
      const std::string pid = "pipeline " + std::to_string(smp.pipeline_id);
      if (smp.num_stages != group.num_stages) {
        set.rejected.push_back(
            {paths[i], pid + " has " + std::to_string(smp.num_stages) + " stages here but " +
                           std::to_string(group.num_stages) + " in " + group.paths.front()});
        continue;
      }
      std::string where;
      if (!same_algorithm_features(smp, group.samples.front(), &where)) {
        set.rejected.push_back(
            {paths[i], pid + ": " + where + " differs from " + group.paths.front()});
        continue;
      }
    }
    const int64_t key = (int64_t(smp.pipeline_id) << 32) | uint32_t(smp.schedule_id);
    const auto [seen, fresh] = schedule_seen.emplace(key, i);
    if (!fresh) {
      set.rejected.push_back({paths[i], "pipeline " + std::to_string(smp.pipeline_id) +
                                            " schedule " + std::to_string(smp.schedule_id) +
                                            " duplicates " + paths[seen->second]});
      continue;
    }
    if (inserted) {
      PipelineSamples group;
      group.pipeline_id = smp.pipeline_id;
      group.num_stages = smp.num_stages;
      set.pipelines.push_back(std::move(group));
    }
    PipelineSamples &group = set.pipelines[it->second];
    group.samples.push_back(std::move(smp));
    group.paths.push_back(paths[i]);
  }
  return set;
}

} // namespace hkfac::cost_model
