// Scatter updates on the GPU: RVars in blocks and threads, the update made atomic.
#pragma once

#include <string>

#include "pipeline_analysis.h"

namespace hkfac::sched {

// How an update stage of a device Root Func that has no pure loop (a histogram, a scatter: its
// left-hand side is computed from the RVars) runs on the device: its RVars go parallel and each
// write is atomic. Legal where Halide proves the update an associative and commutative op on one
// 32-bit value (int, uint or float: the device's atomic add, min and max, or a compare-and-swap
// loop) over at most two RVars. The innermost RVar splits by `threads` into threads (inner) and
// a serial loop inside each thread; the other RVar, if any, gives the blocks, else the innermost's
// outer half does. `ok` is false where the update stays a host loop.
struct AtomicLaunch {
  bool ok = false;
  std::string inner, outer; // the innermost RVar and the other one ("" when there is one)
  int threads = 1;          // threads per block
  double blocks = 1;        // blocks per launch
  double per_thread = 1;    // points per thread
};

AtomicLaunch gpu_atomic_launch(const FuncNode &f, const StageNode &s);

} // namespace hkfac::sched
