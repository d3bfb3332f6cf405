// Reading and validating the plugin's parameters (see parameters.h).
#include "parameters.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>

namespace hkfac::sched {

namespace {

const char *env(const char *name) {
  const char *v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int64_t env_int(const char *name, int64_t def, int64_t lo, int64_t hi) {
  const char *v = env(name);
  if (!v)
    return def;
  errno = 0;
  char *end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  input_check(errno == 0 && end && *end == '\0' && x >= lo && x <= hi)
      << "Hkfac: " << name << "=\"" << v << "\" is not an integer in [" << lo << ", " << hi
      << "]\n";
  return x;
}

double env_double(const char *name, double def, double lo, double hi) {
  const char *v = env(name);
  if (!v)
    return def;
  errno = 0;
  char *end = nullptr;
  const double x = std::strtod(v, &end);
  input_check(errno == 0 && end && *end == '\0' && std::isfinite(x) && x >= lo && x <= hi)
      << "Hkfac: " << name << "=\"" << v << "\" is not a number in [" << lo << ", " << hi << "]\n";
  return x;
}

} // namespace

Parameters Parameters::from(const Halide::MachineParams &mp, const Halide::Target &target) {
  Parameters p;
  input_check(mp.parallelism >= 1 && mp.parallelism <= 4096)
      << "Hkfac: machine_params parallelism " << mp.parallelism << " is not in [1, 4096]\n";
  input_check(mp.last_level_cache_size >= 1024)
      << "Hkfac: machine_params last-level cache size " << mp.last_level_cache_size
      << " bytes is below 1024\n";
  input_check(std::isfinite(mp.balance) && mp.balance > 0)
      << "Hkfac: machine_params balance " << mp.balance << " must be positive\n";
  p.parallelism = mp.parallelism;
  p.last_level_cache = static_cast<double>(mp.last_level_cache_size);
  p.balance = mp.balance;

  p.beam_size = static_cast<int>(env_int("HL_BEAM_SIZE", 32, 1, 100000));
  p.num_passes = static_cast<int>(env_int("HL_NUM_PASSES", p.beam_size == 1 ? 1 : 5, 1, 100));
  p.random_dropout = static_cast<int>(env_int("HL_RANDOM_DROPOUT", 100, 1, 100));
  p.seed = static_cast<uint64_t>(env_int("HL_SEED", 0, 0, std::numeric_limits<int64_t>::max()));
  if (const char *w = env("HL_WEIGHTS_DIR"))
    p.weights_path = w;
  const int64_t weights_seed =
      env_int("HL_RANDOMIZE_WEIGHTS", 0, 0, std::numeric_limits<int64_t>::max());
  p.randomize_weights = weights_seed != 0;
  p.weights_seed = static_cast<uint64_t>(weights_seed);
  p.allow_version_mismatch = env_int("HKFAC_ALLOW_VERSION_MISMATCH", 0, 0, 1) != 0;
  p.debug = static_cast<int>(env_int("HL_DEBUG_AUTOSCHEDULE", 0, 0, 10));
  p.time_limit_s = env_double("HKFAC_TIME_LIMIT_S", 0, 0, 1e7);
  p.rollout = env_int("HKFAC_ROLLOUT", 0, 0, 1) != 0;
  p.top_k = static_cast<int>(env_int("HKFAC_TOPK", 0, 0, 1000));
  if (const char *d = env("HKFAC_TOPK_DIR"))
    p.top_k_dir = d;
  p.threads = static_cast<int>(env_int("HKFAC_THREADS", 0, 0, 4096));
  if (const char *r = env("HKFAC_REFEATURIZE"))
    p.refeaturize_list = r;
  const char *placements = std::getenv("HKFAC_PLACEMENTS");
  input_check(!placements || *placements)
      << "Hkfac: HKFAC_PLACEMENTS is set but empty; name the kinds (root, inline, tile, task, "
         "slide, nest, reorder, rsplit, lanes) or all, or unset it\n";
  if (const char *v = env("HKFAC_PLACEMENTS")) {
    p.placements = 0;
    const std::string list = v;
    size_t at = 0;
    while (at <= list.size()) {
      const size_t comma = std::min(list.find(',', at), list.size());
      const std::string kind = list.substr(at, comma - at);
      const unsigned bit = kind == "inline"    ? kPlaceInline
                           : kind == "tile"    ? kPlaceTile
                           : kind == "task"    ? kPlaceTask
                           : kind == "slide"   ? kPlaceSlide
                           : kind == "nest"    ? kPlaceNest
                           : kind == "root"    ? kPlaceRoot
                           : kind == "reorder" ? kPlaceReorder
                           : kind == "rsplit"  ? kPlaceRSplit
                           : kind == "lanes"   ? kPlaceLanes
                           : kind == "all"     ? kPlaceAll
                                               : 0u;
      input_check(bit != 0) << "Hkfac: HKFAC_PLACEMENTS=\"" << v << "\" names \"" << kind
                            << "\", which is not one of root, inline, tile, task, slide, nest, "
                               "reorder, rsplit, lanes, all\n";
      p.placements |= bit;
      at = comma + 1;
    }
  }
  if (const char *f = env("HKFAC_INJECT_FAILURE")) {
    p.inject_failure = f;
    input_check(p.inject_failure == "analysis" || p.inject_failure == "search" ||
                p.inject_failure == "apply" || p.inject_failure == "candidate-crash" ||
                p.inject_failure == "candidate-hang")
        << "Hkfac: HKFAC_INJECT_FAILURE=\"" << f
        << "\" is not analysis, search, apply, candidate-crash or candidate-hang\n";
  }
  p.tune_seconds = env_double("HKFAC_TUNE_SECONDS", -1, 0, 1e6);
  p.tune_candidates = static_cast<int>(env_int("HKFAC_TUNE_CANDIDATES", 6, 1, 64));
  p.iteration_bytes = env_double("HKFAC_ITERATION_BYTES", 128 * 1024, 0, 1e15);
  p.iteration_bytes_per_point = env_double("HKFAC_ITERATION_BYTES_PER_POINT", 8, 0, 1e9);
  if (const char *c = env("HKFAC_CACHE_DIR")) {
    p.cache_off = std::string(c) == "off";
    if (!p.cache_off)
      p.cache_dir = c;
  } else if (const char *x = env("XDG_CACHE_HOME"); x && x[0] == '/') {
    p.cache_dir = std::string(x) + "/hkfac";
  } else if (const char *h = env("HOME")) {
    p.cache_dir = std::string(h) + "/.cache/hkfac";
  } else {
    p.cache_off = true;
  }
  p.gpu = target.has_gpu_feature();
  p.gpu_max_threads = static_cast<int>(env_int("HKFAC_GPU_MAX_THREADS", 1024, 32, 4096));
  p.gpu_shared_bytes = env_double("HKFAC_GPU_SHARED_BYTES", 48 * 1024, 0, 1 << 30);
  p.gpu_thread_bytes = env_double("HKFAC_GPU_THREAD_BYTES", 512, 0, 1 << 20);
  p.gpu_sms = static_cast<int>(env_int("HKFAC_GPU_SMS", mp.parallelism, 1, 4096));
  return p;
}

void log_line(const Parameters &p, int level, const std::string &line) {
  if (level <= p.debug)
    std::cerr << "Hkfac: " << line << "\n";
}

} // namespace hkfac::sched
