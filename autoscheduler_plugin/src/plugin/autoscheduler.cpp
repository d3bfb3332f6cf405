// The Hkfac autoscheduler's entry point and its registration with Halide.
#include <chrono>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>

#include "Halide.h"
#include "apply_schedule.h"
#include "beam_search.h"
#include "cost_model.h"
#include "hkfac/cost_model/tuning_cache.h"
#include "hkfac/cost_model/weights.h"
#include "host_cpu.h"
#include "input_error.h"
#include "machine_refit.h"
#include "measured_selection.h"
#include "parameters.h"
#include "pipeline_analysis.h"
#include "pipeline_fingerprint.h"
#include "refeaturize.h"
#include "schedule_features.h"
#include "state_codec.h"

namespace hkfac::sched {

using namespace Halide;
using namespace Halide::Internal;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The K best schedules beside the outputs: hkfac_topk_<i>.schedule.h bodies and a table of
// predicted costs, for autotuning by benchmarking them.
void write_top_k(const Parameters &params, const PipelineAnalysis &dag, const SearchResult &r,
                 const std::vector<Function> &outputs) {
  std::ofstream table(params.top_k_dir + "/hkfac_topk.txt");
  input_check(static_cast<bool>(table))
      << "Hkfac: HKFAC_TOPK_DIR=\"" << params.top_k_dir << "\" is not a writable directory\n";
  table << "# rank predicted_cost schedule_file\n";
  for (size_t i = 0; i < r.best.size() && static_cast<int>(i) < params.top_k; ++i) {
    const std::string file = "hkfac_topk_" + std::to_string(i) + ".schedule.h";
    std::ofstream out(params.top_k_dir + "/" + file);
    out << "// Hkfac schedule ranked " << i << " (predicted cost " << r.best[i]->cost
        << "): the body of apply_schedule_<name>(pipeline, target)\n"
        << apply_schedule(dag, *r.best[i], outputs, false);
    table << i << " " << r.best[i]->cost << " " << file << "\n";
  }
}

// The tuning cache, or nullptr where it is off or cannot be opened (said in one line: the
// search goes on without it).
std::unique_ptr<cost_model::TuningCache> open_cache(const Parameters &params) {
  if (params.cache_off)
    return nullptr;
  try {
    return std::make_unique<cost_model::TuningCache>(params.cache_dir);
  } catch (const std::exception &e) {
    std::cerr << "Hkfac: the tuning cache is off for this run: " << e.what() << "\n";
    return nullptr;
  }
}

// Applies the fastest schedule measured for this pipeline on this machine, if the cache has
// one that decodes and applies; false leaves the Funcs as they were.
bool apply_cached(cost_model::TuningCache &cache, const std::string &key,
                  const PipelineAnalysis &dag, const std::vector<Function> &outputs,
                  const Parameters &params, ScheduleSnapshot &snapshot,
                  AutoSchedulerResults *results) {
  std::optional<cost_model::TuningCache::Schedule> hit;
  try {
    hit = cache.best_schedule(key);
  } catch (const std::exception &e) {
    std::cerr << "Hkfac: the tuning cache could not be read: " << e.what() << "\n";
    return false;
  }
  if (!hit)
    return false;
  const std::shared_ptr<State> state = decode_state(hit->encoded, dag);
  if (!state) {
    log_line(params, 1, "the cached schedule does not decode; searching again");
    return false;
  }
  try {
    results->schedule_source = apply_schedule(dag, *state, outputs, true);
    results->featurization = featurization_bytes(dag, *state, params);
  } catch (const std::exception &e) {
    log_line(params, 1,
             std::string("the cached schedule does not apply (") + e.what() + "); searching again");
    snapshot.restore();
    return false;
  }
  std::ostringstream line;
  line.precision(3);
  line << "Hkfac: applied the schedule measured fastest on this machine (" << hit->ms << " ms, "
       << hit->updated << ", from " << cache.path() << "; HKFAC_CACHE_DIR=off searches again)\n";
  std::cerr << line.str();
  return true;
}

// Keeps what a measurement found: the fastest schedule, and every candidate timed on a quiet
// host as a sample of this machine.
void record_measurement(cost_model::TuningCache &cache, const std::string &key,
                        const PipelineAnalysis &dag, const std::vector<Function> &outputs,
                        const Target &target, const MachineParams &mp, const Parameters &params,
                        const MeasuredSelection &sel) {
  const std::string host = cost_model::TuningCache::host_id();
  cost_model::TuningCache::PipelineInfo info;
  info.key = key;
  info.name = pipeline_name(outputs);
  info.target = target.to_string();
  info.machine_params = mp.to_string();
  info.host = host;
  info.funcs = static_cast<int>(dag.funcs.size());
  info.stages = dag.num_stages;
  const Candidate &chosen = sel.candidates[sel.chosen];
  cost_model::TuningCache::Schedule best;
  best.encoded = encode_state(*chosen.state);
  best.source = apply_schedule(dag, *chosen.state, outputs, false);
  best.ms = sel.timings[sel.chosen].ms;
  best.model_ms = sel.timings[0].ok ? sel.timings[0].ms : 0;
  best.origin = chosen.origin;
  std::vector<cost_model::TuningCache::Sample> samples;
  for (size_t i = 0; i < sel.sampled; ++i) {
    const Timing &t = sel.timings[i];
    if (!t.ok || !t.quiet)
      continue;
    cost_model::TuningCache::Sample s;
    s.pipeline = key;
    s.schedule = state_hash(*sel.candidates[i].state);
    s.host = host;
    s.target = info.target;
    s.features_version = static_cast<int>(cost_model::kCpuScheduleFeaturesVersion);
    s.stages = dag.num_stages;
    s.featurization = featurization_bytes(dag, *sel.candidates[i].state, params);
    s.ms = t.ms;
    samples.push_back(std::move(s));
  }
  try {
    cache.record(info, best, samples);
  } catch (const std::exception &e) {
    std::cerr << "Hkfac: the tuning cache could not be written: " << e.what() << "\n";
  }
}

// The budget of measured selection on this target (0: the model alone), saying once why it is
// off where the user did not ask for that.
double tune_budget(const Parameters &params, const PipelineAnalysis &dag, const HostRun &host) {
  if (params.tune_seconds == 0)
    return 0;
  const bool asked = params.tune_seconds > 0;
  // Data generation wants the searched schedule itself, random or dropped out.
  if (!asked && (params.randomize_weights || params.random_dropout < 100))
    return 0;
  if (!host.runs) {
    std::cerr << "Hkfac: measured selection is off for " << host.why_not
              << "; the model alone chooses (HKFAC_TUNE_SECONDS=0 says so quietly)\n";
    return 0;
  }
  return asked ? params.tune_seconds : default_tune_seconds(dag);
}

void autoschedule(const Pipeline &pipeline, const Target &target, const MachineParams &mp,
                  AutoSchedulerResults *results) {
  const auto t0 = Clock::now();
  const Parameters params = Parameters::from(mp, target);
  std::vector<Function> outputs;
  for (const Func &f : pipeline.outputs())
    outputs.push_back(f.function());
  results->scheduler_name = "Hkfac";
  results->target = target;
  results->machine_params_string = mp.to_string();
  ScheduleSnapshot snapshot(outputs);
  try {
    if (params.inject_failure == "analysis")
      plugin_check(false) << "injected failure in the analysis (HKFAC_INJECT_FAILURE)";
    PipelineAnalysis dag(outputs, target);
    dag.gpu_shared_bytes = params.gpu_shared_bytes;
    dag.gpu_thread_bytes = params.gpu_thread_bytes;
    const double analysis_s = seconds_since(t0);
    if (params.debug >= 2) {
      std::string names;
      for (const FuncNode &f : dag.funcs)
        names += " " + f.name + "(" + std::to_string(f.stages.size()) + ")";
      log_line(params, 2, "Funcs in realization order:" + names);
      std::ostringstream shared;
      for (const FuncNode &f : dag.funcs)
        for (const StageNode &s : f.stages)
          for (const Access &a : s.accesses)
            if (a.producer >= 0 && a.inline_copies > 0 && a.inline_copies < a.calls)
              shared << " " << a.name << " in " << f.name << "." << s.index << ": "
                     << a.inline_copies << " of " << a.calls << ";";
      if (!shared.str().empty())
        log_line(params, 2, "inlined calls that CSE shares:" + shared.str());
    }
    if (!params.refeaturize_list.empty())
      refeaturize(dag, params, params.refeaturize_list);
    const HostRun host = host_run(target);
    if (host.runs && !host.missing.empty()) {
      std::string names;
      for (const std::string &m : host.missing)
        names += (names.empty() ? "" : ", ") + m;
      std::cerr << "Hkfac: the target claims " << names << ", which this host's CPU lacks"
                << (host.missing_detail.empty() ? "" : " (" + host.missing_detail + ")")
                << ": code built for it may stop with SIGILL here; candidates are timed without"
                << " it\n";
    }
    std::unique_ptr<cost_model::TuningCache> cache =
        params.randomize_weights ? nullptr : open_cache(params);
    std::string key;
    if (cache) {
      key = pipeline_fingerprint(dag, outputs, target, mp.to_string());
      if (apply_cached(*cache, key, dag, outputs, params, snapshot, results))
        return;
    }
    CostModel model(dag, params);
    bool refitted = false;
    if (cache && host.runs && !params.randomize_weights && model.weights().size() == 1) {
      // This machine's own timings, where they order its schedules better than the file.
      std::string note;
      try {
        if (auto refit = machine_refit(*cache, model.weights()[0], params, note)) {
          model.replace_weights({refit->weights}, model.weights_source() +
                                                      ", refitted on this machine (" + note + ")");
          refitted = true;
        }
      } catch (const std::exception &e) {
        note = std::string("the refit on this machine's timings failed: ") + e.what();
      }
      if (!note.empty())
        log_line(params, 1, note);
    }
    log_line(params, 1, "weights: " + model.weights_source());
    if (params.inject_failure == "search")
      plugin_check(false) << "injected failure in the search (HKFAC_INJECT_FAILURE)";
    const double budget = tune_budget(params, dag, host);
    const auto t_tune = Clock::now();
    Parameters search_params = params;
    if (budget > 0)
      search_params.top_k = std::max(params.top_k, 64); // the pool candidates are drawn from
    const SearchResult r = beam_search(dag, model, search_params);
    StatePtr chosen = r.best.front();
    if (budget > 0) {
      // Second opinions that measurement settles where the model cannot. A refit adopted on a
      // few pipelines' held-out ordering can still steer one pipeline wrong: the file's own
      // pick is timed beside it. The allocation bound keeps the model from per-task buffers
      // that churn the heap, and from the few that pay (nl_means' 4-D dist): the unbounded
      // search's pick is timed too.
      std::vector<Candidate> second;
      if (refitted) {
        CostModel file_model(dag, params);
        const SearchResult f = beam_search(dag, file_model, params);
        if (!f.best.empty())
          second.push_back({f.best.front(), "weights file's"});
      }
      // Where the bound left nothing out, the unbounded search would take the same path.
      if (r.oversized_dropped > 0) {
        Parameters unbounded = params;
        unbounded.iteration_bytes = std::numeric_limits<double>::infinity();
        unbounded.iteration_bytes_per_point = 0;
        const SearchResult u = beam_search(dag, model, unbounded);
        if (!u.best.empty())
          second.push_back({u.best.front(), "unbounded"});
      }
      // Where the pick's pieces fit already, the bounded search would follow it.
      if (largest_iteration_bytes(dag, *chosen) > kCacheSizedBytes)
        if (StatePtr small = cache_sized_schedule(dag, model, params))
          second.push_back({small, "cache-sized"});
      MeasuredSelection sel =
          select_by_measurement(dag, outputs, model, params, r.best, host, budget, second);
      // What the first round left of the budget; by default no less than 40% of it or what
      // three compiles of the chosen candidate on two cores and their timing take.
      const double left = budget - seconds_since(t_tune);
      const double compile_s = sel.measured ? sel.timings[sel.chosen].compile_s : 0;
      refine_by_measurement(dag, outputs, params, host,
                            params.tune_seconds > 0
                                ? left
                                : std::max({left, 0.4 * budget, 3.5 * compile_s}),
                            sel);
      chosen = sel.candidates[sel.chosen].state;
      std::cerr << "Hkfac: " << sel.summary << "\n";
      for (size_t i = 0; i < sel.candidates.size(); ++i) {
        std::ostringstream c;
        c << "candidate #" << i << " (" << sel.candidates[i].origin << ", predicted "
          << sel.candidates[i].state->cost << "): ";
        const Timing &t = sel.timings[i];
        if (t.ok)
          c << t.ms << " ms over " << t.runs << " runs, compiled in " << t.compile_s << " s"
            << (t.stopped ? ", then stopped (over five times the best)" : "")
            << (t.quiet ? "" : ", beside other work");
        else
          c << t.failure;
        log_line(params, 1, c.str());
      }
      if (cache && sel.measured)
        record_measurement(*cache, key, dag, outputs, target, mp, params, sel);
    }
    if (params.inject_failure == "apply") {
      // Leave a half-applied schedule behind, as a real failure inside Halide would.
      Func(outputs[0]).compute_root();
      plugin_check(false) << "injected failure while applying (HKFAC_INJECT_FAILURE)";
    }
    results->schedule_source = apply_schedule(dag, *chosen, outputs, true);
    results->featurization = featurization_bytes(dag, *chosen, params);
    if (params.top_k > 0)
      write_top_k(params, dag, r, outputs);
    std::ostringstream line;
    line << dag.funcs.size() << " Funcs, " << dag.num_stages << " stages; " << r.states_evaluated
         << " states in " << r.seconds << " s (" << r.states_evaluated / std::max(r.seconds, 1e-9)
         << "/s); analysis " << analysis_s << " s, featurization " << model.featurize_seconds()
         << " s, cost model " << model.network_seconds() << " s; predicted cost " << chosen->cost
         << (r.timed_out ? " (time limit reached)" : "");
    log_line(params, 1, line.str());
    log_line(params, 2, "schedule:\n" + results->schedule_source);
  } catch (const InputError &) {
    throw;
  } catch (const std::exception &e) {
    std::string what = e.what();
    while (!what.empty() && (what.back() == '\n' || what.back() == ' '))
      what.pop_back();
    std::replace(what.begin(), what.end(), '\n', ' ');
    std::cerr << "Warning: Hkfac autoscheduler failed (" << what
              << "); applying the fallback schedule (every Func at root"
              << (params.gpu ? ", on the GPU" : "") << ")\n";
    snapshot.restore();
    results->schedule_source = apply_fallback(outputs, params.gpu);
    results->featurization.clear();
  }
}

// Registration at load time. Halide refuses a name already taken (by throwing, here inside
// static initialisation): that is caught and reported, so loading never aborts the generator.
struct Registration {
  Registration() {
    try {
      Pipeline::add_autoscheduler("Hkfac", autoschedule);
    } catch (const std::exception &e) {
      std::cerr << "Error: the Hkfac plugin could not register: " << e.what() << "\n";
    }
  }
} registration;

} // namespace

} // namespace hkfac::sched
