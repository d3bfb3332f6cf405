// Turning a chosen schedule into Halide scheduling calls, applied and printed as C++.
#pragma once

#include <string>
#include <vector>

#include "Halide.h"
#include "pipeline_analysis.h"
#include "schedule_state.h"

namespace hkfac::sched {

// Applies `state` to the pipeline's Funcs (unless `apply` is false) and returns the same
// directives as the body of Halide's apply_schedule_<name>(pipeline, target): Funcs fetched with
// pipeline.get_func(i), Vars and RVars by name, one statement per Func. Pure definitions split
// with ShiftInwards where the region holds a whole split, no input is read directly and the Func
// is not slid along a tile loop, all else with GuardWithIf; neither widens a Func's region beyond
// what the algorithm reads. A Func computed inside another's loops is stored in
// MemoryType::Stack, so its allocation is reused across iterations rather than made per iteration.
// An output that hosts such Funcs but leaves a dimension whole is also split by that dimension's
// estimate, in a specialization for extents that are multiples of it, so that their allocations
// have a constant size there.
std::string apply_schedule(const PipelineAnalysis &dag, const State &state,
                           const std::vector<Halide::Internal::Function> &outputs, bool apply);

// The fallback: every Func that may be scheduled at root, nothing else (the plain schedule the
// tests use as a reference). On a GPU target (`gpu`) each pure definition with a dimension runs
// on the device: dimension 0 in blocks of 64 threads, dimension 1 as a grid dimension, the rest
// host loops around the launch; updates and extern stages stay on the host. Applied and printed
// like apply_schedule.
std::string apply_fallback(const std::vector<Halide::Internal::Function> &outputs,
                           bool gpu = false);

// Snapshots of every Func's schedules, to undo a half-applied schedule before the fallback.
class ScheduleSnapshot {
public:
  explicit ScheduleSnapshot(const std::vector<Halide::Internal::Function> &outputs);
  void restore();

private:
  struct Saved {
    Halide::Internal::Function func;
    Halide::Internal::FuncSchedule schedule;
    std::vector<Halide::Internal::StageSchedule> stages;
    std::vector<Halide::Internal::Specialization> specializations; // of the pure definition
  };
  std::vector<Saved> saved_;
};

} // namespace hkfac::sched
