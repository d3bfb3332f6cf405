// Autoscheduler plugin "Replay": applies a schedule header, as Halide's generator writes it with
// `-e schedule`, to the pipeline it is given. Compiled around a table file (HKFAC_REPLAY_TABLE)
// that includes the headers and defines HKFAC_REPLAY_ENTRIES as {"name", apply_function} pairs:
// bench_schedules.py --replay makes one per header, so that an edited copy of a schedule is timed
// beside the schedulers' own; apps/tools/retime_samples.py one per app with all its archived
// schedules, picked per generator run by HKFAC_REPLAY_FUNCTION, to time them again.
#include "Halide.h"

#include <cstdlib>
#include <iterator>
#include <stdexcept>
#include <string>

#include HKFAC_REPLAY_TABLE

namespace {

struct Entry {
  const char *name;
  void (*apply)(Halide::Pipeline, Halide::Target);
};

const Entry kReplayed[] = {HKFAC_REPLAY_ENTRIES};

const Entry &chosen() {
  const char *want = std::getenv("HKFAC_REPLAY_FUNCTION");
  if ((want == nullptr || *want == '\0') && std::size(kReplayed) == 1)
    return kReplayed[0];
  if (want == nullptr || *want == '\0')
    throw std::runtime_error("Replay: set HKFAC_REPLAY_FUNCTION to one of the " +
                             std::to_string(std::size(kReplayed)) + " replayed schedules");
  for (const Entry &e : kReplayed)
    if (want == std::string(e.name))
      return e;
  throw std::runtime_error(std::string("Replay: no replayed schedule named ") + want);
}

void replay(const Halide::Pipeline &pipeline, const Halide::Target &target,
            const Halide::MachineParams &, Halide::AutoSchedulerResults *outputs) {
  const Entry &e = chosen();
  e.apply(pipeline, target);
  outputs->target = target;
  outputs->schedule_source = std::string("// replayed: ") + e.name + "\n";
}

struct Registration {
  Registration() { Halide::Pipeline::add_autoscheduler("Replay", replay); }
} registration;

} // namespace
