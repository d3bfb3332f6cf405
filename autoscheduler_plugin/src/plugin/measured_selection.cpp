// Measured selection (see measured_selection.h).
#include "measured_selection.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "register_tiles.h"

namespace hkfac::sched {

double default_tune_seconds(const PipelineAnalysis &dag) {
  return std::clamp(2.0 + 0.5 * dag.num_stages, 3.0, 30.0);
}

namespace {

MeasureSettings settings_for(const Parameters &params, const HostRun &host, double budget_s) {
  MeasureSettings m;
  m.budget_s = budget_s;
  m.jit = host.jit;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  m.compile_jobs = params.threads > 0 ? std::min(params.threads, cores) : cores;
  m.seed = params.seed + 1;
  m.runner_dir = params.cache_off ? "/tmp/hkfac-runner-" + std::to_string(getuid())
                                  : params.cache_dir + "/runner";
  if (params.inject_failure == "candidate-crash")
    m.inject_crash = 0;
  if (params.inject_failure == "candidate-hang")
    m.inject_hang = 0;
  return m;
}

} // namespace

MeasuredSelection choose_by_measurement(const PipelineAnalysis &dag,
                                        const std::vector<Halide::Internal::Function> &outputs,
                                        std::vector<Candidate> candidates,
                                        const MeasureSettings &settings, const Parameters &params) {
  const auto t0 = std::chrono::steady_clock::now();
  MeasuredSelection sel;
  sel.candidates = std::move(candidates);
  std::vector<StatePtr> states;
  for (const Candidate &c : sel.candidates)
    states.push_back(c.state);
  sel.timings = measure_candidates(dag, outputs, states, settings, params);
  sel.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  double best = INFINITY;
  for (size_t i = 0; i < sel.timings.size(); ++i)
    if (sel.timings[i].ok && sel.timings[i].ms < best) {
      best = sel.timings[i].ms;
      sel.chosen = static_cast<int>(i);
    }
  sel.measured = std::isfinite(best);
  sel.sampled = sel.candidates.size();
  int ran = 0, failed = 0, first_failed = -1;
  for (size_t i = 0; i < sel.timings.size(); ++i) {
    const Timing &t = sel.timings[i];
    ran += t.ok;
    // "not compiled": the budget ran out before it; not a failure of the candidate.
    if (!t.ok && t.failure.rfind("not compiled", 0) != 0) {
      first_failed = failed++ == 0 ? static_cast<int>(i) : first_failed;
    }
  }
  std::ostringstream line;
  line.precision(3);
  if (!sel.measured) {
    line << "measured selection timed none of " << sel.candidates.size() << " candidates in "
         << sel.seconds << " s (" << (sel.timings.empty() ? "none" : sel.timings[0].failure)
         << "); applied the model's pick";
  } else {
    const Timing &model_pick = sel.timings[0];
    line << "timed " << ran << " of " << sel.candidates.size() << " candidates in " << sel.seconds
         << " s; applied the " << sel.candidates[sel.chosen].origin << " candidate #" << sel.chosen
         << " (" << best << " ms";
    if (sel.chosen != 0 && model_pick.ok)
      line << "; the model's pick " << model_pick.ms << " ms";
    else if (sel.chosen != 0)
      line << "; the model's pick did not run: " << model_pick.failure;
    line << ")";
    // The first failure's reason at the default log level: a candidate Halide refuses or that
    // crashes is worth a user's report.
    if (failed) {
      line << "; " << failed << " failed (#" << first_failed << ": "
           << sel.timings[first_failed].failure << ")";
    }
  }
  sel.summary = line.str();
  return sel;
}

MeasuredSelection select_by_measurement(const PipelineAnalysis &dag,
                                        const std::vector<Halide::Internal::Function> &outputs,
                                        CostModel &model, const Parameters &params,
                                        const std::vector<StatePtr> &pool, const HostRun &host,
                                        double budget_s,
                                        const std::vector<Candidate> &second_opinions) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Candidate> candidates =
      diverse_candidates(dag, model, params, pool, params.tune_candidates, second_opinions);
  const double chosen_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const MeasureSettings m = settings_for(params, host, std::max(0.0, budget_s - chosen_s));
  MeasuredSelection sel = choose_by_measurement(dag, outputs, std::move(candidates), m, params);
  sel.seconds += chosen_s;
  return sel;
}

// Unrolled rows cost compile time and code: a variant must beat its base by more than the
// spread of two timings of one schedule in one round.
constexpr double kRegisterTileGain = 0.97;

void refine_by_measurement(const PipelineAnalysis &dag,
                           const std::vector<Halide::Internal::Function> &outputs,
                           const Parameters &params, const HostRun &host, double budget_s,
                           MeasuredSelection &sel) {
  if (!sel.measured || budget_s <= 0)
    return;
  const auto t0 = std::chrono::steady_clock::now();
  const Candidate base = sel.candidates[sel.chosen];
  std::vector<Candidate> round{base};
  for (int rows : {2, 4})
    if (StatePtr v = register_tiled(dag, *base.state, rows))
      round.push_back({v, "register tiles of " + std::to_string(rows) + " rows on the " +
                              base.origin + " candidate"});
  if (round.size() < 2)
    return;
  MeasureSettings m = settings_for(params, host, budget_s);
  m.inject_crash = m.inject_hang = -1; // the first round's candidates took those
  const MeasuredSelection again = choose_by_measurement(dag, outputs, round, m, params);
  sel.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (size_t i = 1; i < round.size(); ++i) {
    sel.candidates.push_back(again.candidates[i]);
    sel.timings.push_back(again.timings[i]);
  }
  std::ostringstream line;
  line.precision(3);
  line << "; register tiles timed in " << again.seconds << " s";
  if (!again.timings[0].ok) {
    line << ", not compared (the " << base.origin
         << " candidate, compiled again, did not run: " << again.timings[0].failure << ")";
  } else if (again.chosen == 0 ||
             again.timings[again.chosen].ms > kRegisterTileGain * again.timings[0].ms) {
    line << ", none " << (again.chosen == 0 ? "faster" : "clearly faster");
  } else {
    sel.chosen = static_cast<int>(sel.candidates.size() - round.size() + again.chosen);
    line << ", applied " << again.candidates[again.chosen].origin << " ("
         << again.timings[again.chosen].ms << " ms against " << again.timings[0].ms
         << " ms beside it)";
  }
  sel.summary += line.str();
}

} // namespace hkfac::sched
