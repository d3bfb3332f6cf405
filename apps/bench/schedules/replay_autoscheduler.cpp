// Autoscheduler plugin "Replay": applies a schedule header, as Halide's generator writes it with
// `-e schedule`, to the pipeline it is given. bench_schedules.py --replay compiles one per header
// (HKFAC_REPLAY_HEADER, HKFAC_REPLAY_APPLY), so that an edited copy of a schedule can be timed
// beside the schedulers' own without pasting it into the app's generator.
#include "Halide.h"

#include HKFAC_REPLAY_HEADER

namespace {

void replay(const Halide::Pipeline &pipeline, const Halide::Target &target,
            const Halide::MachineParams &, Halide::AutoSchedulerResults *outputs) {
  HKFAC_REPLAY_APPLY(pipeline, target);
  outputs->target = target;
  outputs->schedule_source = "// replayed from " HKFAC_REPLAY_HEADER "\n";
}

struct Registration {
  Registration() { Halide::Pipeline::add_autoscheduler("Replay", replay); }
} registration;

} // namespace
