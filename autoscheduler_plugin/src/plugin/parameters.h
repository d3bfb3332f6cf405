// The plugin's parameters: Halide's MachineParams and the environment, validated.
#pragma once

#include <cstdint>
#include <string>

#include "Halide.h"
#include "input_error.h"

namespace hkfac::sched {

// The kinds of choice the search may make (HKFAC_PLACEMENTS, for ablations and tests):
// inlining; compute_at a Root Func's tile loop, its parallel task loop, or its tile loop with
// the storage one loop further out (a sliding window); compute_at an At Func's row loop (a
// nest); compute_root. A Func none of the listed kinds can place is computed at root (outputs,
// extern stages).
enum PlacementKinds : unsigned {
  kPlaceInline = 1,
  kPlaceTile = 2,
  kPlaceTask = 4,
  kPlaceSlide = 8,
  kPlaceNest = 16,
  kPlaceRoot = 32,
  // Not placements but the orders of update stages' loops (FuncChoice::update_order): RVars
  // moved outside a tile's pure loops, and the outermost RVar split with its outer half moved.
  kPlaceReorder = 64,
  kPlaceRSplit = 128,
  // Nor is this: an update vectorized along a higher pure dimension (FuncChoice::update_lanes).
  kPlaceLanes = 256,
  kPlaceAll = 511,
  // The default is every kind: each paid once the weights were trained on samples that use it
  // (see docs/RESULTS.md#placement-kinds).
  kPlaceDefault = kPlaceAll,
};

// Everything that steers one autoscheduling run. Halide 14 passes no key/value parameters to a
// plugin, so the search's knobs come from the environment (the names Adams2019 users know where
// the meaning is the same); a bad value is a user error naming the variable.
struct Parameters {
  // MachineParams: cores, last-level cache bytes, and the cost of a cache miss relative to an
  // arithmetic op (balance). All three reach the search: cores and cache through the features
  // and cost terms, balance through the weight of memory terms.
  int parallelism = 16;
  double last_level_cache = 16 * 1024 * 1024;
  double balance = 40;

  int beam_size = 32;       // HL_BEAM_SIZE; 1 = greedy
  int num_passes = 5;       // HL_NUM_PASSES; 1 when greedy
  int random_dropout = 100; // HL_RANDOM_DROPOUT: percent chance no state is dropped (beam_search)
  uint64_t seed = 0;        // HL_SEED
  std::string weights_path; // HL_WEIGHTS_DIR; empty: the embedded baseline
  bool randomize_weights = false; // HL_RANDOMIZE_WEIGHTS (1, or a seed)
  uint64_t weights_seed = 0;
  bool allow_version_mismatch = false; // HKFAC_ALLOW_VERSION_MISMATCH
  int debug = 0;                       // HL_DEBUG_AUTOSCHEDULE
  double time_limit_s = 0;             // HKFAC_TIME_LIMIT_S; 0 = none
  // HKFAC_ROLLOUT: score each candidate as the best complete schedule so far completes it
  // (beam_search.h), not by its decided part alone.
  bool rollout = false;
  int top_k = 0;               // HKFAC_TOPK
  std::string top_k_dir = "."; // HKFAC_TOPK_DIR
  int threads = 0;             // HKFAC_THREADS; 0 = every core
  // HKFAC_PLACEMENTS: root,inline,tile,task,slide,nest,reorder,rsplit,lanes, all
  unsigned placements = kPlaceDefault;
  // HKFAC_INJECT_FAILURE (tests): analysis|search|apply, or candidate-crash|candidate-hang
  // (measured selection's first candidate, the search's pick, crashes or hangs in its process)
  std::string inject_failure;
  // Measured selection (measure.h): HKFAC_TUNE_SECONDS bounds compiling and timing candidates
  // on this host; 0 is the model alone; unset (negative here) sizes it by the pipeline
  // (default_tune_seconds). HKFAC_TUNE_CANDIDATES: how many diverse candidates at most.
  double tune_seconds = -1;
  int tune_candidates = 6;
  // HKFAC_ITERATION_BYTES: the most a Func computed inside another's loops may allocate, with
  // the others computed there, in each iteration (search_space.h): glibc's default mmap and trim
  // threshold, under which a fresh program reuses such buffers without returning their memory.
  double iteration_bytes = 128 * 1024;
  // HKFAC_ITERATION_BYTES_PER_POINT: more where each iteration computes this many bytes' worth
  // of its site's points, whose work then pays for the allocation (8: docs/RESULTS.md#allocation-bound).
  double iteration_bytes_per_point = 8;
  // HKFAC_CACHE_DIR: the per-user cache of timings and measured schedules (tuning_cache.h);
  // unset: $XDG_CACHE_HOME/hkfac, else ~/.cache/hkfac; "off": none.
  std::string cache_dir;
  bool cache_off = false;
  // HKFAC_REFEATURIZE: a file of "old.featurization new.featurization" lines, archived samples
  // of this pipeline to carry to the current features (refeaturize.h) before the search.
  std::string refeaturize_list;

  // GPU targets (any GPU feature): the device's limits. MachineParams' parallelism counts the
  // streaming multiprocessors there (Li2018 reads it the same way).
  bool gpu = false;
  int gpu_max_threads = 1024;          // HKFAC_GPU_MAX_THREADS: threads per block
  double gpu_shared_bytes = 48 * 1024; // HKFAC_GPU_SHARED_BYTES: shared memory per block
  double gpu_thread_bytes = 512;       // HKFAC_GPU_THREAD_BYTES: one thread's staged producers
  int gpu_sms = 16;                    // HKFAC_GPU_SMS, else MachineParams' parallelism

  static Parameters from(const Halide::MachineParams &params,
                         const Halide::Target &target = Halide::get_host_target());
};

// A line on stderr when `level` <= HL_DEBUG_AUTOSCHEDULE.
void log_line(const Parameters &p, int level, const std::string &line);

} // namespace hkfac::sched
