// Shows, exports and clears the Hkfac plugin's per-user tuning cache.
#include <absl/flags/flag.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sys/stat.h>

#include "hkfac/cost_model/samples.h"
#include "hkfac/cost_model/tuning_cache.h"
#include "hkfac/cost_model/weights.h"
#include "hkfac/error.h"
#include "tool_main.h"

ABSL_FLAG(std::string, cache_dir, "",
          "The cache directory (default: as the plugin finds it: HKFAC_CACHE_DIR, else "
          "$XDG_CACHE_HOME/hkfac, else ~/.cache/hkfac)");

namespace {

namespace cm = hkfac::cost_model;

std::string cache_dir() {
  std::string dir = absl::GetFlag(FLAGS_cache_dir);
  if (!dir.empty())
    return dir;
  const char *env = std::getenv("HKFAC_CACHE_DIR");
  if (env && *env) {
    if (std::string(env) == "off")
      throw hkfac::Error("HKFAC_CACHE_DIR=off: the cache is disabled (pass --cache_dir=DIR)");
    return env;
  }
  const char *xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && xdg[0] == '/')
    return std::string(xdg) + "/hkfac";
  const char *home = std::getenv("HOME");
  if (!home || !*home)
    throw hkfac::Error("neither HKFAC_CACHE_DIR, XDG_CACHE_HOME nor HOME is set; pass --cache_dir");
  return std::string(home) + "/.cache/hkfac";
}

int show(cm::TuningCache &cache) {
  const cm::TuningCache::Totals t = cache.totals();
  std::printf("%s: %lld pipelines, %lld samples (this host: %lld), %lld refits, %.1f KiB\n",
              cache.path().c_str(), static_cast<long long>(t.pipelines),
              static_cast<long long>(t.samples),
              static_cast<long long>(
                  cache.sample_count(cm::TuningCache::host_id(), cm::kCpuScheduleFeaturesVersion)),
              static_cast<long long>(t.corrections), t.bytes / 1024.0);
  std::printf("this host: %s\n", cm::TuningCache::host_id().c_str());
  const auto rows = cache.pipelines();
  if (rows.empty())
    return 0;
  std::printf("\n%-20s %-24s %6s %10s %10s %7s %-16s %s\n", "updated (UTC)", "pipeline", "stages",
              "best ms", "model ms", "samples", "chosen", "target / machine_params");
  for (const auto &r : rows) {
    char model[32] = "-";
    if (r.best.model_ms > 0)
      std::snprintf(model, sizeof(model), "%.4g", r.best.model_ms);
    std::printf("%-20s %-24.24s %6d %10.4g %10s %7lld %-16.16s %s / %s\n", r.best.updated.c_str(),
                r.info.name.c_str(), r.info.stages, r.best.ms, model,
                static_cast<long long>(r.samples), r.best.origin.c_str(), r.info.target.c_str(),
                r.info.machine_params.c_str());
  }
  return 0;
}

// Every sample of this host as a .sample file (pipeline ids by fingerprint, schedule ids in
// order), with samples.txt listing them: the input retrain_cost_model takes.
int export_samples(cm::TuningCache &cache, const std::string &dir) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    throw hkfac::Error(dir + ": cannot create the directory");
  const auto samples = cache.samples(cm::TuningCache::host_id(), cm::kCpuScheduleFeaturesVersion);
  std::map<std::string, int> pipeline_ids;
  std::map<std::string, int> per_pipeline;
  std::ofstream list(dir + "/samples.txt");
  if (!list)
    throw hkfac::Error(dir + "/samples.txt: cannot write");
  for (const auto &s : samples) {
    const int pid =
        pipeline_ids.emplace(s.pipeline, static_cast<int>(pipeline_ids.size())).first->second;
    const int sid = per_pipeline[s.pipeline]++;
    const std::vector<uint8_t> bytes =
        cm::featurization_to_sample(s.featurization, static_cast<float>(s.ms), pid, sid,
                                    cm::kCpuScheduleFeatures, "sample of pipeline " + s.pipeline);
    const std::string path =
        dir + "/p" + std::to_string(pid) + "_s" + std::to_string(sid) + ".sample";
    hkfac::detail::write_file_atomically(path, bytes);
    list << path << "\n";
  }
  std::printf("wrote %zu samples of %zu pipelines to %s (list: %s/samples.txt)\n", samples.size(),
              pipeline_ids.size(), dir.c_str(), dir.c_str());
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  return hkfac::tools::run_tool(
      argc, argv, "hkfac_cache", "tools/hkfac_cache.cpp",
      "Usage: hkfac_cache [flags] show | clear | export DIR\n"
      "The Hkfac plugin's tuning cache: schedules it measured fastest per pipeline, target and\n"
      "machine_params, and this machine's timings of candidates (its own training samples).\n"
      "  show        the cache's path, its totals and one line per pipeline\n"
      "  clear       forgets everything (the next generator run searches and measures again)\n"
      "  export DIR  this host's samples as .sample files and DIR/samples.txt, for\n"
      "              retrain_cost_model --initial_weights=... (a K-FAC fine-tune of a file)",
      [](const std::vector<std::string> &args) {
        if (args.empty())
          throw hkfac::Error("expected a command: show, clear or export DIR; see --help");
        const std::string &cmd = args[0];
        if ((cmd == "show" || cmd == "clear") && args.size() != 1)
          throw hkfac::Error(cmd + " takes no arguments");
        if (cmd == "export" && args.size() != 2)
          throw hkfac::Error("export takes one argument, the directory to write");
        if (cmd != "show" && cmd != "clear" && cmd != "export")
          throw hkfac::Error("unknown command \"" + cmd + "\": expected show, clear or export");
        cm::TuningCache cache(cache_dir());
        if (cmd == "show")
          return show(cache);
        if (cmd == "export")
          return export_samples(cache, args[1]);
        const auto t = cache.totals();
        cache.clear();
        std::printf("cleared %s: %lld pipelines, %lld samples, %lld refits\n", cache.path().c_str(),
                    static_cast<long long>(t.pipelines), static_cast<long long>(t.samples),
                    static_cast<long long>(t.corrections));
        return 0;
      });
}
