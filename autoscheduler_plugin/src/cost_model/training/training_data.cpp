// Grouping, deduplication, splitting and batch packing of cost-model samples.
#include "hkfac/cost_model/training_data.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>

#include "hkfac/error.h"

namespace hkfac::cost_model {

namespace {

uint64_t fnv1a(const float *data, size_t count) {
  uint64_t h = 1469598103934665603ull;
  const auto *bytes = reinterpret_cast<const unsigned char *>(data);
  for (size_t i = 0; i < count * sizeof(float); ++i) {
    h ^= bytes[i];
    h *= 1099511628211ull;
  }
  return h;
}

// generate_data writes OUT/<pipeline>/<pipeline>_s<k>/<fn>.sample.
std::string pipeline_name_from_path(const std::string &path) {
  const size_t file = path.find_last_of('/');
  if (file == std::string::npos || file == 0)
    return "";
  const size_t schedule_dir = path.find_last_of('/', file - 1);
  if (schedule_dir == std::string::npos)
    return "";
  const size_t start = path.find_last_of('/', schedule_dir - 1);
  return path.substr(start == std::string::npos ? 0 : start + 1,
                     schedule_dir - (start == std::string::npos ? 0 : start + 1));
}

} // namespace

size_t TrainingData::train_schedules() const {
  size_t n = 0;
  for (const PipelineData &p : pipelines)
    n += p.train.size();
  return n;
}

size_t TrainingData::validation_schedules() const {
  size_t n = 0;
  for (const PipelineData &p : pipelines)
    n += p.validation.size();
  return n;
}

Split parse_split(const std::string &text) {
  Split s;
  if (text == "hash") {
    s.kind = Split::Kind::hash;
  } else if (text == "pipelines") {
    s.kind = Split::Kind::pipelines;
  } else if (text == "none") {
    s.kind = Split::Kind::none;
  } else if (text.rfind("app:", 0) == 0 && text.size() > 4) {
    s.kind = Split::Kind::app;
    s.app = text.substr(4);
  } else {
    throw Error("--validation: expected 'hash', 'pipelines', 'none' or 'app:NAME', got '" + text +
                "'");
  }
  return s;
}

int32_t pipeline_id_for(const std::string &name) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : name) {
    crc ^= c;
    for (int k = 0; k < 8; ++k)
      crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return static_cast<int32_t>(~crc & 0x7FFFFFFFu);
}

TrainingData make_training_data(SampleSet &&set, int S, const Split &split, bool deduplicate) {
  TrainingData data;
  data.schedule_features = S;
  const int32_t held_out = split.kind == Split::Kind::app ? pipeline_id_for(split.app) : -1;
  bool found_held_out = false;
  for (PipelineSamples &ps : set.pipelines) {
    PipelineData p;
    p.pipeline_id = ps.pipeline_id;
    p.num_stages = ps.num_stages;
    p.name = pipeline_name_from_path(ps.paths.front());
    p.pipeline_features = ps.samples.front().pipeline_features;
    std::unordered_map<uint64_t, int> seen;
    for (size_t k = 0; k < ps.samples.size(); ++k) {
      Sample &s = ps.samples[k];
      const uint64_t h =
          fnv1a(s.schedule_features.data(), s.schedule_features.number_of_elements());
      auto it = seen.find(h);
      if (deduplicate && it != seen.end() &&
          std::memcmp(p.schedule_features[it->second].data(), s.schedule_features.data(),
                      s.schedule_features.size_in_bytes()) == 0) {
        const int kept = it->second;
        if (s.runtime_ms < p.runtimes_ms[kept]) {
          p.runtimes_ms[kept] = s.runtime_ms;
          p.paths[kept] = ps.paths[k];
          p.schedule_ids[kept] = s.schedule_id;
        }
        ++data.duplicates;
        continue;
      }
      const int index = static_cast<int>(p.schedule_features.size());
      seen.emplace(h, index);
      bool validate = false;
      switch (split.kind) {
      case Split::Kind::hash: validate = h % 5 == 0; break;
      case Split::Kind::app: validate = p.pipeline_id == held_out; break;
      case Split::Kind::pipelines: validate = p.pipeline_id % 5 == 0; break;
      case Split::Kind::none: break;
      }
      (validate ? p.validation : p.train).push_back(index);
      p.schedule_features.push_back(s.schedule_features);
      p.runtimes_ms.push_back(s.runtime_ms);
      p.paths.push_back(ps.paths[k]);
      p.schedule_ids.push_back(s.schedule_id);
    }
    found_held_out |= p.pipeline_id == held_out;
    data.pipelines.push_back(std::move(p));
  }
  if (split.kind == Split::Kind::app && !found_held_out) {
    throw Error("--validation=app:" + split.app + ": no sample has that pipeline's id (" +
                std::to_string(held_out) + ")");
  }
  if (data.train_schedules() == 0)
    throw Error("no schedules left to train on after the validation split");
  return data;
}

Buffer<float> pack_schedule_features(const PipelineData &p, const std::vector<int> &schedules) {
  const int B = static_cast<int>(schedules.size());
  if (B == 0)
    throw Error("pack_schedule_features: no schedules");
  const int S = p.schedule_features.front().dim(0).extent(), T = p.num_stages;
  // out(n, k, s) is at n + B·(k + S·s): the schedules' dense (S, T) buffers become the columns of
  // an (S·T) x B matrix. Blocks of 16 schedules keep the writes contiguous and the reads in 16
  // streams (element by element through Buffer's operator() this showed in a K-FAC step's
  // profile: see docs/RESULTS.md#cost-model-training).
  std::vector<const float *> src(B);
  for (int n = 0; n < B; ++n) {
    const Buffer<float> &f = p.schedule_features.at(schedules[n]);
    if (f.dimensions() != 2 || f.dim(0).extent() != S || f.dim(1).extent() != T ||
        f.dim(0).stride() != 1 || f.dim(1).stride() != S)
      throw Error("pack_schedule_features: schedule " + std::to_string(schedules[n]) +
                  " of pipeline '" + p.name + "' is not a dense (" + std::to_string(S) + ", " +
                  std::to_string(T) + ") buffer");
    src[n] = f.data();
  }
  Buffer<float> out(B, S, T);
  float *dst = out.data();
  const int per = S * T;
  constexpr int kBlock = 16;
  for (int n0 = 0; n0 < B; n0 += kBlock) {
    const int n1 = std::min(B, n0 + kBlock);
    for (int j = 0; j < per; ++j) {
      float *row = dst + static_cast<size_t>(j) * B;
      for (int n = n0; n < n1; ++n)
        row[n] = src[n][j];
    }
  }
  return out;
}

} // namespace hkfac::cost_model
