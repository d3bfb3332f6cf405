// The plain reference schedule shared by the evaluation apps, used when no autoscheduler runs.
#pragma once

#include "Halide.h"

namespace hkfac::pipelines {

// Halide's default schedule inlines every pure stage; chains such as stencil_chain or the pyramids
// of local_laplacian then grow exponentially and never finish compiling. Computing every stage at
// root, serially and without vectors, is the simplest schedule that always compiles and runs in
// bounded time, which is all a correctness reference needs.
inline void schedule_reference(const Halide::Func &output) {
  for (const auto &[name, function] : Halide::Internal::find_transitive_calls(output.function())) {
    if (name != output.name()) {
      Halide::Func(function).compute_root();
    }
  }
}

} // namespace hkfac::pipelines
