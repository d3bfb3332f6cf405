// The plain reference schedule shared by the evaluation apps, used when no autoscheduler runs.
#pragma once

#include "Halide.h"

// A build of an app that applies a schedule file an autoscheduler wrote (-e schedule) instead of
// the reference, as a user pasting it would (tests/autoscheduler: the pasted schedule must lower
// to the same code the autoscheduler's own build did).
#ifdef HKFAC_PASTED_SCHEDULE_FN
#include HKFAC_PASTED_SCHEDULE_HEADER
#endif

namespace hkfac::pipelines {

// Halide's default schedule inlines every pure stage; chains such as stencil_chain or the pyramids
// of local_laplacian then grow exponentially and never finish compiling. Computing every stage at
// root, serially and without vectors, is the simplest schedule that always compiles and runs in
// bounded time, which is all a correctness reference needs.
inline void schedule_reference(const Halide::Func &output) {
#ifdef HKFAC_PASTED_SCHEDULE_FN
  HKFAC_PASTED_SCHEDULE_FN(Halide::Pipeline(output), Halide::get_host_target());
  return;
#endif
  for (const auto &[name, function] : Halide::Internal::find_transitive_calls(output.function())) {
    if (name != output.name()) {
      Halide::Func(function).compute_root();
    }
  }
}

} // namespace hkfac::pipelines
