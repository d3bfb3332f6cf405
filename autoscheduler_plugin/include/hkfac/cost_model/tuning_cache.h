// The per-user cache of what Hkfac measured on this machine: timings and the best schedules.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

struct sqlite3;

namespace hkfac::cost_model {

// One SQLite database per user (HKFAC_CACHE_DIR, else $XDG_CACHE_HOME/hkfac, else
// ~/.cache/hkfac; the plugin's parameters choose the directory). A parallel build runs many
// generators at once: SQLite's write-ahead log lets them read while one writes, each writer
// waits its turn (busy timeout), and every record is one transaction, so a generator killed
// mid-write leaves the cache as it was before that record. Two kinds of rows:
//  - pipelines: per pipeline fingerprint (algorithm, estimates, target, machine_params and the
//    plugin's schedule format, pipeline_fingerprint.h), the fastest schedule measured so far as
//    the plugin's own encoding and as C++, so a rerun applies it at once;
//  - samples: every candidate timed on a quiet host, as the .featurization bytes the model
//    scores and the measured runtime, with the host it was measured on: the machine's own
//    training data (machine_correction.h, `hkfac_cache export`).
// Refits of the model on those samples are kept too (corrections), keyed by what they were
// fitted from, so a search does not refit what an earlier one already did.
class TuningCache {
public:
  // Opens (creating the directory and database) DIR/hkfac-cache.sqlite. Throws hkfac::Error
  // naming the path and SQLite's reason where it cannot.
  explicit TuningCache(const std::string &dir);
  ~TuningCache();
  TuningCache(const TuningCache &) = delete;
  TuningCache &operator=(const TuningCache &) = delete;

  const std::string &path() const { return path_; }

  struct Schedule {
    std::string encoded; // the plugin's decisions (state_codec.h)
    std::string source;  // as C++ (the body of apply_schedule_<name>)
    double ms = 0;       // its best time
    double model_ms = 0; // the model's own pick's time in the same measurement (0: unknown)
    std::string origin;  // which kind of candidate it was
    std::string updated; // UTC, ISO 8601
  };
  struct PipelineInfo {
    std::string key, name, target, machine_params, host;
    int funcs = 0, stages = 0;
  };
  struct Sample {
    std::string pipeline, schedule; // fingerprints
    std::string host, target;
    int features_version = 0, stages = 0;
    std::vector<uint8_t> featurization;
    double ms = 0;
  };

  std::optional<Schedule> best_schedule(const std::string &pipeline_key);
  // One measurement: the pipeline's row (its best schedule replaced only by a faster one) and
  // its quiet samples, in one transaction.
  void record(const PipelineInfo &pipeline, const Schedule &best,
              const std::vector<Sample> &samples);
  // Samples measured on `host` with the given feature version, oldest first.
  std::vector<Sample> samples(const std::string &host, int features_version);
  int64_t sample_count(const std::string &host, int features_version);

  struct Correction {
    int64_t samples = 0;       // the samples it was fitted on
    std::vector<uint8_t> blob; // empty where the fit was not adopted
    std::string note;
  };
  std::optional<Correction> correction(const std::string &id);
  void put_correction(const std::string &id, int64_t samples, const std::vector<uint8_t> &blob,
                      const std::string &note);

  // For the cache tool.
  struct Row {
    PipelineInfo info;
    Schedule best;
    int64_t samples = 0;
  };
  std::vector<Row> pipelines();
  struct Totals {
    int64_t pipelines = 0, samples = 0, corrections = 0, bytes = 0;
  };
  Totals totals();
  void clear();

  // This machine, as samples are keyed: the CPU's model name and the number of cores.
  static std::string host_id();

private:
  void exec(const char *sql);
  std::string path_;
  sqlite3 *db_ = nullptr;
};

} // namespace hkfac::cost_model
