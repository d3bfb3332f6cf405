// SerialKernels: a ParallelLoopScope whose runner runs every iteration on the calling thread.
#include "hkfac/serial_kernels.h"

namespace hkfac {
namespace {

// In order, stopping at the first failure as Halide's pool reports the first error it sees.
int run_serially(void *user_context, ParallelLoopTask task, int min, int size, uint8_t *closure) {
  for (int i = min; i < min + size; ++i) {
    if (const int r = task(user_context, i, closure); r != 0)
      return r;
  }
  return 0;
}

} // namespace

SerialKernels::SerialKernels(bool on) {
  if (on)
    scope_.emplace(run_serially);
}

bool kernels_run_serially() { return current_parallel_loop_runner() == run_serially; }

} // namespace hkfac
