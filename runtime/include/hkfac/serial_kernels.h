// Running kernels on the calling thread, for one thread's calls.
#pragma once

#include <optional>

#include "hkfac/parallel_loops.h"

namespace hkfac {

// While an instance is alive (and `on`), the kernels this thread calls run their parallel loops
// on this thread, in order, instead of handing them to Halide's worker pool; other threads'
// calls are unaffected, and results are bit-identical either way (every loop iteration computes
// the same values wherever it runs).
//
// Why a caller would want it: a kernel's parallel threshold is a fixed problem size, tuned with
// calls back to back, while the pool's workers stay awake. When other work sits between the calls
// (an optimizer step on a small model, a search scoring one candidate at a time), the workers fall
// asleep between them and every parallel call pays for waking them, which for a kernel of tens of
// microseconds costs more than the second core gives back. Only the caller knows its call
// pattern, so this is the caller's choice. Scopes nest with every ParallelLoopScope (the
// innermost is in force): one that is off leaves an enclosing one in force.
class SerialKernels {
public:
  explicit SerialKernels(bool on = true);
  SerialKernels(const SerialKernels &) = delete;
  SerialKernels &operator=(const SerialKernels &) = delete;

private:
  std::optional<ParallelLoopScope> scope_;
};

// Whether the innermost parallel-loop scope on the calling thread is a SerialKernels one that is on.
bool kernels_run_serially();

} // namespace hkfac
