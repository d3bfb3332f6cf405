// Autoscheduler plugin "Timed": runs the scheduler named in HKFAC_TIMED_SCHEDULER and reports its
// wall time, so the bench measures autoscheduling alone in the same run that builds the variant.
#include "Halide.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace {

void timed_autoschedule(const Halide::Pipeline &pipeline, const Halide::Target &target,
                        const Halide::MachineParams &params,
                        Halide::AutoSchedulerResults *outputs) {
  const char *name = std::getenv("HKFAC_TIMED_SCHEDULER");
  if (name == nullptr || *name == '\0') {
    throw std::runtime_error(
        "Timed autoscheduler: set HKFAC_TIMED_SCHEDULER to the scheduler to run");
  }
  const auto start = std::chrono::steady_clock::now();
  // Pipeline is a handle: the copy schedules the same Funcs.
  *outputs = Halide::Pipeline(pipeline).auto_schedule(name, target, params);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "HKFAC_AUTOSCHEDULE_SECONDS %s %.6f\n", name, seconds);
}

struct Registration {
  Registration() { Halide::Pipeline::add_autoscheduler("Timed", timed_autoschedule); }
} registration;

} // namespace
