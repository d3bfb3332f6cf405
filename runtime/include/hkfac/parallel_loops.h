// Where the parallel loops of the kernels one thread calls run.
#pragma once

#include <cstdint>

namespace hkfac {

// One Halide parallel loop's body: iteration `index` of it, 0 or an error code.
using ParallelLoopTask = int (*)(void *user_context, int index, uint8_t *closure);
// Runs iterations [min, min + size) of `task` wherever it likes, and returns 0 or the first error
// code an iteration returned.
using ParallelLoopRunner = int (*)(void *user_context, ParallelLoopTask task, int min, int size,
                                   uint8_t *closure);

// While an instance is alive, the kernels this thread calls hand their parallel loops to `runner`
// instead of Halide's worker pool. Scopes nest (the innermost is in force); other threads' calls,
// and this thread's outside every scope, go to the handler the first scope replaced: Halide's
// pool, unless the program had installed another. A runner that hands iterations to other threads
// opens a scope on each of them if loops nested in an iteration should follow it.
//
// Implementation note: the first scope installs one do_par_for handler in the library's Halide
// runtime; it reads a thread-local runner. A program that sets its own handler later replaces it,
// and the scopes then have no effect. SerialKernels and kfac_torch's LibTorch threads are scopes.
class ParallelLoopScope {
public:
  explicit ParallelLoopScope(ParallelLoopRunner runner);
  ~ParallelLoopScope();
  ParallelLoopScope(const ParallelLoopScope &) = delete;
  ParallelLoopScope &operator=(const ParallelLoopScope &) = delete;

private:
  ParallelLoopRunner enclosing_;
};

// The runner in force on the calling thread; nullptr outside every scope.
ParallelLoopRunner current_parallel_loop_runner();

} // namespace hkfac
