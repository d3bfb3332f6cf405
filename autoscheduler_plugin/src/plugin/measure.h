// Timing candidate schedules on this machine, each in a process of its own.
#pragma once

#include <string>
#include <vector>

#include "Halide.h"
#include "parameters.h"
#include "pipeline_analysis.h"
#include "schedule_state.h"

namespace hkfac::sched {

// One candidate's measurement.
struct Timing {
  bool ok = false;
  double ms = 0;        // best time of one run over all rounds
  double compile_s = 0; // applying the schedule and compiling it (JIT)
  int runs = 0;         // timed runs in all
  bool quiet = false;   // every round taken with the host's cores free of other work
  bool stopped = false; // ran over five times the best so far: timed no more after that
  std::string failure;  // when not ok: what happened to it
};

struct MeasureSettings {
  double budget_s = 10;      // compiling and timing, all candidates together
  Halide::Target jit;        // what candidates are compiled for (host_cpu.h)
  int compile_jobs = 2;      // candidates compiled at once
  int rounds = 3;            // interleaved rounds of timing
  double min_round_s = 0.05; // one candidate's timing per round at least (runs repeat)
  uint64_t seed = 1;         // input data
  std::string lock_path = "/tmp/hkfac-timing.lock"; // host_quiet.h; empty: none
  double max_foreign_share = 0.15; // other processes' share of the cores that spoils a timing
  // Where the timing runner is compiled and kept (aot_candidate.h): candidates are then built
  // ahead of time and timed in fresh processes, as a user's program runs them. Empty, or no
  // compiler: timed in the children that compiled them (JIT).
  std::string runner_dir;
  // Tests: the child of this candidate dies of SIGSEGV after compiling, or never answers.
  int inject_crash = -1, inject_hang = -1;
};

// Compiles and times each candidate (most promising first) on inputs of the estimated sizes
// (estimated_run.h), and returns one Timing per candidate. Each candidate is compiled in a child
// process forked from this one, which applies its schedule to its copy of the Funcs: ahead of
// time into the timing runner where a compiler is at hand (aot_candidate.h), then timed in a
// fresh process; else JIT, then timed in that child. Compiles run `compile_jobs` at a time, then
// the candidates are timed one at a time in interleaved rounds while this process holds the
// host-wide timing lock alone. A
// candidate whose compile throws, whose child crashes (Halide 14 can die in its own passes) or
// hangs costs that candidate alone; one whose run takes over five times the best so far keeps
// that time and is not timed again. This process never applies a candidate, so the caller's
// Funcs are as they were. Candidates not reached within the budget say so. Never throws for a
// candidate's sake.
std::vector<Timing> measure_candidates(const PipelineAnalysis &dag,
                                       const std::vector<Halide::Internal::Function> &outputs,
                                       const std::vector<StatePtr> &candidates,
                                       const MeasureSettings &settings, const Parameters &params);

} // namespace hkfac::sched
