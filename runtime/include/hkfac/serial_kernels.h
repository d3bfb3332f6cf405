// Running kernels on the calling thread, for one thread's calls.
#pragma once

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
// pattern, so this is the caller's choice. Scopes nest: one that is off leaves an enclosing one
// in force.
//
// Implementation note: the first scope installs a do_par_for handler in the library's Halide
// runtime that runs serially on threads inside a scope and forwards to the handler it replaced
// (Halide's own pool unless the program installed another) everywhere else. A program that sets
// its own handler later replaces this one, and the scopes then have no effect.
class SerialKernels {
public:
  explicit SerialKernels(bool on = true);
  ~SerialKernels();
  SerialKernels(const SerialKernels &) = delete;
  SerialKernels &operator=(const SerialKernels &) = delete;

private:
  bool on_;
};

// Whether the calling thread is inside a SerialKernels scope that is on.
bool kernels_run_serially();

} // namespace hkfac
