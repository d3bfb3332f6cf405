// Running hkfac's kernels on LibTorch's intra-op threads (internal header).
#pragma once

#include "hkfac/parallel_loops.h"

namespace hkfac::kfac_torch::detail {

// While an instance is alive on a thread, the parallel loops of the hkfac kernels that thread
// calls run on LibTorch's intra-op pool (at::parallel_for) instead of Halide's own worker pool.
//
// Why: a LibTorch process already keeps one OpenMP thread per core, and those threads spin for a
// while after each parallel operator before they sleep; Halide's workers started beside them
// share the cores with spinning threads (on 2 cores a K-FAC step of apps/torch_resnet took 10%
// longer). One pool for both keeps one thread per core.
// A ParallelLoopScope: other threads' calls, and this thread's outside it, are not affected, and
// an inner scope (hkfac::SerialKernels) is in force while it lives.
class KernelsOnTorchThreads {
public:
  KernelsOnTorchThreads();
  KernelsOnTorchThreads(const KernelsOnTorchThreads &) = delete;
  KernelsOnTorchThreads &operator=(const KernelsOnTorchThreads &) = delete;

private:
  ParallelLoopScope scope_;
};

} // namespace hkfac::kfac_torch::detail
