// The Hkfac autoscheduler's entry point and its registration with Halide.
#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>

#include "Halide.h"
#include "apply_schedule.h"
#include "beam_search.h"
#include "cost_model.h"
#include "input_error.h"
#include "parameters.h"
#include "pipeline_analysis.h"
#include "refeaturize.h"
#include "schedule_features.h"

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
  for (size_t i = 0; i < r.best.size(); ++i) {
    const std::string file = "hkfac_topk_" + std::to_string(i) + ".schedule.h";
    std::ofstream out(params.top_k_dir + "/" + file);
    out << "// Hkfac schedule ranked " << i << " (predicted cost " << r.best[i]->cost
        << "): the body of apply_schedule_<name>(pipeline, target)\n"
        << apply_schedule(dag, *r.best[i], outputs, false);
    table << i << " " << r.best[i]->cost << " " << file << "\n";
  }
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
    CostModel model(dag, params);
    log_line(params, 1, "weights: " + model.weights_source());
    if (params.inject_failure == "search")
      plugin_check(false) << "injected failure in the search (HKFAC_INJECT_FAILURE)";
    const SearchResult r = beam_search(dag, model, params);
    if (params.inject_failure == "apply") {
      // Leave a half-applied schedule behind, as a real failure inside Halide would.
      Func(outputs[0]).compute_root();
      plugin_check(false) << "injected failure while applying (HKFAC_INJECT_FAILURE)";
    }
    results->schedule_source = apply_schedule(dag, *r.best.front(), outputs, true);
    results->featurization = featurization_bytes(dag, *r.best.front(), params);
    if (params.top_k > 0)
      write_top_k(params, dag, r, outputs);
    std::ostringstream line;
    line << dag.funcs.size() << " Funcs, " << dag.num_stages << " stages; " << r.states_evaluated
         << " states in " << r.seconds << " s (" << r.states_evaluated / std::max(r.seconds, 1e-9)
         << "/s); analysis " << analysis_s << " s, featurization " << model.featurize_seconds()
         << " s, cost model " << model.network_seconds() << " s; predicted cost "
         << r.best.front()->cost << (r.timed_out ? " (time limit reached)" : "");
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
