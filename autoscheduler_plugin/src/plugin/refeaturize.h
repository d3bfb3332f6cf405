// Carrying archived samples to the current CPU schedule features without re-running their
// searches or their benchmarks.
#pragma once

#include <string>

#include "parameters.h"
#include "pipeline_analysis.h"

namespace hkfac::sched {

// Version 102 classified an update stage's loads against its innermost RVar even where the
// schedule vectorizes the pure dimension 0; version 103 classifies them against the vectorized
// loop (Access::lane_*); version 104 counts a row-blocked update's row-independent loads once
// per block (Access::row_shared_calls); version 105 counts an inlined Func's work in the copies
// that survive common-subexpression elimination (Access::inline_copies), not in calls. Only the
// four per-vector load features of vectorized updates and the inlined Funcs' work differ, and
// the file itself holds the stage's vector width, its blocked rows (its unrolled extent), which
// Funcs are inlined and the points their computed consumers compute, so each archived
// .featurization of this pipeline named in `list_file` ("old new" per line) is rewritten with
// those recomputed and written to `new`. Where an
// update's unrolled extent may be blocked rows or an unrolled innermost RVar alike, a third
// field tells which: the updates whose schedule source unrolls a pure Var, comma-separated
// "func.k" for func.update(k), or "-" for none. A file whose size or algorithm features do not
// match this pipeline, whose other rows would change (a featurization of other code), or whose
// unrolled extent is ambiguous with no third field, is refused by name on stderr and not
// written. Returns the number written; the summary goes to stderr.
int refeaturize(const PipelineAnalysis &dag, const Parameters &params, const std::string &list_file);

} // namespace hkfac::sched
